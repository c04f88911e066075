// The clients subquery.test.js relies on, checked without Syncline: a scripted server answers
// the shape protocol with a subquery shape's messages (tags, removed_tags, active_conditions,
// move-in and move-out events, is_move_in rows; shared/design/electric-subqueries.md §4), and
// both the Materializer (subquery.js) and the TanStack DB collection must hold the rows the
// script says after every step. So a disagreement with Syncline is the server's, not the
// test's materialiser.

import assert from 'node:assert/strict'
import http from 'node:http'
import { after, test } from 'node:test'
import { ShapeStream } from '@electric-sql/client'

import { openShape } from './subquery.js'

const SCHEMA = JSON.stringify({
  id: { type: 'int4', pk_index: 0 },
  parent_id: { type: 'int4' },
  urgent: { type: 'bool' },
  title: { type: 'text' },
})

/** A row message as the server sends it (values as text). */
function row(operation, value, headers = {}) {
  const text = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, v === null ? null : String(v)]))
  return {
    key: `"public"."child"/"${value.id}"`,
    value: text,
    headers: { operation, relation: ['public', 'child'], ...headers },
  }
}
const moveIn = (pos, value) => ({ headers: { event: 'move-in', patterns: [{ pos, value }], txids: [] } })
const moveOut = (pos, value) => ({ headers: { event: 'move-out', patterns: [{ pos, value }], txids: [] } })
const snapshotEnd = { headers: { control: 'snapshot-end', xmin: '1', xmax: '1', xip_list: [] } }

/**
 * Serves `snapshot` at offset -1, then `batches[k]` (with an up-to-date whose
 * global_last_seen_lsn is k + 1) at offset `k_0` once release() made it available; live
 * requests for a batch not yet released wait for it (at most 1 s, then a bare up-to-date).
 */
async function scriptedServer(snapshot, batches) {
  let released = 0
  const waiting = new Set()
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://localhost')
    const offset = url.searchParams.get('offset')
    const live = url.searchParams.get('live') === 'true'
    const send = (body, nextOffset) => {
      const upToDate = body.at(-1)?.headers.control === 'up-to-date'
      res.writeHead(200, {
        'content-type': 'application/json',
        'electric-handle': 'scripted-1',
        'electric-offset': nextOffset,
        'electric-schema': SCHEMA,
        'electric-cursor': String(Date.now()),
        ...(upToDate ? { 'electric-up-to-date': '' } : {}),
      })
      res.end(JSON.stringify(body))
    }
    if (offset === '-1') return send([...snapshot, snapshotEnd], '0_0')
    const k = Number(offset.split('_')[0])
    const reply = () => {
      waiting.delete(reply)
      clearTimeout(reply.timer)
      if (k < released) {
        send([...batches[k], { headers: { control: 'up-to-date', global_last_seen_lsn: String(k + 1) } }], `${k + 1}_0`)
      } else {
        send([{ headers: { control: 'up-to-date', global_last_seen_lsn: String(k) } }], offset)
      }
    }
    if (k < released || !live) return reply()
    reply.timer = setTimeout(reply, 1000)
    waiting.add(reply)
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${server.address().port}/v1/shape`,
    release() {
      released++
      for (const reply of [...waiting]) reply()
    },
    close() {
      for (const reply of [...waiting]) reply()
      server.close()
    },
  }
}

// The client keeps a 60 s timer that would hold the process open; end it once results are out.
after(() => setTimeout(() => process.exit(), 1000).unref())

test('Materializer and TanStack collection apply tags, active conditions and moves alike', async (t) => {
  // where: parent_id IN (SELECT id FROM parent WHERE active) OR urgent; h<n> is parent n's hash.
  const c = (id, parent_id, urgent, title = `t${id}`) => ({ id, parent_id, urgent, title })
  const tags = (h) => [`${h}/`, '/1']
  const snapshot = [
    row('insert', c(10, 1, false), { tags: tags('h1'), active_conditions: [true, false] }),
    row('insert', c(11, 1, true), { tags: tags('h1'), active_conditions: [true, true] }),
    row('insert', c(21, 2, true), { tags: tags('h2'), active_conditions: [false, true] }),
  ]
  const steps = [
    // [what, batch, the rows after it]
    [
      'parent 2 moves in with child 20',
      [
        moveIn(0, 'h2'),
        row('insert', c(20, 2, false), { is_move_in: true, tags: tags('h2'), active_conditions: [true, false] }),
        snapshotEnd,
      ],
      [c(10, 1, false), c(11, 1, true), c(20, 2, false), c(21, 2, true)],
    ],
    [
      'parent 2 moves out: 20 leaves, urgent 21 stays',
      [moveOut(0, 'h2')],
      [c(10, 1, false), c(11, 1, true), c(21, 2, true)],
    ],
    ['parent 1 moves out: 10 leaves, urgent 11 stays', [moveOut(0, 'h1')], [c(11, 1, true), c(21, 2, true)]],
    ['11 deleted', [row('delete', { id: 11 }, { tags: tags('h1') })], [c(21, 2, true)]],
    [
      '21 switches to parent 1 (partial update, removed_tags)',
      [
        row(
          'update',
          { id: 21, parent_id: 1 },
          { tags: tags('h1'), removed_tags: tags('h2'), active_conditions: [false, true] },
        ),
      ],
      [c(21, 1, true)],
    ],
    [
      'parent 1 moves in with 10; 21 gains position 0',
      [
        moveIn(0, 'h1'),
        row('insert', c(10, 1, false), { is_move_in: true, tags: tags('h1'), active_conditions: [true, false] }),
        snapshotEnd,
      ],
      [c(10, 1, false), c(21, 1, true)],
    ],
    [
      '21 no longer urgent, held by its parent',
      [
        row(
          'update',
          { id: 21, urgent: false },
          { tags: tags('h1'), removed_tags: [], active_conditions: [true, false] },
        ),
      ],
      [c(10, 1, false), c(21, 1, false)],
    ],
    ['a move-out of parent 2 no longer touches 21', [moveOut(0, 'h2')], [c(10, 1, false), c(21, 1, false)]],
    [
      'a log insert',
      [row('insert', c(30, 3, false, 'x'), { tags: tags('h3'), active_conditions: [true, false] })],
      [c(10, 1, false), c(21, 1, false), c(30, 3, false, 'x')],
    ],
    ['parent 1 moves out: 10 and 21 leave', [moveOut(0, 'h1')], [c(30, 3, false, 'x')]],
    [
      'parent 3 moves out and in with a title change between',
      [
        moveOut(0, 'h3'),
        moveIn(0, 'h3'),
        row('insert', c(30, 3, false, 'y'), { is_move_in: true, tags: tags('h3'), active_conditions: [true, false] }),
        snapshotEnd,
      ],
      [c(30, 3, false, 'y')],
    ],
  ]

  await runScript(t, 'parent_id IN (SELECT id FROM parent WHERE active) OR urgent', snapshot, steps)
})

test('a move-in sets a position that a later move-out of another position relies on', async (t) => {
  // where: parent_id IN (SELECT id FROM parent WHERE active) OR parent_id IN (SELECT id FROM
  // parent WHERE value > 5); a<n>, b<n>: parent n's hash at position 0, 1.
  const c = (id, parent_id) => ({ id, parent_id, urgent: false, title: `t${id}` })
  const tags = (n) => [`a${n}/`, `/b${n}`]
  const snapshot = [
    row('insert', c(10, 1), { tags: tags(1), active_conditions: [true, false] }),
    row('insert', c(20, 2), { tags: tags(2), active_conditions: [false, true] }),
  ]
  const steps = [
    ['parent 2 moves in at position 0, no rows', [moveIn(0, 'a2')], [c(10, 1), c(20, 2)]],
    ['parent 2 moves out at position 1: 20 stays', [moveOut(1, 'b2')], [c(10, 1), c(20, 2)]],
    ['parent 2 moves out at position 0: 20 leaves', [moveOut(0, 'a2')], [c(10, 1)]],
    ['a move-out of a position 10 never had', [moveOut(1, 'b1')], [c(10, 1)]],
    [
      'a log insert',
      [row('insert', c(30, 3), { tags: tags(3), active_conditions: [false, true] })],
      [c(10, 1), c(30, 3)],
    ],
    ['parent 1 moves out at position 0: 10 leaves', [moveOut(0, 'a1')], [c(30, 3)]],
  ]
  await runScript(
    t,
    'parent_id IN (SELECT id FROM parent WHERE active) OR parent_id IN (SELECT id FROM parent WHERE value > 5)',
    snapshot,
    steps,
  )
})

/**
 * Serves `snapshot` and then each step's batch; after each, both clients must hold the step's
 * rows. A step: [what, batch, rows after it].
 */
async function runScript(t, where, snapshot, steps) {
  const server = await scriptedServer(
    snapshot,
    steps.map(([, batch]) => batch),
  )
  t.after(() => server.close())
  let expected = snapshot.map((m) => parseRow(m.value))
  const fakeStack = {
    shapeUrl: server.url,
    exchanges: [],
    clientErrors: [],
    stream: (options) =>
      new ShapeStream({ url: server.url, ...options, onError: (e) => fakeStack.clientErrors.push(e) }),
    rows: async () => expected,
  }
  const shape = openShape(fakeStack, t, { table: 'child', where })
  await shape.check('snapshot', 5000)
  for (const [k, [what, , rows]] of steps.entries()) {
    server.release()
    // The materialiser has the batch once it saw the batch's up-to-date; the collection reads
    // the same responses in order, so a later step also checks what it did with this one.
    await eventuallyTrue(() =>
      shape.raw.messages.some(
        (m) => m.headers.control === 'up-to-date' && m.headers.global_last_seen_lsn === String(k + 1),
      ),
    )
    expected = rows
    await shape.check(what, 5000)
  }
  await shape.settle('at the end')
  assert.deepEqual(shape.raw.problems, [])
}

/** A row of the script as the client parses it. */
function parseRow(text) {
  return Object.fromEntries(
    Object.entries(text).map(([k, v]) => [k, k === 'title' ? v : k === 'urgent' ? v === 'true' : Number(v)]),
  )
}

async function eventuallyTrue(predicate, timeoutMs = 5000) {
  const deadline = Date.now() + timeoutMs
  while (!predicate()) {
    assert.ok(Date.now() < deadline, 'timed out')
    await new Promise((r) => setTimeout(r, 5))
  }
}

// Several Syncline servers on one storage directory behind nginx (deploy/nginx/syncline.conf),
// while a writer commits small transactions continuously:
//
// - a rolling deploy: writer + replica; five times, a new server starts as a standby, the
//   writer is SIGTERMed and the standby takes over;
// - a crash: writer + standby + replica; ten times, the writer is SIGKILLed, the standby takes
//   over and a new standby starts in its place.
//
// Clients are the official @electric-sql/client (long-poll and SSE) through nginx; some start
// during the hand-overs, on shapes that do not exist yet (only the writer creates them: nginx
// must retry the replicas' and standbys' 503s elsewhere). When the writes stop, every client
// must hold exactly the rows of its shape (nothing lost, nothing twice, no change of an absent
// row), no client may have had an error callback, and, for the rolling deploy, nginx may not
// have sent any client a status other than 2xx/304. The counts are printed either way.

import assert from 'node:assert/strict'
import { existsSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'

import pg from 'pg'

import { assertSameRows, rawFollow } from './harness.js'
import { Clients, Fleet, NGINX_BIN, describeError, summarizeAccess, test } from './fleet.js'

const SKIP = existsSync(NGINX_BIN)
  ? false
  : `${NGINX_BIN} is missing: these tests need nginx (Debian: apt-get install nginx-light; scripts/setup installs it)`
if (SKIP) console.log(`# rolling.test.js skipped: ${SKIP}`)

/** Debug builds, two cores: generous. */
const TEST_TIMEOUT_MS = 15 * 60_000
const SEED_ROWS = 300
/** Pause after each transaction: about 20 small transactions a second. */
const WRITE_PAUSE_MS = 40
/** How long clients get to reach Postgres's rows once the writes stopped. */
const CONVERGE_TIMEOUT_MS = 120_000
/** How long a standby gets to report role writer after the writer stopped or died. */
const TAKEOVER_TIMEOUT_MS = 60_000
/** Writes between two hand-overs. */
const ROUND_PAUSE_MS = 2000

const SEED_SQL = `
  CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, note text);
  INSERT INTO items SELECT g, (g * 7) % 1000, 'seed' FROM generate_series(1, ${SEED_ROWS}) g;
`

/** The shapes followed from the start: several definitions, long-poll and SSE. */
const SHAPES = [
  { name: 'all/long-poll', params: { table: 'items' }, query: 'SELECT * FROM items' },
  {
    name: 'where/sse',
    params: { table: 'items', where: 'v < $1', params: ['500'] },
    sse: true,
    query: 'SELECT * FROM items WHERE v < 500',
  },
  {
    name: 'columns/long-poll',
    params: { table: 'items', columns: ['id', 'v'], replica: 'full' },
    query: 'SELECT id, v FROM items',
  },
  { name: 'all/sse', params: { table: 'items' }, sse: true, query: 'SELECT * FROM items' },
  // The same requests as the first client's, at the same moments: nginx collapses them.
  { name: 'all/long-poll#2', params: { table: 'items' }, query: 'SELECT * FROM items' },
]

/** A shape no server has yet, opened during hand-over `round` (the writer must create it). */
function newShape(round, sse) {
  const low = (round * 97) % 900
  return {
    name: `new-${round}/${sse ? 'sse' : 'long-poll'}`,
    params: { table: 'items', where: `v >= ${low} AND v < ${low + 100}` },
    sse,
    query: `SELECT * FROM items WHERE v >= ${low} AND v < ${low + 100}`,
  }
}

/**
 * Commits small random transactions (inserts, updates of v or note, key changes, deletes) until
 * stop(), which resolves to the number of transactions.
 */
function startLoad(url) {
  const client = new pg.Client({ connectionString: url })
  const ids = Array.from({ length: SEED_ROWS }, (_, i) => i + 1)
  let nextId = SEED_ROWS + 1
  let stopping = false
  let transactions = 0
  const pick = () => ids.splice(Math.floor(Math.random() * ids.length), 1)[0]
  const statement = () => {
    const r = Math.random()
    if (r < 0.35 || ids.length < 50) {
      const id = nextId++
      ids.push(id)
      return `INSERT INTO items VALUES (${id}, ${Math.floor(Math.random() * 1000)}, 'w')`
    }
    const id = pick()
    if (r < 0.6) {
      ids.push(id)
      return `UPDATE items SET v = ${Math.floor(Math.random() * 1000)} WHERE id = ${id}`
    }
    if (r < 0.7) {
      ids.push(id)
      return `UPDATE items SET note = 'n${transactions}' WHERE id = ${id}`
    }
    if (r < 0.8) {
      const moved = nextId++
      ids.push(moved)
      return `UPDATE items SET id = ${moved} WHERE id = ${id}`
    }
    return `DELETE FROM items WHERE id = ${id}`
  }
  const done = (async () => {
    await client.connect()
    try {
      while (!stopping) {
        const statements = Array.from({ length: 1 + Math.floor(Math.random() * 3) }, statement)
        await client.query(`BEGIN; ${statements.join('; ')}; COMMIT`)
        transactions++
        await sleep(WRITE_PAUSE_MS)
      }
    } finally {
      await client.end()
    }
    return transactions
  })()
  return {
    stop() {
      stopping = true
      return done
    },
  }
}

/**
 * Waits until every client holds its query's rows; a client whose stream stopped with an error
 * fails at once. Resolves to the ms it took.
 */
async function converge(fleet, clients, timeoutMs = CONVERGE_TIMEOUT_MS) {
  const start = Date.now()
  for (const c of clients.list) {
    for (;;) {
      if (c.stream.error) throw new Error(`${c.name}: stream stopped: ${describeError(c.stream.error)}`)
      try {
        assertSameRows(c.shape.currentRows, await fleet.rows(c.query), c.name)
        break
      } catch (error) {
        if (Date.now() - start > timeoutMs) throw error
      }
      await sleep(100)
    }
  }
  return Date.now() - start
}

/** A shape's query string as the protocol spells it (without offset/handle). */
function shapeQuery(params) {
  const q = new URLSearchParams({ table: params.table })
  if (params.where) q.set('where', params.where)
  for (const [i, v] of (params.params ?? []).entries()) q.set(`params[${i + 1}]`, v)
  if (params.columns) q.set('columns', params.columns.join(','))
  if (params.replica) q.set('replica', params.replica)
  return q.toString()
}

/**
 * Reads every shape from offset -1 to up-to-date on each running server directly: each server
 * must give the same handle, final offset and messages. Returns one line per shape.
 */
async function compareServers(fleet, shapes) {
  const running = fleet.servers.filter((s) => s.alive)
  const lines = []
  for (const shape of shapes) {
    const query = shapeQuery(shape.params)
    const reads = []
    for (const s of running) reads.push({ server: s.name, ...(await rawFollow(`${s.baseUrl}/v1/shape`, query)) })
    const [first, ...rest] = reads
    for (const other of rest) {
      assert.equal(other.handle, first.handle, `${shape.name}: handle on ${other.server} vs ${first.server}`)
      assert.equal(other.offset, first.offset, `${shape.name}: offset on ${other.server} vs ${first.server}`)
      assert.equal(
        JSON.stringify(other.messages),
        JSON.stringify(first.messages),
        `${shape.name}: messages on ${other.server} vs ${first.server}`,
      )
    }
    lines.push(
      `${shape.name}: ${reads.map((r) => r.server).join(' = ')} (handle ${first.handle}, offset ${first.offset}, ${first.messages.length} messages)`,
    )
  }
  return lines
}

/** What both tests print and check once the clients converged (before they are stopped). */
function outcome(nginx, clients) {
  const access = summarizeAccess(nginx.accessLog())
  const failedExchanges = clients.failedExchanges()
  const problems = clients.list.flatMap((c) => c.log.problems.map((p) => `${c.name}: ${p}`))
  // Re-delivered changes: only SSE clients, only of the transaction a reconnect resumed in.
  for (const c of clients.list) {
    if (c.log.resent.length === 0) continue
    if (!c.sse) {
      problems.push(
        `${c.name}: a long-poll client was sent changes it already had: ${c.log.resent.slice(0, 5).join(', ')}`,
      )
      continue
    }
    const resumedAt = new Set(
      clients.exchanges
        .filter((e) => e.client === c.name && e.url.includes('live_sse=true'))
        .map((e) => new URL(e.url).searchParams.get('offset'))
        .filter((o) => o.endsWith('_0'))
        .map((o) => o.slice(0, -2)),
    )
    const unexplained = c.log.resent.filter((id) => !resumedAt.has(id.split('/')[0]))
    if (unexplained.length) {
      problems.push(
        `${c.name}: changes sent again outside the transaction an SSE reconnect resumed in: ${unexplained.slice(0, 5).join(', ')}`,
      )
    }
  }
  const resent = clients.list.filter((c) => c.log.resent.length).map((c) => `${c.name} ${c.log.resent.length}`)
  const sseFallback = clients.list
    .filter((c) => c.sse)
    .map((c) => {
      const live = clients.exchanges.filter((e) => e.client === c.name && e.url.includes('live=true'))
      const longPoll = live.filter((e) => !e.url.includes('live_sse=true')).length
      return `${c.name}: ${live.length - longPoll} SSE, ${longPoll} long-poll live requests`
    })
  return { access, failedExchanges, problems, sseFallback, resent }
}

function report(title, lines) {
  console.log(`# ---- ${title} ----`)
  for (const line of lines.flatMap((l) => String(l).split('\n'))) console.log(`# ${line}`)
}

function describeOutcome({ access, failedExchanges, problems, sseFallback, resent }, clients) {
  return [
    `nginx: ${access.requests} requests; by status ${JSON.stringify(access.byStatus)}; ` +
      `cache ${JSON.stringify(access.cache)}`,
    `nginx: ${access.retried} requests retried on another server transparently, after ` +
      `${JSON.stringify(access.retriedAfter)} (502 = connection refused/reset); the slowest took ` +
      `${access.retriedMaxTime} s`,
    `nginx: ${access.failed} responses to clients that were not 2xx/304` +
      (access.failures.length ? `:\n  ${access.failures.slice(0, 30).join('\n  ')}` : ''),
    `nginx: ${access.clientClosed} requests the client gave up (499)`,
    `clients: ${clients.list.length}; ${clients.exchanges.length} HTTP exchanges; ` +
      `${failedExchanges.length} not 2xx/304 or failed` +
      (failedExchanges.length
        ? `:\n  ${failedExchanges
            .slice(0, 20)
            .map(
              (e) =>
                `[${e.client}] ${e.method} ${decodeURIComponent(e.url)} -> ${e.error ?? `${e.status} ${e.body ?? ''}`}`,
            )
            .join('\n  ')}`
        : ''),
    `clients: ${clients.errors.length} onError callbacks` +
      (clients.errors.length
        ? `:\n  ${clients.errors.map((e) => `${e.client}: ${describeError(e.error)}`).join('\n  ')}`
        : ''),
    `clients: ${problems.length} log problems (duplicate insert, change of an absent row, change re-sent unexplained)` +
      (problems.length ? `:\n  ${problems.slice(0, 20).join('\n  ')}` : ''),
    `clients: changes re-sent after an SSE reconnect (the client's resume-at-<lsn>_0 quirk): ${resent.join(', ') || 'none'}`,
    ...sseFallback,
  ]
}

test(
  'rolling deploy behind nginx: five SIGTERM hand-overs under writes, clients see no error',
  { timeout: TEST_TIMEOUT_MS, skip: SKIP },
  async () => {
    const fleet = await Fleet.start({ sql: SEED_SQL, slots: 3 })
    const a = await fleet.startServer({ name: 'A', slot: 0 })
    await a.waitRole('writer')
    const replica = await fleet.startServer({ name: 'R', slot: 2, role: 'replica' })
    await replica.waitRole('replica')
    const nginx = await fleet.startNginx()
    const clients = new Clients(fleet, nginx.shapeUrl)
    for (const s of SHAPES) clients.open(s.name, s)
    const initialMs = await converge(fleet, clients)

    const load = startLoad(fleet.cluster.url)
    const rounds = []
    let writer = a
    let freeSlot = 1
    const names = 'BCDEF'
    for (let round = 1; round <= 5; round++) {
      await sleep(ROUND_PAUSE_MS)
      const next = await fleet.startServer({ name: names[round - 1], slot: freeSlot })
      const role = (await next.health()).body.role
      assert.equal(role, 'standby', `${next.name} started as ${role}, not standby`)
      await sleep(1000) // nginx sends the standby reads for a while
      const sigterm = Date.now()
      const stopping = writer.terminate()
      // A client arriving during the hand-over, on a shape only the writer can create.
      const fresh = newShape(round, round % 2 === 1)
      clients.open(fresh.name, fresh)
      await next.waitRole('writer', TAKEOVER_TIMEOUT_MS)
      const takeoverMs = Date.now() - sigterm
      const { ms: exitMs, status } = await stopping
      rounds.push(
        `round ${round}: ${writer.name} SIGTERMed (exited after ${exitMs} ms, ${status}); ${next.name} (standby, serving ${next.servingAfterMs} ms after start) writer ${takeoverMs} ms after the SIGTERM`,
      )
      freeSlot = writer.slot
      writer = next
    }
    await sleep(ROUND_PAUSE_MS)
    const transactions = await load.stop()
    const late = clients.open('late/where/long-poll', { ...SHAPES[1], sse: false })
    const convergeMs = await converge(fleet, clients)
    const result = outcome(nginx, clients)
    const servers = await compareServers(fleet, clients.list)

    report('rolling deploy', [
      `initial sync ${initialMs} ms; ${transactions} transactions during the deploy; clients converged ${convergeMs} ms after the writes stopped`,
      ...rounds,
      ...describeOutcome(result, clients),
      'same handle, offset and messages on every running server:',
      ...servers,
    ])
    assert.ok(transactions > 100, `only ${transactions} transactions: the writes were not sustained`)
    assert.ok(late.shape.currentRows.length > 0)
    assert.deepEqual(result.problems, [], 'client log problems')
    assert.equal(clients.errors.length, 0, 'client onError callbacks')
    assert.equal(
      result.access.failed,
      0,
      `nginx sent clients non-2xx/304 responses:\n${result.access.failures.join('\n')}`,
    )
    assert.equal(result.failedExchanges.length, 0, 'client HTTP exchanges not 2xx/304')
  },
)

test(
  'writer SIGKILLed ten times behind nginx: a standby takes over, no row lost or duplicated',
  { timeout: TEST_TIMEOUT_MS, skip: SKIP },
  async () => {
    const fleet = await Fleet.start({ sql: SEED_SQL, slots: 3 })
    let writer = await fleet.startServer({ name: 'K0', slot: 0 })
    await writer.waitRole('writer')
    let standby = await fleet.startServer({ name: 'K1', slot: 1 })
    await standby.waitRole('standby')
    const replica = await fleet.startServer({ name: 'R', slot: 2, role: 'replica' })
    await replica.waitRole('replica')
    const nginx = await fleet.startNginx()
    const clients = new Clients(fleet, nginx.shapeUrl)
    for (const s of SHAPES) clients.open(s.name, s)
    const initialMs = await converge(fleet, clients)

    const load = startLoad(fleet.cluster.url)
    const rounds = []
    for (let round = 1; round <= 10; round++) {
      await sleep(ROUND_PAUSE_MS)
      const killed = Date.now()
      await writer.kill()
      if (round % 2 === 0) {
        const fresh = newShape(round, round % 4 === 2)
        clients.open(fresh.name, fresh)
      }
      await standby.waitRole('writer', TAKEOVER_TIMEOUT_MS)
      const takeoverMs = Date.now() - killed
      const next = await fleet.startServer({ name: `K${round + 1}`, slot: writer.slot })
      const role = (await next.health()).body.role
      assert.equal(role, 'standby', `${next.name} started as ${role}, not standby`)
      rounds.push(
        `round ${round}: ${writer.name} SIGKILLed; ${standby.name} writer ${takeoverMs} ms later; ${next.name} standby ${next.servingAfterMs} ms after start`,
      )
      writer = standby
      standby = next
    }
    await sleep(ROUND_PAUSE_MS)
    const transactions = await load.stop()
    const late = clients.open('late/columns/long-poll', SHAPES[2])
    const convergeMs = await converge(fleet, clients)
    const result = outcome(nginx, clients)
    const servers = await compareServers(fleet, clients.list)

    report('writer SIGKILL', [
      `initial sync ${initialMs} ms; ${transactions} transactions during the kills; clients converged ${convergeMs} ms after the writes stopped`,
      ...rounds,
      ...describeOutcome(result, clients),
      'same handle, offset and messages on every running server:',
      ...servers,
    ])
    assert.ok(transactions > 100, `only ${transactions} transactions: the writes were not sustained`)
    assert.ok(late.shape.currentRows.length > 0)
    assert.deepEqual(result.problems, [], 'client log problems')
    assert.equal(clients.errors.length, 0, 'client onError callbacks')
  },
)

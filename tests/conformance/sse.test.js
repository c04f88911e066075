// Live mode over Server-Sent Events (liveSse: true): after the initial sync, changes must arrive
// on text/event-stream responses, without the client falling back to long-polling.

import assert from 'node:assert/strict'

import { assertSameRows, rowsOf, startStack, test, trackMessages } from './harness.js'

const stack = await startStack(`
  CREATE TABLE sse_items (id int PRIMARY KEY, title text, n int);
  INSERT INTO sse_items SELECT g, 'row ' || g, g FROM generate_series(1, 10) g;
`)

test('liveSse: inserts, updates and deletes arrive over text/event-stream', async () => {
  const shape = stack.shape({ params: { table: 'sse_items' }, liveSse: true })
  const log = trackMessages(shape.stream)
  const all = 'SELECT * FROM sse_items'
  assertSameRows(await rowsOf(shape), await stack.rows(all))
  const writes = [
    `INSERT INTO sse_items VALUES (11, 'new', 11), (12, 'new', 12)`,
    `UPDATE sse_items SET title = 'changed', n = NULL WHERE id IN (1, 11)`,
    `DELETE FROM sse_items WHERE id IN (2, 12)`,
    `BEGIN; INSERT INTO sse_items VALUES (13, 'tx', 13); UPDATE sse_items SET n = -n WHERE id = 3; COMMIT`,
  ]
  for (const sql of writes) {
    await stack.sql(sql)
    await stack.untilRows(shape, all)
  }
  assert.deepEqual(log.problems, [])

  const live = stack.exchanges.filter((e) => e.url.includes('table=sse_items') && e.url.includes('live=true'))
  assert.ok(live.length > 0, 'the client should have gone live')
  for (const e of live) {
    assert.ok(e.url.includes('live_sse=true'), `a live request without live_sse (fallback to long-polling): ${e.url}`)
    if (e.status !== undefined) {
      assert.equal(e.status, 200, `${e.url} -> ${e.status} ${e.responseBody ?? ''}`)
      assert.match(e.contentType ?? '', /^text\/event-stream/, `${e.url} content-type`)
    }
  }
})

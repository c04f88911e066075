// Chunking at a 10,000-byte threshold: responses stop at chunk ends, and the client still
// assembles the whole table, from the snapshot and from a live transaction spanning chunks.

import assert from 'node:assert/strict'

import { assertSameRows, CHUNK_BYTES, rawFollow, rowsOf, startStack, test, trackMessages } from './harness.js'

const ROWS = 2000

const stack = await startStack(`
  CREATE TABLE big (id int PRIMARY KEY, title text, n int);
  INSERT INTO big SELECT g, repeat('x', 60) || g, g FROM generate_series(1, ${ROWS}) g;
`)

test('a raw offset=-1 response stops at the first chunk end', async () => {
  const res = await fetch(`${stack.shapeUrl}?table=big&offset=-1`)
  assert.equal(res.status, 200)
  const body = await res.json()
  const rows = body.filter((m) => m.key)
  assert.ok(rows.length > 0, 'the first chunk holds rows')
  assert.ok(rows.length < ROWS, `the first response should be one chunk, got all ${rows.length} rows`)
  assert.ok(!res.headers.has('electric-up-to-date'), 'offset=-1 is never up-to-date')
})

test('following the offsets by hand yields every row once, in chunks near the threshold', async () => {
  const { messages, responses } = await rawFollow(stack.shapeUrl, 'table=big')
  const ids = messages.filter((m) => m.key).map((m) => Number(m.value.id))
  assert.equal(new Set(ids).size, ids.length, 'no row twice')
  assert.deepEqual(ids.sort((a, b) => a - b), Array.from({ length: ROWS }, (_, i) => i + 1))
  const snapshotChunks = responses.filter((r) => r.count > 1)
  assert.ok(snapshotChunks.length >= 10, `expected many chunks, got ${snapshotChunks.length}`)
  for (const r of snapshotChunks.slice(0, -1)) {
    assert.ok(r.bytes >= CHUNK_BYTES / 2, `a full chunk of ${r.bytes} bytes is far below the threshold: ${r.url}`)
    assert.ok(r.bytes < CHUNK_BYTES * 2, `a chunk of ${r.bytes} bytes is far above the threshold: ${r.url}`)
  }
})

test('the client syncs a many-chunk table completely, and a live transaction spanning chunks', async () => {
  const shape = stack.shape({ params: { table: 'big' } })
  const log = trackMessages(shape.stream)
  assertSameRows(await rowsOf(shape), await stack.rows('SELECT * FROM big'))
  await stack.sql(`BEGIN;
    INSERT INTO big SELECT g, repeat('y', 60) || g, g FROM generate_series(${ROWS + 1}, ${ROWS * 2}) g;
    UPDATE big SET n = -n WHERE id % 7 = 0;
    DELETE FROM big WHERE id % 11 = 0;
    COMMIT`)
  await stack.untilRows(shape, 'SELECT * FROM big')
  assert.deepEqual(log.problems, [])
})

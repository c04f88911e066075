// Invalidation: after TRUNCATE or DELETE /v1/shape the server answers 409 with a new handle; the
// client must refetch from scratch and end with the table's rows, under the new handle.

import assert from 'node:assert/strict'

import { assertSameRows, eventually, rowsOf, startStack, test, trackMessages } from './harness.js'

const stack = await startStack(`
  CREATE TABLE truncated (id int PRIMARY KEY, title text);
  INSERT INTO truncated SELECT g, 'old ' || g FROM generate_series(1, 20) g;
  CREATE TABLE deleted (id int PRIMARY KEY, title text);
  INSERT INTO deleted SELECT g, 'row ' || g FROM generate_series(1, 20) g;
`)

/** Waits until the shape holds `table`'s rows under a handle other than `oldHandle`. */
async function refetched(shape, log, table, oldHandle) {
  await eventually(async () => {
    assert.notEqual(shape.handle, oldHandle, 'the client should move to a new handle')
    assertSameRows(shape.currentRows, await stack.rows(`SELECT * FROM ${table}`))
  })
  const refetches = log.messages.filter((m) => m.headers.control === 'must-refetch')
  assert.equal(refetches.length, 1, 'the client should see exactly one must-refetch')
  assert.ok(
    stack.exchanges.some((e) => e.status === 409 && e.url.includes(`handle=${oldHandle}`)),
    'the old handle should have been answered 409',
  )
  assert.deepEqual(log.problems, [])
}

test('409 after TRUNCATE: the client refetches and ends with the table rows', async () => {
  const shape = stack.shape({ params: { table: 'truncated' } })
  const log = trackMessages(shape.stream)
  assert.equal((await rowsOf(shape)).length, 20)
  const oldHandle = shape.handle
  await stack.sql(`TRUNCATE truncated`)
  await stack.sql(`INSERT INTO truncated VALUES (100, 'new'), (101, 'new')`)
  await refetched(shape, log, 'truncated', oldHandle)
  await stack.sql(`INSERT INTO truncated VALUES (102, 'after the refetch')`)
  await stack.untilRows(shape, 'SELECT * FROM truncated')
})

test('409 after DELETE /v1/shape: the client refetches and ends with the table rows', async () => {
  const shape = stack.shape({ params: { table: 'deleted' } })
  const log = trackMessages(shape.stream)
  assert.equal((await rowsOf(shape)).length, 20)
  const oldHandle = shape.handle
  const res = await fetch(`${stack.shapeUrl}?handle=${oldHandle}`, { method: 'DELETE' })
  assert.equal(res.status, 202, await res.text())
  await stack.sql(`UPDATE deleted SET title = 'changed' WHERE id <= 5; DELETE FROM deleted WHERE id > 15`)
  await refetched(shape, log, 'deleted', oldHandle)
  await stack.sql(`INSERT INTO deleted VALUES (200, 'after the refetch')`)
  await stack.untilRows(shape, 'SELECT * FROM deleted')
})

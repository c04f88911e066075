// Shapes with the official client: initial sync, live changes, where/params, columns, replica
// and offset=now. Postgres is the oracle: client rows are compared with SELECT.

import assert from 'node:assert/strict'

import { assertSameRows, eventually, rowsOf, startStack, test, trackMessages, upToDate } from './harness.js'

const stack = await startStack(`
  CREATE TABLE items (id int PRIMARY KEY, title text, n int);
  INSERT INTO items SELECT g, 'item ' || g, g * 10 FROM generate_series(1, 300) g;
  CREATE TABLE live_items (id int PRIMARY KEY, title text, n int);
  INSERT INTO live_items VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3);
  CREATE TABLE filtered (id int PRIMARY KEY, title text);
  INSERT INTO filtered SELECT g, 't' || g FROM generate_series(1, 10) g;
  CREATE TABLE secrets (id int PRIMARY KEY, title text, secret text);
  INSERT INTO secrets VALUES (1, 'one', 's1'), (2, 'two', 's2');
  CREATE TABLE replicated (id int PRIMARY KEY, title text, n int);
  INSERT INTO replicated VALUES (1, 'one', 1), (2, 'two', 2);
  CREATE TABLE later (id int PRIMARY KEY, title text);
  INSERT INTO later VALUES (1, 'before'), (2, 'before');
`)

test('initial sync: the rows equal SELECT', async () => {
  const shape = stack.shape({ params: { table: 'items' } })
  const rows = await rowsOf(shape)
  assert.equal(rows.length, 300)
  assertSameRows(rows, await stack.rows('SELECT * FROM items'))
})

test('live inserts, updates and deletes reach the client', async () => {
  const shape = stack.shape({ params: { table: 'live_items' } })
  await rowsOf(shape)
  const all = 'SELECT * FROM live_items'
  await stack.sql(`INSERT INTO live_items VALUES (4, 'd', 4), (5, 'e', 5), (6, 'f', NULL)`)
  await stack.untilRows(shape, all)
  await stack.sql(`UPDATE live_items SET title = 'a2' WHERE id = 1; UPDATE live_items SET n = NULL WHERE id = 2`)
  await stack.untilRows(shape, all)
  await stack.sql(`DELETE FROM live_items WHERE id = 2`)
  await stack.untilRows(shape, all)
  await stack.sql(`BEGIN;
    INSERT INTO live_items VALUES (10, 'short-lived', 10);
    UPDATE live_items SET title = 'gone soon' WHERE id = 10;
    DELETE FROM live_items WHERE id = 10;
    UPDATE live_items SET n = 42, title = 'c2' WHERE id = 3;
    INSERT INTO live_items SELECT g, 'bulk', g FROM generate_series(20, 60) g;
    COMMIT`)
  await stack.untilRows(shape, all)
  await stack.sql(`UPDATE live_items SET id = 100 WHERE id = 4`)
  await stack.untilRows(shape, all)
})

test('where with params, in the record and the array form', async () => {
  const record = stack.shape({ params: { table: 'filtered', where: 'id > $1', params: { 1: '5' } } })
  const array = stack.shape({
    params: { table: 'filtered', where: 'id > $1 AND title <> $2', params: ['2', 't7'] },
  })
  const recordQuery = 'SELECT * FROM filtered WHERE id > 5'
  const arrayQuery = `SELECT * FROM filtered WHERE id > 2 AND title <> 't7'`
  assertSameRows(await rowsOf(record), await stack.rows(recordQuery))
  assertSameRows(await rowsOf(array), await stack.rows(arrayQuery))
  await stack.sql(`BEGIN;
    INSERT INTO filtered VALUES (11, 't11'), (0, 't0');
    UPDATE filtered SET id = 20 WHERE id = 1;
    UPDATE filtered SET id = -1 WHERE id = 9;
    UPDATE filtered SET title = 't7' WHERE id = 8;
    UPDATE filtered SET title = 'seven' WHERE id = 7;
    COMMIT`)
  await stack.untilRows(record, recordQuery)
  await stack.untilRows(array, arrayQuery)
})

test('columns: only the selected columns arrive, and the primary key is required', async () => {
  const shape = stack.shape({ params: { table: 'secrets', columns: ['id', 'title'] } })
  const query = 'SELECT id, title FROM secrets'
  assertSameRows(await rowsOf(shape), await stack.rows(query))
  await stack.sql(`INSERT INTO secrets VALUES (3, 'three', 's3')`)
  await stack.untilRows(shape, query)
  await stack.sql(`UPDATE secrets SET secret = 'changed' WHERE id = 1; UPDATE secrets SET title = 'uno' WHERE id = 1`)
  await stack.untilRows(shape, query)
  for (const row of shape.currentRows) assert.deepEqual(Object.keys(row).sort(), ['id', 'title'])

  const withoutKey = stack.stream({ params: { table: 'secrets', columns: ['title'] }, onError: () => {} })
  withoutKey.subscribe(() => {})
  await eventually(() => assert.ok(withoutKey.error, 'the stream should fail'))
  assert.equal(withoutKey.error.status, 400)
  assert.deepEqual(withoutKey.error.json?.errors?.columns, [
    'The list of columns must include all primary key columns, missing: id',
  ])
})

test('replica full: updates carry the whole row and old values, deletes the whole row', async () => {
  const full = stack.stream({ params: { table: 'replicated', replica: 'full' } })
  const partial = stack.stream({ params: { table: 'replicated' } })
  const fullLog = trackMessages(full)
  const partialLog = trackMessages(partial)
  await Promise.all([upToDate(full), upToDate(partial)])
  const [before] = await stack.rows('SELECT * FROM replicated WHERE id = 2')
  await stack.sql(`UPDATE replicated SET title = 'uno' WHERE id = 1; DELETE FROM replicated WHERE id = 2`)
  const [after] = await stack.rows('SELECT * FROM replicated WHERE id = 1')

  const changes = (log) => log.messages.filter((m) => m.key && m.headers.operation !== 'insert')
  await eventually(() => assert.equal(changes(fullLog).length, 2))
  const [update, del] = changes(fullLog)
  assert.equal(update.headers.operation, 'update')
  assert.deepEqual(update.value, after)
  assert.deepEqual(update.old_value, { title: 'one' })
  assert.equal(del.headers.operation, 'delete')
  assert.deepEqual(del.value, before)

  await eventually(() => assert.equal(changes(partialLog).length, 2))
  const [partialUpdate, partialDelete] = changes(partialLog)
  assert.deepEqual(partialUpdate.value, { id: 1, title: 'uno' }, 'replica=default sends the key and changed columns')
  assert.deepEqual(partialDelete.value, { id: 2 }, 'replica=default deletes carry the key only')
  assert.deepEqual([...fullLog.problems, ...partialLog.problems], [])
})

test('offset now: the client starts with no rows and sees only later changes', async () => {
  const stream = stack.stream({ params: { table: 'later' }, offset: 'now' })
  const log = trackMessages(stream)
  await upToDate(stream)
  assert.deepEqual(log.messages.filter((m) => m.key), [])
  await stack.sql(`INSERT INTO later VALUES (100, 'after'), (101, 'after')`)
  await stack.sql(`DELETE FROM later WHERE id = 101`)
  await eventually(() => assert.equal(log.messages.filter((m) => m.key).length, 3))
  assert.deepEqual(
    log.messages.filter((m) => m.key).map((m) => [m.headers.operation, m.value.id]),
    [['insert', 100], ['insert', 101], ['delete', 101]],
  )
  assert.deepEqual(log.problems, [])
})

// log=changes_only with subset snapshots (stream.requestSnapshot, GET and POST): the client
// starts empty, loads exactly the requested subset, then follows live changes without receiving
// a row the snapshot already gave a second time.

import assert from 'node:assert/strict'

import { assertSameRows, eventually, startStack, test, trackMessages, upToDate } from './harness.js'

const stack = await startStack(`
  CREATE TABLE subset_get (id int PRIMARY KEY, title text, n int);
  INSERT INTO subset_get SELECT g, 'row ' || g, g % 5 FROM generate_series(1, 50) g;
  CREATE TABLE subset_post (id int PRIMARY KEY, title text, n int);
  INSERT INTO subset_post SELECT g, 'row ' || g, g % 5 FROM generate_series(1, 50) g;
`)

for (const method of ['GET', 'POST']) {
  const table = `subset_${method.toLowerCase()}`

  test(`changes_only with ${method} subset snapshots, then live changes without duplicates`, async () => {
    const visibility = pausable()
    const shape = stack.shape({
      params: { table },
      log: 'changes_only',
      subsetMethod: method,
      runtimeVisibility: visibility,
    })
    const log = trackMessages(shape.stream, { changesOnly: true })
    await upToDate(shape.stream)
    assert.deepEqual(shape.currentRows, [], 'changes_only starts with no rows')

    const { data } = await shape.stream.requestSnapshot({
      where: 'n = $1 AND id > $2',
      params: { 1: '3', 2: '10' },
      orderBy: 'id DESC',
      limit: 4,
    })
    const subset = `SELECT * FROM ${table} WHERE n = 3 AND id > 10 ORDER BY id DESC LIMIT 4`
    const expected = await stack.rows(subset)
    assert.deepEqual(data.map((m) => m.value), expected, 'the snapshot rows, in order')
    assertSameRows(shape.currentRows, expected)

    // Rows committed while the stream is paused are in the next snapshot and also in the log
    // the stream reads when it resumes; the client must take them once (by the snapshot's
    // xmin/xmax/xip_list and database_lsn, and the log's txids and lsn). The test cluster runs
    // synchronous_commit=off; this commit is synchronous, as by default, because under
    // asynchronous commit pg_current_wal_lsn() (database_lsn, in Electric as in Syncline) can
    // trail the commit LSN of a transaction the snapshot already sees.
    visibility.set('hidden')
    await eventually(() => assert.ok(shape.stream.isPaused(), 'the stream should pause'))
    await stack.sql(`BEGIN; SET LOCAL synchronous_commit = on;
      INSERT INTO ${table} VALUES (100, 'new', 9), (101, 'new', 9); COMMIT`)
    const second = await shape.stream.requestSnapshot({ where: 'n = $1', params: { 1: '9' } })
    assertSameRows(second.data.map((m) => m.value), await stack.rows(`SELECT * FROM ${table} WHERE n = 9`))
    visibility.set('visible')
    const loaded = [...expected.map((r) => r.id), 100, 101]

    await stack.sql(`BEGIN;
      UPDATE ${table} SET title = 'changed' WHERE id IN (${expected[0].id}, 100);
      DELETE FROM ${table} WHERE id = ${expected[1].id};
      UPDATE ${table} SET title = 'not loaded' WHERE id = 1;
      INSERT INTO ${table} VALUES (102, 'live', 0);
      COMMIT`)
    await stack.untilRows(shape, `SELECT * FROM ${table} WHERE id = ANY($1) OR id = 102`, [loaded])
    assert.deepEqual(log.problems, [])
    const subsetRequests = stack.exchanges.filter(
      (e) => e.url.includes(`table=${table}`) && (e.url.includes('subset__where') || e.body),
    )
    assert.deepEqual(new Set(subsetRequests.map((e) => e.method)), new Set([method]))
    const inserts = log.messages.filter((m) => m.headers.operation === 'insert').map((m) => m.value.id)
    assert.deepEqual(inserts.sort((a, b) => a - b), [...loaded, 102].sort((a, b) => a - b))
  })
}

/** A runtime-visibility adapter (the client's public pause hook) that the test switches. */
function pausable() {
  let state = 'visible'
  const listeners = new Set()
  return {
    getCurrentState: () => state,
    subscribe(listener) {
      listeners.add(listener)
      return () => listeners.delete(listener)
    },
    set(next) {
      state = next
      for (const listener of listeners) listener(next)
    },
  }
}

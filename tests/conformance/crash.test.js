// Crash recovery: Syncline is SIGKILLed (twice) while a writer commits many small transactions,
// and restarted on the same storage directory. When the writes stop, every client, whether it
// lived through the crashes or started afterwards, must hold exactly the rows of its shape:
// nothing lost, nothing duplicated, no change for a row the client does not hold.

import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'

import pg from 'pg'

import { assertSameRows, rowsOf, startStack, test, trackMessages } from './harness.js'

const SEED_ROWS = 300
const RECOVERY_TIMEOUT_MS = 60_000
/** Pause between transactions: keeps the volume what a debug build catches up with quickly. */
const WRITE_PAUSE_MS = 2

const stack = await startStack(`
  CREATE TABLE crash_items (id int PRIMARY KEY, v int NOT NULL, note text);
  INSERT INTO crash_items SELECT g, (g * 7) % 1000, 'seed' FROM generate_series(1, ${SEED_ROWS}) g;
`)

const SHAPES = [
  {
    params: { table: 'crash_items' },
    query: 'SELECT * FROM crash_items',
  },
  {
    params: { table: 'crash_items', where: 'v < $1', params: ['500'] },
    query: 'SELECT * FROM crash_items WHERE v < 500',
  },
  {
    params: { table: 'crash_items', columns: ['id', 'v'], replica: 'full' },
    query: 'SELECT id, v FROM crash_items',
  },
]

/**
 * Commits small random transactions (inserts, updates of v or note, key changes, deletes) in
 * a loop until stop() is called; resolves stop() with the number of transactions.
 */
function startWriter() {
  const client = new pg.Client({ connectionString: stack.cluster.url })
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
      return `INSERT INTO crash_items VALUES (${id}, ${Math.floor(Math.random() * 1000)}, 'w')`
    }
    const id = pick()
    if (r < 0.6) {
      ids.push(id)
      return `UPDATE crash_items SET v = ${Math.floor(Math.random() * 1000)} WHERE id = ${id}`
    }
    if (r < 0.7) {
      ids.push(id)
      return `UPDATE crash_items SET note = 'n${transactions}' WHERE id = ${id}`
    }
    if (r < 0.8) {
      const moved = nextId++
      ids.push(moved)
      return `UPDATE crash_items SET id = ${moved} WHERE id = ${id}`
    }
    return `DELETE FROM crash_items WHERE id = ${id}`
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

test('SIGKILL during sustained writes, restart on the same storage: clients equal SELECT', async () => {
  const clients = SHAPES.map((s) => {
    const shape = stack.shape({ params: s.params })
    return { ...s, shape, log: trackMessages(shape.stream) }
  })
  for (const c of clients) assertSameRows(await rowsOf(c.shape), await stack.rows(c.query))

  const writer = startWriter()
  for (let crash = 0; crash < 2; crash++) {
    await sleep(1500)
    await stack.server.kill()
    await sleep(500)
    await stack.server.start()
  }
  await sleep(1500)
  const transactions = await writer.stop()
  assert.ok(transactions > 100, `only ${transactions} transactions: the writes were not sustained`)

  const late = stack.shape({ params: SHAPES[1].params })
  clients.push({ ...SHAPES[1], shape: late, log: trackMessages(late.stream) })
  for (const [i, c] of clients.entries()) {
    await stack.untilRows(c.shape, c.query, [], RECOVERY_TIMEOUT_MS)
    assert.deepEqual(c.log.problems, [], `client ${i}: ${c.query}`)
  }
})

// examples/todo in headless Chromium, served from its own origin, against a real Syncline and
// Postgres: the useShape view (every todo) and the TanStack DB view (open todos, on-demand
// collection) must follow SQL written straight to Postgres within 1 s, writes made in the UI,
// a TRUNCATE (Syncline's 409 must-refetch), and a restart of the Syncline process.
//
// The tests run in order on one stack and one page; each builds on the state the last left.

import assert from 'node:assert/strict'
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { after, test as nodeTest } from 'node:test'

import { ARTIFACT_DIR, Stack } from './stack.js'

/** How soon a change committed in Postgres must show in both views. */
const LIVE_MS = 1000
/** How long recoveries (409 refetch, server restart) may take before changes show again. */
const RECOVERY_MS = 15_000
const TEST_TIMEOUT_MS = 60_000

// Screenshots and logs of this run only (status.test.js keeps its own, status*).
for (const name of existsSync(ARTIFACT_DIR) ? readdirSync(ARTIFACT_DIR) : []) {
  if (!name.startsWith('status')) rmSync(path.join(ARTIFACT_DIR, name), { recursive: true, force: true })
}
const stack = await Stack.start()
const { page } = stack
after(() => stack.close())

/**
 * node:test's `test` with a timeout; a failure writes a screenshot, the page's log and the
 * servers' output to target/browser/<name>.{png,log}.
 */
function test(name, fn) {
  return nodeTest(name, { timeout: TEST_TIMEOUT_MS }, async (t) => {
    try {
      await fn(t)
    } catch (error) {
      const base = path.join(ARTIFACT_DIR, name.replace(/[^a-z0-9]+/gi, '-').toLowerCase())
      mkdirSync(ARTIFACT_DIR, { recursive: true })
      await page.screenshot({ path: `${base}.png`, fullPage: true }).catch(() => {})
      writeFileSync(
        `${base}.log`,
        [
          `--- page console and requests ---`,
          ...stack.log,
          `--- syncline, api and vite output ---`,
          ...stack.output,
        ].join('\n') + '\n',
      )
      if (error instanceof Error) error.message += `\n(screenshot and logs: ${base}.png, ${base}.log)`
      throw error
    }
  })
}

/** The todos a list shows: [{id, title, done}]. */
async function shown(list) {
  return page.$$eval(`[data-testid="${list}"] [data-testid="todo"]`, (items) =>
    items.map((li) => ({ id: li.dataset.id, title: li.querySelector('.title').textContent, done: li.dataset.done === 'true' })),
  )
}

const describe = (rows) =>
  rows
    .map((r) => `${r.title}${r.done ? ' (done)' : ''}`)
    .sort()
    .join(', ') || 'nothing'

/**
 * Waits until `list` shows exactly `expected` rows (by id, title and done); returns the ms from
 * `since`. On timeout, fails naming what the list shows instead.
 */
async function untilShown(list, expected, since, timeoutMs) {
  const keys = expected.map((r) => `${r.id}|${r.title}|${r.done}`).sort()
  try {
    await page.waitForFunction(
      ({ list, keys }) => {
        const items = [...document.querySelectorAll(`[data-testid="${list}"] [data-testid="todo"]`)]
        const got = items.map((li) => `${li.dataset.id}|${li.querySelector('.title').textContent}|${li.dataset.done}`)
        return JSON.stringify(got.sort()) === JSON.stringify(keys)
      },
      { list, keys },
      { timeout: Math.max(1, since + timeoutMs - Date.now()), polling: 10 },
    )
  } catch (error) {
    if (error?.name !== 'TimeoutError') throw error
    throw new assert.AssertionError({
      message: `${list} after ${Date.now() - since} ms (limit ${timeoutMs} ms):\n  shows (now) ${describe(await shown(list))}\n  expected ${describe(expected)}`,
    })
  }
  return Date.now() - since
}

/**
 * Waits until both views equal Postgres: every todo in the useShape list, the open ones in the
 * TanStack list. Returns the ms from `since` for each.
 */
async function untilBothViews(since, timeoutMs) {
  const all = await stack.rows('SELECT id, title, done FROM todos')
  const open = all.filter((r) => !r.done)
  const [allMs, openMs] = await Promise.all([
    untilShown('all-list', all, since, timeoutMs),
    untilShown('open-list', open, since, timeoutMs),
  ])
  return { all: allMs, open: openMs }
}

/** Commits `sql` and waits until both views show the result; returns the latencies. */
async function sqlThenViews(t, label, sql, timeoutMs = LIVE_MS) {
  await stack.sql(sql)
  const since = Date.now()
  const ms = await untilBothViews(since, timeoutMs)
  t.diagnostic(`${label}: useShape view ${ms.all} ms, TanStack view ${ms.open} ms after COMMIT`)
  return ms
}

test('the initial rows appear in both views', async (t) => {
  t.diagnostic(`start-up (ms): ${JSON.stringify(stack.timings)}`)
  const since = Date.now()
  const rows = await stack.rows('SELECT id, title, done FROM todos')
  assert.equal(rows.length, 3, 'schema.sql adds three sample todos')
  const ms = await untilBothViews(since, 10_000)
  t.diagnostic(`initial rows shown after page load + ${ms.all} / ${ms.open} ms`)
  assert.match(await page.textContent('[data-testid="all-status"]'), /3 todos, 2 open/)
  // The TanStack view loaded its rows with a subset snapshot of the changes_only shape.
  assert.ok(
    stack.logLines(/subset__where/).some((l) => l.includes('log=changes_only')),
    `the on-demand collection should request a subset snapshot:\n${stack.log.join('\n')}`,
  )
})

test('an insert, an update and a delete made in Postgres show in both views within 1 s', async (t) => {
  await sqlThenViews(t, 'insert', `INSERT INTO todos (title) VALUES ('Inserted with SQL')`)
  await sqlThenViews(t, 'update title', `UPDATE todos SET title = 'Renamed with SQL' WHERE title = 'Inserted with SQL'`)
  await sqlThenViews(t, 'update done', `UPDATE todos SET done = true WHERE title = 'Renamed with SQL'`)
  // A todo the on-demand collection never loaded (done) comes back into the open view.
  await sqlThenViews(t, 'reopen', `UPDATE todos SET done = false WHERE title = 'Start Syncline'`)
  await sqlThenViews(t, 'delete', `DELETE FROM todos WHERE title = 'Renamed with SQL'`)
})

test('todos added, completed and deleted in the UI show in both views', async (t) => {
  // Add: the form POSTs to the API, which writes to Postgres; the row comes back via Syncline.
  await page.fill('[data-testid="new-title"]', 'Added in the browser')
  let since = Date.now()
  await page.click('[data-testid="add"]')
  const added = await untilShownByTitle('all-list', 'Added in the browser', since)
  await untilShownByTitle('open-list', 'Added in the browser', since)
  let ms = await untilBothViews(since, 5000)
  t.diagnostic(`added in the UI: both views after ${ms.all} / ${ms.open} ms (click to row)`)
  assert.equal(await page.inputValue('[data-testid="new-title"]'), '', 'the form clears once the API answered')

  // Complete it in the TanStack view: collection.update -> PATCH -> txid awaited in the shape.
  since = Date.now()
  await page.click(`[data-testid="open-list"] [data-id="${added}"] input[type=checkbox]`)
  await page.waitForFunction(
    () => document.querySelector('[data-testid="open-status"]')?.dataset.saving === '0',
    null,
    { timeout: 5000, polling: 10 },
  )
  assert.equal(await page.$('[data-testid="open-error"]'), null, 'the update should persist (its txid seen)')
  assert.deepEqual(await stack.rows('SELECT done FROM todos WHERE id = $1', [added]), [{ done: true }])
  ms = await untilBothViews(since, 5000)
  t.diagnostic(`completed in the TanStack view: persisted (txid seen) and both views after ${Date.now() - since} ms`)

  // Delete it in the useShape view (a DELETE to the API).
  since = Date.now()
  await page.click(`[data-testid="all-list"] [data-id="${added}"] button.delete`)
  await untilShown(
    'all-list',
    (await shown('all-list')).filter((r) => r.id !== added),
    since,
    5000,
  )
  assert.deepEqual(await stack.rows('SELECT 1 FROM todos WHERE id = $1', [added]), [])
  ms = await untilBothViews(since, 5000)
  t.diagnostic(`deleted in the useShape view: gone from both after ${ms.all} / ${ms.open} ms`)
})

/** Waits until `list` shows a todo titled `title`; returns its id. */
async function untilShownByTitle(list, title, since, timeoutMs = 5000) {
  const handle = await page
    .waitForSelector(`[data-testid="${list}"] [data-testid="todo"]:has(.title:text-is("${title}"))`, {
      timeout: Math.max(1, since + timeoutMs - Date.now()),
    })
    .catch(async (error) => {
      throw new assert.AssertionError({
        message: `${list} shows no "${title}" after ${Date.now() - since} ms: ${describe(await shown(list))} (${error.message.split('\n')[0]})`,
      })
    })
  return handle.getAttribute('data-id')
}

test('TRUNCATE todos: both views go empty (409 must-refetch), then show new rows', async (t) => {
  const before = stack.log.length
  await stack.sql('TRUNCATE todos')
  const since = Date.now()
  const ms = await untilBothViews(since, RECOVERY_MS)
  t.diagnostic(`after TRUNCATE: both views empty after ${ms.all} / ${ms.open} ms`)
  const conflicts = stack.log.slice(before).filter((l) => / -> 409 /.test(l))
  assert.ok(conflicts.length > 0, `Syncline should answer 409 after TRUNCATE:\n${stack.log.slice(before).join('\n')}`)
  t.diagnostic(`409s seen: ${conflicts.length}`)

  await sqlThenViews(
    t,
    'insert after truncate',
    `INSERT INTO todos (title, done) VALUES ('After the truncate', false), ('Also after it', true)`,
  )
  await sqlThenViews(t, 'update after truncate', `UPDATE todos SET done = true WHERE title = 'After the truncate'`)
})

test('Syncline restarted (SIGTERM, same storage and port): the views recover and follow changes', async (t) => {
  const stopMs = await stack.syncline.stop('SIGTERM')
  // Written while Syncline is down: Postgres keeps the WAL in the replication slot.
  await stack.sql(`INSERT INTO todos (title) VALUES ('Written while Syncline was down')`)
  const startMs = await stack.syncline.start()
  t.diagnostic(`SIGTERM to exit: ${stopMs} ms; start to healthy: ${startMs} ms`)
  const since = Date.now()
  const ms = await untilBothViews(since, RECOVERY_MS)
  t.diagnostic(`the change made while down shows after ${ms.all} / ${ms.open} ms from healthy`)

  await sqlThenViews(t, 'insert after restart', `INSERT INTO todos (title) VALUES ('After the restart')`)
  await sqlThenViews(t, 'update after restart', `UPDATE todos SET done = false WHERE title = 'Also after it'`)
  await sqlThenViews(t, 'delete after restart', `DELETE FROM todos WHERE title = 'After the truncate'`)
  await sqlThenViews(
    t,
    'last insert',
    `INSERT INTO todos (title, done) VALUES ('Review the browser test', false), ('Ship the example', true)`,
  )

  mkdirSync(ARTIFACT_DIR, { recursive: true })
  await page.mouse.move(0, 0) // no hover highlight left from the last click
  await page.screenshot({ path: path.join(ARTIFACT_DIR, 'todo.png'), fullPage: true })
  writeFileSync(path.join(ARTIFACT_DIR, 'todo.log'), stack.log.join('\n') + '\n')
})

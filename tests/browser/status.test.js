// Syncline's /status page in headless Chromium: it renders (health, role, every chart), and its
// charts move while a writer commits. A screenshot of the page goes to target/browser/status.png
// (and, with its log, to status-failed.{png,log} when a check fails).

import assert from 'node:assert/strict'
import { mkdirSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { after, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'

import { ARTIFACT_DIR, Stack } from './stack.js'

/** How long the charts are watched while the writer commits. */
const WATCH_MS = 4000
const TEST_TIMEOUT_MS = 60_000

const stack = await Stack.start()
after(() => stack.close())

test('the status page renders and its charts move while a writer commits', { timeout: TEST_TIMEOUT_MS }, async () => {
  const page = await stack.context.newPage()
  const errors = []
  page.on('pageerror', (e) => errors.push(String(e)))
  page.on('console', (m) => m.type() === 'error' && errors.push(m.text()))
  try {
    await page.goto(`${stack.syncline.baseUrl}/status`)
    assert.equal(await page.title(), 'Syncline status')
    await page.waitForFunction(() => document.getElementById('role').textContent === 'writer', null, { timeout: 10_000 })
    assert.equal(await page.textContent('#status'), 'active')
    const points = () => page.getAttribute('#throughput polyline', 'points')
    const throughput = () => page.textContent('#throughput .value')
    await page.waitForFunction(() => document.querySelector('#throughput polyline').getAttribute('points') !== '')
    const before = await points()

    // A shape, so changes are routed, and a writer committing small transactions.
    const shape = await fetch(`${stack.syncline.baseUrl}/v1/shape?table=todos&offset=-1`)
    assert.equal(shape.status, 200)
    await shape.arrayBuffer()
    let writing = true
    const writer = (async () => {
      let n = 0
      while (writing) {
        await stack.sql(`INSERT INTO todos (title) VALUES ('status page ${n++}')`)
        await sleep(20)
      }
      return n
    })()
    const seen = new Set()
    const deadline = Date.now() + WATCH_MS
    while (Date.now() < deadline) {
      seen.add(Number(await throughput()))
      await sleep(250)
    }
    writing = false
    const committed = await writer
    const after = await points()
    assert.notEqual(after, before, 'the throughput chart moved')
    assert.ok(
      [...seen].some((v) => v > 0),
      `transactions per second shown while ${committed} were committed: ${[...seen].join(', ')}`,
    )
    assert.match(await page.textContent('#shapes .value'), /^[1-9]/)
    assert.equal(await page.textContent('#problem'), '')
    assert.deepEqual(errors, [])
    mkdirSync(ARTIFACT_DIR, { recursive: true })
    await page.screenshot({ path: path.join(ARTIFACT_DIR, 'status.png'), fullPage: true })
  } catch (error) {
    mkdirSync(ARTIFACT_DIR, { recursive: true })
    const base = path.join(ARTIFACT_DIR, 'status-failed')
    await page.screenshot({ path: `${base}.png`, fullPage: true }).catch(() => {})
    writeFileSync(`${base}.log`, [...errors, '--- servers ---', ...stack.output].join('\n') + '\n')
    throw error
  } finally {
    await page.close()
  }
})

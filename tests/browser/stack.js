// The processes a browser test needs: a private Postgres cluster (`syncline-pg-cluster`, as in
// tests/conformance/harness.js), `syncline serve` on it, the todo example's API server, the
// example built by Vite and served statically from its own origin, and headless Chromium
// (playwright-core, Debian's /usr/bin/chromium). Every process started here is stopped by
// Stack.close(); if the test process dies, the cluster goes with its stdin and the servers with
// their parent (setpriv --pdeathsig).

import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { readFile, stat } from 'node:fs/promises'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { createInterface } from 'node:readline'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'

import pg from 'pg'
import { chromium } from 'playwright-core'

import { freePort, startCluster } from '../support/cluster.js'

const here = path.dirname(fileURLToPath(import.meta.url))
export const REPO_ROOT = path.resolve(here, '../..')
export const EXAMPLE_DIR = path.join(REPO_ROOT, 'examples/todo')
/** Screenshots and logs: on failure, and todo.png on success. */
export const ARTIFACT_DIR = path.join(REPO_ROOT, 'target/browser')

const SYNCLINE_BIN = process.env.SYNCLINE_BIN
  ? path.resolve(process.env.SYNCLINE_BIN)
  : path.join(REPO_ROOT, 'target/debug/syncline')
const CHROMIUM = process.env.SYNCLINE_CHROMIUM ?? '/usr/bin/chromium'

const SERVER_START_TIMEOUT_MS = 30_000
const CHROMIUM_WAIT_MS = 10 * 60_000
const OUTPUT_LINES_KEPT = 2000

/** Children to kill if this process exits without cleaning up. */
const children = new Set()
process.on('exit', () => {
  for (const child of children) child.kill('SIGKILL')
})
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => process.exit(128 + os.constants.signals[signal]))
}

/**
 * Spawns `cmd args` under `setpriv --pdeathsig KILL` (when there), collecting its output
 * (prefixed lines) into `output`; resolves `child.exited` with the signal or exit code.
 */
function spawnLogged(name, cmd, args, options, output) {
  const [c, a] = existsSync('/usr/bin/setpriv')
    ? ['/usr/bin/setpriv', ['--pdeathsig', 'KILL', '--', cmd, ...args]]
    : [cmd, args]
  const child = spawn(c, a, { ...options, stdio: ['ignore', 'pipe', 'pipe'] })
  children.add(child)
  output.push(`--- ${name} start (pid ${child.pid}) ---`)
  for (const s of [child.stdout, child.stderr]) {
    createInterface({ input: s }).on('line', (l) => {
      output.push(l)
      if (output.length > OUTPUT_LINES_KEPT) output.splice(0, output.length - OUTPUT_LINES_KEPT)
    })
  }
  child.exited = new Promise((resolve) =>
    child.once('exit', (code, signal) => {
      children.delete(child)
      output.push(`--- ${name} exited (pid ${child.pid}, ${signal ?? code}) ---`)
      resolve(signal ?? code)
    }),
  )
  return child
}

/** A sleep that does not keep the process alive (for the losing side of a race). */
function unrefSleep(ms) {
  return sleep(ms, undefined, { ref: false })
}

/** Polls `url` until it answers 200 (and `accept(body)`), failing early if `child` exits. */
async function waitReady(name, child, url, output, accept = () => true) {
  const deadline = Date.now() + SERVER_START_TIMEOUT_MS
  let last = 'no answer'
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`${name} exited during start-up:\n${output.slice(-40).join('\n')}`)
    }
    try {
      const res = await fetch(url)
      const body = await res.text()
      last = `${res.status} ${body}`
      if (res.status === 200 && accept(body)) return
    } catch (error) {
      last = String(error.cause ?? error)
    }
    await sleep(50)
  }
  throw new Error(`${name} not ready after ${SERVER_START_TIMEOUT_MS} ms (last: ${last}):\n${output.slice(-40).join('\n')}`)
}

/** `syncline serve` on a fixed port and storage dir: stop() (SIGTERM) then start() restarts it. */
class Syncline {
  constructor(databaseUrl, storageDir, port, output) {
    Object.assign(this, { databaseUrl, storageDir, port, output })
    this.child = null
  }

  get baseUrl() {
    return `http://127.0.0.1:${this.port}`
  }

  async start() {
    assert.ok(existsSync(SYNCLINE_BIN), `${SYNCLINE_BIN} is missing: cargo build --bin syncline`)
    const env = {
      ...process.env,
      DATABASE_URL: this.databaseUrl,
      ELECTRIC_PORT: String(this.port),
      SYNCLINE_LISTEN_ADDRESS: '127.0.0.1',
      ELECTRIC_INSECURE: 'true',
      ELECTRIC_STORAGE_DIR: this.storageDir,
      ELECTRIC_REPLICATION_STREAM_ID: `browser_${process.pid}`,
      NO_COLOR: '1',
    }
    this.child = spawnLogged('syncline', SYNCLINE_BIN, ['serve'], { env }, this.output)
    const started = Date.now()
    await waitReady('syncline', this.child, `${this.baseUrl}/v1/health`, this.output, (b) => JSON.parse(b).status === 'active')
    return Date.now() - started
  }

  /** SIGTERM, then waits until the process is gone; returns how long that took (ms). */
  async stop(signal = 'SIGTERM') {
    const child = this.child
    if (!child) return 0
    this.child = null
    const started = Date.now()
    child.kill(signal)
    await child.exited
    return Date.now() - started
  }
}

/** Serves `dir` (a Vite build) on 127.0.0.1:`port`; index.html for unknown paths. */
async function serveStatic(dir, port) {
  const types = {
    '.html': 'text/html; charset=utf-8',
    '.js': 'text/javascript; charset=utf-8',
    '.css': 'text/css; charset=utf-8',
    '.svg': 'image/svg+xml',
    '.json': 'application/json',
  }
  const server = http.createServer(async (req, res) => {
    const { pathname } = new URL(req.url, 'http://localhost')
    let file = path.join(dir, path.normalize(decodeURIComponent(pathname)).replace(/^(\.\.[/\\])+/, ''))
    try {
      if (!(await stat(file)).isFile()) throw new Error('not a file')
    } catch {
      file = path.join(dir, 'index.html')
    }
    try {
      const body = await readFile(file)
      res.writeHead(200, { 'content-type': types[path.extname(file)] ?? 'application/octet-stream' })
      res.end(body)
    } catch {
      res.writeHead(404).end()
    }
  })
  await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${port}/`,
    async close() {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    },
  }
}

/** Runs `vite build` of the example into `outDir` with the given VITE_* environment. */
async function buildExample(outDir, env, output) {
  const vite = path.join(EXAMPLE_DIR, 'node_modules/vite/bin/vite.js')
  assert.ok(
    existsSync(vite),
    `${vite} is missing: run \`npm ci\` in tests/browser (its postinstall installs examples/todo)`,
  )
  const child = spawnLogged(
    'vite build',
    process.execPath,
    [vite, 'build', '--outDir', outDir, '--emptyOutDir', '--logLevel', 'warn'],
    { cwd: EXAMPLE_DIR, env: { ...process.env, ...env } },
    output,
  )
  const status = await child.exited
  if (status !== 0) throw new Error(`vite build failed (${status}):\n${output.slice(-40).join('\n')}`)
}

async function waitForChromium() {
  const deadline = Date.now() + CHROMIUM_WAIT_MS
  while (!existsSync(CHROMIUM)) {
    if (Date.now() > deadline) throw new Error(`${CHROMIUM} does not exist (apt-get install chromium)`)
    await sleep(1000)
  }
}

/**
 * Everything one test file needs. `await Stack.start()` starts it all; `close()` stops it all.
 * `page` is the example, opened and loaded; `log` holds the page's console and its requests to
 * Syncline and the API.
 */
export class Stack {
  static async start() {
    const stack = new Stack()
    try {
      await stack.#start()
    } catch (error) {
      await stack.close()
      throw error
    }
    return stack
  }

  constructor() {
    this.output = []
    /** The page's console messages, errors, and its requests to Syncline and the API, in order. */
    this.log = []
    this.timings = {}
  }

  async #start() {
    const t0 = Date.now()
    this.tmp = mkdtempSync(path.join(os.tmpdir(), 'syncline-browser-'))
    this.cluster = await startCluster()
    this.pool = new pg.Pool({ connectionString: this.cluster.url, max: 4 })
    await this.sql(readFileSync(path.join(EXAMPLE_DIR, 'schema.sql'), 'utf8'))
    this.timings.cluster = Date.now() - t0

    const [synclinePort, apiPort, webPort] = [await freePort(), await freePort(), await freePort()]
    // The storage lies in the cluster's temp dir, so it goes when the cluster does.
    this.syncline = new Syncline(
      this.cluster.url,
      path.join(this.cluster.socket_dir, 'syncline-storage'),
      synclinePort,
      this.output,
    )
    const builtDir = path.join(this.tmp, 'dist')
    const apiUrl = `http://127.0.0.1:${apiPort}`
    const t1 = Date.now()
    await Promise.all([
      this.syncline.start(),
      this.#startApi(apiPort),
      buildExample(builtDir, { VITE_SYNCLINE_URL: this.syncline.baseUrl, VITE_API_URL: apiUrl }, this.output),
      waitForChromium(),
    ])
    this.timings.servers_and_build = Date.now() - t1
    this.apiUrl = apiUrl
    this.web = await serveStatic(builtDir, webPort)

    const t2 = Date.now()
    this.browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--no-sandbox', '--disable-dev-shm-usage'],
    })
    this.context = await this.browser.newContext({ viewport: { width: 1100, height: 760 } })
    this.page = await this.context.newPage()
    this.#record(this.page)
    await this.page.goto(this.web.url)
    this.timings.browser = Date.now() - t2
  }

  async #startApi(port) {
    const env = { ...process.env, DATABASE_URL: this.cluster.url, API_PORT: String(port), API_HOST: '127.0.0.1' }
    this.api = spawnLogged('api', process.execPath, [path.join(EXAMPLE_DIR, 'server.js')], { env }, this.output)
    await waitReady('api', this.api, `http://127.0.0.1:${port}/health`, this.output)
  }

  #record(page) {
    const at = () => new Date().toISOString().slice(11, 23)
    page.on('console', (m) => this.log.push(`${at()} console.${m.type()}: ${m.text()}`))
    page.on('pageerror', (e) => this.log.push(`${at()} pageerror: ${e.stack ?? e}`))
    const relevant = (url) => url.startsWith(this.syncline.baseUrl) || url.startsWith(this.apiUrl)
    page.on('request', (r) => {
      if (relevant(r.url())) r.startedAt = Date.now()
    })
    page.on('response', (r) => {
      const req = r.request()
      if (!relevant(req.url())) return
      const h = r.headers()
      const extra = ['electric-handle', 'electric-offset', 'electric-up-to-date']
        .filter((k) => k in h)
        .map((k) => `${k.replace('electric-', '')}=${h[k]}`)
        .join(' ')
      const body = req.postData() ? ` body=${req.postData()}` : ''
      this.log.push(`${at()} ${req.method()} ${decodeURIComponent(req.url())}${body} -> ${r.status()} ${extra}`)
    })
    page.on('requestfinished', (req) => {
      if (!relevant(req.url())) return
      const ms = req.startedAt ? Date.now() - req.startedAt : '?'
      this.log.push(`${at()}   finished ${req.method()} ${decodeURIComponent(req.url()).slice(0, 120)} after ${ms} ms`)
    })
    page.on('requestfailed', (req) => {
      if (!relevant(req.url())) return
      this.log.push(`${at()} ${req.method()} ${decodeURIComponent(req.url())} failed: ${req.failure()?.errorText}`)
    })
  }

  /** Runs SQL on the cluster's `postgres` database. */
  async sql(text, params) {
    return this.pool.query(text, params)
  }

  async rows(text, params) {
    return (await this.pool.query(text, params)).rows
  }

  /** Log lines (page log) that match `re`. */
  logLines(re) {
    return this.log.filter((l) => re.test(l))
  }

  async close() {
    await this.browser?.close().catch(() => {})
    await this.web?.close().catch(() => {})
    if (this.api) {
      this.api.kill('SIGTERM')
      await Promise.race([this.api.exited, unrefSleep(5000).then(() => this.api.kill('SIGKILL'))])
      await this.api.exited
    }
    if (this.syncline?.child) {
      const child = this.syncline.child
      await Promise.race([this.syncline.stop('SIGTERM'), unrefSleep(10_000).then(() => child.kill('SIGKILL'))])
      await child.exited
    }
    await this.pool?.end().catch(() => {})
    await this.cluster?.stop()
    if (this.tmp) rmSync(this.tmp, { recursive: true, force: true })
  }
}

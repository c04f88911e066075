// Test harness: a private Postgres cluster (the testkit CLI), a real `syncline serve` on it, and
// helpers to drive it with the official @electric-sql/client. Each test file calls startStack()
// once, so files never share a cluster or a server and can run in parallel.

import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createInterface } from 'node:readline'
import { after, test as nodeTest } from 'node:test'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { inspect, isDeepStrictEqual } from 'node:util'

import { Shape, ShapeStream } from '@electric-sql/client'
import pg from 'pg'

import { freePort, startCluster } from '../support/cluster.js'

const here = path.dirname(fileURLToPath(import.meta.url))

/** The Syncline server binary. */
const SYNCLINE_BIN = process.env.SYNCLINE_BIN
  ? path.resolve(process.env.SYNCLINE_BIN)
  : path.resolve(here, '../../target/debug/syncline')

/** Long-poll timeout given to the server, in ms. */
const LONG_POLL_TIMEOUT_MS = 3000

/** Chunk threshold given to the server, in bytes. */
export const CHUNK_BYTES = 10000

const SERVER_START_TIMEOUT_MS = 30_000
const EVENTUALLY_TIMEOUT_MS = 20_000
const TEST_TIMEOUT_MS = 120_000
/** How long a test process may linger after its stack closed before it is ended. */
const EXIT_GRACE_MS = 1000
const OUTPUT_TAIL_LINES = 60
const EXCHANGES_SHOWN = 25

/** Servers to kill if this process exits without cleaning up (clusters see stdin close). */
const servers = new Set()
/** Every stack of this process, so a failing test can show their server output. */
const stacks = new Set()
let nextStreamId = 0

process.on('exit', () => {
  for (const server of servers) server.child?.kill('SIGKILL')
})
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => process.exit(128 + os.constants.signals[signal]))
}

/**
 * node:test's `test`, but a failure also shows each server's recent output and the client's
 * recent HTTP exchanges. `timeout` (ms) overrides the default of two minutes.
 */
export function test(name, fn, { timeout = TEST_TIMEOUT_MS } = {}) {
  return nodeTest(name, { timeout }, async (t) => {
    try {
      await fn(t)
    } catch (error) {
      const context = [...stacks].map((s) => s.diagnostics()).join('\n')
      throw addContext(error, `\n${context}`)
    }
  })
}

/**
 * Appends `text` to an error's message, and to its stack where that already holds the message:
 * node:test reports an AssertionError by its stack, formatted when it was thrown.
 */
export function addContext(error, text) {
  if (!(error instanceof Error)) return error
  const before = error.message
  error.message = before + text
  if (typeof error.stack === 'string' && !error.stack.includes(error.message) && error.stack.includes(before)) {
    error.stack = error.stack.replace(before, error.message)
  }
  return error
}

/**
 * Starts a cluster, runs `sql` in its `postgres` database, and starts a server on it. Everything
 * is stopped and removed after the file's tests (registered with node:test's `after`).
 */
export async function startStack(sql = '') {
  const cluster = await startCluster()
  const stack = new Stack(cluster)
  stacks.add(stack)
  after(async () => {
    await stack.close()
    // The client keeps a 60 s timer (its throttled up-to-date cache save) that would hold this
    // process open for a minute after the last test; end it once results are out. (Node 18,
    // which Debian 12 ships, has no --test-force-exit.)
    setTimeout(() => process.exit(), EXIT_GRACE_MS).unref()
  })
  if (sql) await stack.sql(sql)
  await stack.server.start()
  return stack
}

/**
 * A `syncline serve` process; kill() then start() restarts it on the same storage and port. The
 * storage dir lies in the cluster's temp dir, so it goes when the cluster does.
 */
class Syncline {
  constructor(databaseUrl, storageDir) {
    this.databaseUrl = databaseUrl
    this.storageDir = storageDir
    this.streamId = `conformance_${process.pid}_${nextStreamId++}`
    this.output = []
    this.child = null
    servers.add(this)
  }

  /** Spawns the server (the first call picks the port) and waits until it is healthy. */
  async start() {
    assert.ok(existsSync(SYNCLINE_BIN), `${SYNCLINE_BIN} is missing: cargo build -p syncline-server`)
    this.port ??= await freePort()
    const env = {
      ...process.env,
      DATABASE_URL: this.databaseUrl,
      ELECTRIC_PORT: String(this.port),
      SYNCLINE_LISTEN_ADDRESS: '127.0.0.1',
      ELECTRIC_INSECURE: 'true',
      ELECTRIC_STORAGE_DIR: this.storageDir,
      ELECTRIC_SHAPE_CHUNK_BYTES_THRESHOLD: String(CHUNK_BYTES),
      ELECTRIC_LONG_POLL_TIMEOUT: String(LONG_POLL_TIMEOUT_MS),
      ELECTRIC_ENABLE_INTEGRATION_TESTING: 'true',
      ELECTRIC_REPLICATION_STREAM_ID: this.streamId,
      NO_COLOR: '1',
    }
    // setpriv makes the kernel kill the server if this process dies without cleaning up.
    const [cmd, args] = existsSync('/usr/bin/setpriv')
      ? ['/usr/bin/setpriv', ['--pdeathsig', 'KILL', '--', SYNCLINE_BIN, 'serve']]
      : [SYNCLINE_BIN, ['serve']]
    const child = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] })
    this.child = child
    this.output.push(`--- syncline start (pid ${child.pid}) ---`)
    for (const s of [child.stdout, child.stderr]) {
      createInterface({ input: s }).on('line', (l) => this.output.push(l))
    }
    child.exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code)))
    await this.waitHealthy(child)
  }

  async waitHealthy(child) {
    const deadline = Date.now() + SERVER_START_TIMEOUT_MS
    let last = 'no answer'
    while (Date.now() < deadline) {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`syncline exited during start-up:\n${this.tail()}`)
      }
      try {
        const res = await fetch(`${this.baseUrl}/v1/health`)
        const body = await res.text()
        last = `${res.status} ${body}`
        if (res.status === 200 && JSON.parse(body).status === 'active') return
      } catch (error) {
        last = String(error.cause ?? error)
      }
      await sleep(50)
    }
    throw new Error(`syncline not healthy after ${SERVER_START_TIMEOUT_MS} ms (last: ${last}):\n${this.tail()}`)
  }

  get baseUrl() {
    return `http://127.0.0.1:${this.port}`
  }

  get shapeUrl() {
    return `${this.baseUrl}/v1/shape`
  }

  /** SIGKILLs the server and waits until it is gone. */
  async kill() {
    const child = this.child
    if (!child) return
    this.child = null
    child.kill('SIGKILL')
    await child.exited
    this.output.push(`--- syncline killed (pid ${child.pid}) ---`)
  }

  /** The last lines the server printed. */
  tail() {
    return this.output.slice(-OUTPUT_TAIL_LINES).join('\n')
  }

  async close() {
    await this.kill()
    servers.delete(this)
  }
}

/** One cluster, one server, a pool on the database, and the client streams opened on them. */
class Stack {
  constructor(cluster) {
    this.cluster = cluster
    this.pool = new pg.Pool({ connectionString: cluster.url, max: 4 })
    this.server = new Syncline(cluster.url, path.join(cluster.socket_dir, 'syncline-storage'))
    this.controllers = []
    /** Every HTTP exchange of the client, in order (see recordingFetch). */
    this.exchanges = []
    /** Errors the client streams reported. */
    this.clientErrors = []
  }

  get shapeUrl() {
    return this.server.shapeUrl
  }

  /** Runs SQL on the cluster's `postgres` database. */
  async sql(text, params) {
    return this.pool.query(text, params)
  }

  /** Rows of a query, as node-postgres parses them. */
  async rows(text, params) {
    return (await this.pool.query(text, params)).rows
  }

  /** Waits until the shape's rows equal the rows of `query` (see assertSameRows). */
  async untilRows(shape, query, params, timeoutMs) {
    await eventually(async () => assertSameRows(shape.currentRows, await this.rows(query, params)), timeoutMs)
  }

  /**
   * A ShapeStream on this server: HTTP recorded, errors recorded (the stream then stops), quick
   * backoff, aborted when the stack closes. `options.params` holds the shape definition.
   */
  stream(options) {
    const controller = new AbortController()
    this.controllers.push(controller)
    return new ShapeStream({
      url: this.shapeUrl,
      signal: controller.signal,
      fetchClient: recordingFetch(this.exchanges),
      backoffOptions: { initialDelay: 50, maxDelay: 500, multiplier: 2, maxRetries: Infinity },
      onError: (error) => {
        this.clientErrors.push(error)
      },
      ...options,
    })
  }

  /** A Shape over {@link stream}. */
  shape(options) {
    return new Shape(this.stream(options))
  }

  /** What a failing test shows: server output, client errors, the last HTTP exchanges. */
  diagnostics() {
    const errors = this.clientErrors.map((e) => `  ${describeError(e)}`).join('\n')
    const exchanges = this.exchanges.slice(-EXCHANGES_SHOWN).map(describeExchange).join('\n')
    return [
      `--- syncline output (last ${OUTPUT_TAIL_LINES} lines) ---`,
      this.server.tail(),
      `--- client errors ---`,
      errors || '  none',
      `--- last ${EXCHANGES_SHOWN} client HTTP exchanges ---`,
      exchanges || '  none',
    ].join('\n')
  }

  async close() {
    for (const c of this.controllers) c.abort()
    await this.server.close()
    await this.pool.end()
    await this.cluster.stop()
    stacks.delete(this)
  }
}

/** A fetch that appends {method, url, body, status, contentType, handle, offset, error} to `log`. */
export function recordingFetch(log) {
  return async (input, init = {}) => {
    const entry = {
      method: init.method ?? 'GET',
      url: typeof input === 'string' ? input : input.url,
      body: init.body,
    }
    log.push(entry)
    try {
      const res = await fetch(input, init)
      entry.status = res.status
      entry.contentType = res.headers.get('content-type')
      entry.handle = res.headers.get('electric-handle')
      entry.offset = res.headers.get('electric-offset')
      if (res.status >= 400) entry.responseBody = await res.clone().text()
      return res
    } catch (error) {
      entry.error = String(error.cause ?? error)
      throw error
    }
  }
}

function describeExchange(e) {
  const request = `${e.method} ${decodeURIComponent(e.url)}${e.body ? ` body=${e.body}` : ''}`
  const answer = e.error
    ? `error ${e.error}`
    : e.status === undefined
      ? 'pending'
      : `${e.status} ${e.contentType ?? ''} handle=${e.handle} offset=${e.offset}` +
        (e.responseBody ? ` body=${e.responseBody}` : '')
  return `  ${request}\n    -> ${answer}`
}

/** One line for a client error: status, URL and body for a FetchError. */
export function describeError(e) {
  if (e && typeof e === 'object' && 'status' in e) {
    return `${e.name} ${e.status} ${e.url ?? ''}: ${e.text ?? JSON.stringify(e.json) ?? e.message}`
  }
  return String(e?.stack ?? e)
}

/**
 * Retries `check` (which throws, typically an assertion) until it passes; after `timeoutMs` the
 * last failure is thrown.
 */
export async function eventually(check, timeoutMs = EVENTUALLY_TIMEOUT_MS) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    try {
      return await check()
    } catch (error) {
      if (Date.now() > deadline) throw error
    }
    await sleep(50)
  }
}

/** The rows of `shape` once it is up to date; fails with the stream's error or after a timeout. */
export async function rowsOf(shape, timeoutMs = EVENTUALLY_TIMEOUT_MS) {
  let timer
  const failure = new Promise((_, reject) => {
    const deadline = Date.now() + timeoutMs
    timer = setInterval(() => {
      if (shape.stream.error) reject(new Error(`stream failed: ${describeError(shape.stream.error)}`))
      if (Date.now() > deadline) reject(new Error(`shape not up to date after ${timeoutMs} ms`))
    }, 50)
  })
  try {
    return await Promise.race([shape.rows, failure])
  } finally {
    clearInterval(timer)
  }
}

/** Resolves once `stream` is up to date (and rejects if it stopped with an error). */
export async function upToDate(stream, timeoutMs = EVENTUALLY_TIMEOUT_MS) {
  await eventually(() => {
    if (stream.error) throw new Error(`stream failed: ${describeError(stream.error)}`)
    assert.ok(stream.isUpToDate, 'stream is not up to date')
  }, timeoutMs)
}

/**
 * Asserts that `actual` (client rows) and `expected` (Postgres rows) hold the same rows by `id`,
 * in any order. The message names the missing, extra and differing rows; unlike a deep-equal
 * diff of two long arrays it stays short and cheap.
 */
export function assertSameRows(actual, expected, label = 'rows') {
  const byKey = (rows) => new Map(rows.map((r) => [String(r.id), r]))
  const [a, e] = [byKey(actual), byKey(expected)]
  const missing = [...e.keys()].filter((k) => !a.has(k))
  const extra = [...a.keys()].filter((k) => !e.has(k))
  const differing = [...e.keys()].filter((k) => a.has(k) && !isDeepStrictEqual(a.get(k), e.get(k)))
  const repeated = actual.length - a.size
  if (missing.length + extra.length + differing.length + repeated === 0) return
  const some = (keys) => keys.slice(0, 10).join(', ') + (keys.length > 10 ? ', …' : '')
  const lines = [`${label}: the client's ${actual.length} rows differ from Postgres's ${expected.length}`]
  if (missing.length) lines.push(`  ${missing.length} missing: ids ${some(missing)}`)
  if (extra.length) lines.push(`  ${extra.length} extra: ids ${some(extra)}`)
  if (repeated) lines.push(`  ${repeated} ids more than once`)
  for (const k of differing.slice(0, 3)) {
    lines.push(`  id ${k}: client ${inspect(a.get(k))}\n    postgres ${inspect(e.get(k))}`)
  }
  if (differing.length > 3) lines.push(`  … ${differing.length} differing rows in all`)
  throw new assert.AssertionError({ message: lines.join('\n') })
}

/**
 * Subscribes to `stream` and checks the log it delivers is consistent: no insert of a key
 * already present and, unless `changesOnly` (where the client may hear of rows it never loaded),
 * no update or delete of a key that is absent; must-refetch starts over.
 * Returns `{messages, problems}`; `problems` should stay empty.
 */
export function trackMessages(stream, { changesOnly = false } = {}) {
  const present = new Set()
  const messages = []
  const problems = []
  stream.subscribe((batch) => {
    for (const m of batch) {
      messages.push(m)
      if (m.headers.control === 'must-refetch') present.clear()
      if (!('key' in m)) continue
      const op = m.headers.operation
      if (op === 'insert') {
        if (present.has(m.key)) problems.push(`duplicate insert of ${m.key}`)
        present.add(m.key)
      } else if (!present.has(m.key)) {
        if (!changesOnly) problems.push(`${op} of absent ${m.key}`)
      } else if (op === 'delete') {
        present.delete(m.key)
      }
    }
  })
  return { messages, problems }
}

/**
 * Reads a shape over plain HTTP as the protocol describes (offset -1, then each offset the
 * server gives, with live=true when `live`), until a response ends up-to-date and
 * `until(messages)` holds (default: always, or when `live`, once a change arrived). `query` is
 * the shape's query string without offset/handle. Returns the handle, the next offset, every
 * message and, per response, its URL, headers, message count and size.
 */
export async function rawFollow(shapeUrl, query, options = {}) {
  let { handle, offset = '-1' } = options
  const { live = false, until = (ms) => !live || ms.some((m) => m.key) } = options
  const messages = []
  const responses = []
  for (;;) {
    const url =
      `${shapeUrl}?${query}&offset=${offset}` +
      (handle ? `&handle=${handle}` : '') +
      (live && offset !== '-1' ? '&live=true' : '')
    const res = await fetch(url)
    const text = await res.text()
    assert.equal(res.status, 200, `GET ${url} -> ${res.status} ${text}`)
    const body = JSON.parse(text)
    responses.push({ url, headers: res.headers, count: body.length, bytes: text.length })
    messages.push(...body)
    handle = res.headers.get('electric-handle')
    offset = res.headers.get('electric-offset')
    if (res.headers.has('electric-up-to-date') && until(messages)) {
      return { handle, offset, messages, responses }
    }
  }
}

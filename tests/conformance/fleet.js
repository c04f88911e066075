// Fleet harness: several `syncline serve` processes on ONE private Postgres cluster, sharing one
// storage directory and one replication stream id (a writer, standbys, replicas), behind a real
// nginx configured with deploy/nginx/syncline.conf. Servers can be SIGTERMed (hand-over) or
// SIGKILLed; each sits in a fixed "slot" (a port in nginx's upstream list) that the next server
// started in that slot reuses, as a process manager or an orchestrator with fixed addresses does.
//
// Everything started here (clusters, servers, nginx) is stopped when the file's tests are done,
// or killed when the process exits; temp dirs are removed (SYNCLINE_FLEET_KEEP=1 keeps them and
// prints where they are, for reading the full server logs and nginx's access log afterwards).

import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import {
  chmodSync,
  createWriteStream,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { createInterface } from 'node:readline'
import { after, test as nodeTest } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'

import { Shape, ShapeStream } from '@electric-sql/client'
import pg from 'pg'

import { freePort, startCluster } from '../support/cluster.js'

const here = path.dirname(fileURLToPath(import.meta.url))

const SYNCLINE_BIN = process.env.SYNCLINE_BIN
  ? path.resolve(process.env.SYNCLINE_BIN)
  : path.resolve(here, '../../target/debug/syncline')
/** The nginx binary (Debian's nginx-light puts it here). */
export const NGINX_BIN = process.env.SYNCLINE_NGINX_BIN ?? '/usr/sbin/nginx'
/** The nginx configuration under test (a template, see its header). */
export const NGINX_TEMPLATE = path.resolve(here, '../../deploy/nginx/syncline.conf')

/** Long-poll timeout given to every server, in ms (as harness.js). */
export const LONG_POLL_TIMEOUT_MS = 3000
/** Chunk threshold given to every server, in bytes (as harness.js). */
export const CHUNK_BYTES = 10000

const SERVER_START_TIMEOUT_MS = 60_000
const NGINX_START_TIMEOUT_MS = 10_000
const OUTPUT_TAIL_LINES = 40
const EXCHANGES_SHOWN = 20
const KEEP = process.env.SYNCLINE_FLEET_KEEP === '1'

/** Child processes to kill if this process exits without cleaning up. */
const children = new Set()
/** Temp dirs to remove on exit. */
const tempDirs = new Set()
/** Every fleet of this process, for failure diagnostics and the final clean-up. */
const fleets = new Set()
let nextStreamId = 0

process.on('exit', () => {
  for (const pid of children) {
    try {
      process.kill(pid, 'SIGKILL')
    } catch {
      // already gone
    }
  }
  for (const dir of tempDirs) {
    if (KEEP) console.log(`fleet: kept ${dir}`)
    else rmSync(dir, { recursive: true, force: true })
  }
})

after(async () => {
  for (const fleet of [...fleets]) await fleet.close()
  // The client keeps a 60 s timer that would hold this process open (see harness.js).
  setTimeout(() => process.exit(), 1000).unref()
})

/**
 * node:test's `test` (options: its timeout, skip, …); a failure also shows every fleet's
 * diagnostics (servers' output, nginx's error log and the errors it sent, client errors and
 * exchanges). The fleets started by the test are stopped when it ends, so the next test runs
 * alone on the machine.
 */
export function test(name, options, fn) {
  return nodeTest(name, options, async (t) => {
    try {
      await fn(t)
    } catch (error) {
      const context = [...fleets].map((f) => f.diagnostics()).join('\n')
      if (error instanceof Error) error.message += `\n${context}`
      throw error
    } finally {
      for (const fleet of [...fleets]) await fleet.close()
    }
  })
}

function tempDir(prefix) {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix))
  tempDirs.add(dir)
  return dir
}

function track(child) {
  children.add(child.pid)
  child.exited = new Promise((resolve) =>
    child.once('exit', (code, signal) => {
      children.delete(child.pid)
      resolve(signal ?? code)
    }),
  )
  return child
}

/** With setpriv, the kernel kills the child if this process dies without cleaning up. */
function spawnGuarded(bin, args, options) {
  const [cmd, argv] = existsSync('/usr/bin/setpriv')
    ? ['/usr/bin/setpriv', ['--pdeathsig', 'KILL', '--', bin, ...args]]
    : [bin, args]
  return track(spawn(cmd, argv, options))
}

/** A private cluster, removed at exit like every child of this process. */
async function startTrackedCluster() {
  const cluster = await startCluster()
  track(cluster.child)
  return cluster
}

/**
 * One `syncline serve` process. Its output goes to memory (the tail shown on failure) and to
 * `<fleet dir>/logs/<name>.log`.
 */
export class Server {
  constructor(fleet, { name, slot, role }) {
    this.fleet = fleet
    this.name = name
    this.slot = slot
    this.port = fleet.ports[slot]
    this.roleSetting = role
    this.output = []
    this.child = null
    this.exitStatus = undefined
  }

  get baseUrl() {
    return `http://127.0.0.1:${this.port}`
  }

  spawn() {
    assert.ok(existsSync(SYNCLINE_BIN), `${SYNCLINE_BIN} is missing: cargo build -p syncline-server`)
    const env = {
      ...process.env,
      DATABASE_URL: this.fleet.cluster.url,
      ELECTRIC_PORT: String(this.port),
      SYNCLINE_LISTEN_ADDRESS: '127.0.0.1',
      ELECTRIC_INSECURE: 'true',
      ELECTRIC_STORAGE_DIR: this.fleet.storageDir,
      ELECTRIC_SHAPE_CHUNK_BYTES_THRESHOLD: String(CHUNK_BYTES),
      ELECTRIC_LONG_POLL_TIMEOUT: String(LONG_POLL_TIMEOUT_MS),
      ELECTRIC_REPLICATION_STREAM_ID: this.fleet.streamId,
      // Several servers on one cluster (max_connections 100).
      ELECTRIC_DB_POOL_SIZE: '4',
      SYNCLINE_ROLE: this.roleSetting,
      NO_COLOR: '1',
      ...this.fleet.serverEnv,
    }
    const log = createWriteStream(path.join(this.fleet.logDir, `${this.name}.log`), { flags: 'a' })
    const child = spawnGuarded(SYNCLINE_BIN, ['serve'], { env, stdio: ['ignore', 'pipe', 'pipe'] })
    this.child = child
    this.startedAt = Date.now()
    this.note(
      `--- ${this.name} start (pid ${child.pid}, slot ${this.slot}, port ${this.port}, role ${this.roleSetting}) ---`,
    )
    for (const s of [child.stdout, child.stderr]) {
      createInterface({ input: s }).on('line', (l) => {
        this.output.push(l)
        log.write(`${l}\n`)
      })
    }
    child.exited.then((status) => {
      this.exitStatus = status
      this.note(`--- ${this.name} exited (pid ${child.pid}): ${status} ---`)
      log.end()
    })
  }

  note(line) {
    this.output.push(line)
    this.fleet.events.push(`${new Date().toISOString()} ${line}`)
  }

  get alive() {
    return this.child !== null && this.exitStatus === undefined
  }

  /** `/v1/health` of this server: `{code, body}` or `{error}`. */
  async health() {
    try {
      const res = await fetch(`${this.baseUrl}/v1/health`, { signal: AbortSignal.timeout(5000) })
      const text = await res.text()
      let body
      try {
        body = JSON.parse(text)
      } catch {
        body = { raw: text }
      }
      return { code: res.status, body }
    } catch (error) {
      return { error: String(error.cause ?? error) }
    }
  }

  /**
   * Polls `/v1/health` until `accept(health)` holds; resolves to the milliseconds it took.
   * Fails if the process exits or after `timeoutMs`.
   */
  async waitHealth(accept, what, timeoutMs = SERVER_START_TIMEOUT_MS) {
    const start = Date.now()
    let last = 'no answer'
    while (Date.now() - start < timeoutMs) {
      if (!this.alive)
        throw new Error(`${this.name} exited (${this.exitStatus}) while waiting for ${what}:\n${this.tail()}`)
      const h = await this.health()
      last = h.error ?? `${h.code} ${JSON.stringify(h.body)}`
      if (!h.error && accept(h)) return Date.now() - start
      await sleep(50)
    }
    throw new Error(`${this.name}: no ${what} after ${timeoutMs} ms (last: ${last}):\n${this.tail()}`)
  }

  /** Waits until the server serves (200, active), whatever its role; resolves to that role. */
  async waitServing(timeoutMs) {
    await this.waitHealth((h) => h.code === 200 && h.body.status === 'active', '200 active health', timeoutMs)
    return (await this.health()).body.role
  }

  /** Waits until the server reports role `role` with 200; resolves to the ms it took. */
  async waitRole(role, timeoutMs) {
    return this.waitHealth(
      (h) => h.code === 200 && h.body.status === 'active' && h.body.role === role,
      `role ${role}`,
      timeoutMs,
    )
  }

  /** Sends `signal` and waits for the exit; resolves to `{ms, status}` (fails after timeoutMs). */
  async stop(signal, timeoutMs = 30_000) {
    const child = this.child
    assert.ok(child, `${this.name} was never started`)
    const start = Date.now()
    this.note(`--- ${this.name} ${signal} (pid ${child.pid}) ---`)
    child.kill(signal)
    const status = await Promise.race([child.exited, sleep(timeoutMs).then(() => 'timeout')])
    if (status === 'timeout') {
      throw new Error(`${this.name} did not exit within ${timeoutMs} ms of ${signal}:\n${this.tail()}`)
    }
    return { ms: Date.now() - start, status }
  }

  /** SIGTERM: stop listening, end live requests, hand the writer's lock over, exit. */
  terminate(timeoutMs) {
    return this.stop('SIGTERM', timeoutMs)
  }

  /** SIGKILL. */
  kill() {
    return this.stop('SIGKILL')
  }

  tail(lines = OUTPUT_TAIL_LINES) {
    return this.output.slice(-lines).join('\n')
  }
}

/**
 * A private cluster, a storage directory and a stream id shared by the servers started with
 * startServer(), and (once startNginx() ran) nginx in front of the fleet's slots.
 */
export class Fleet {
  /**
   * `sql` runs first (tables, seed rows); `slots` is how many server addresses nginx knows;
   * `serverEnv` adds to every server's environment.
   */
  static async start({ sql = '', slots = 3, serverEnv = {} } = {}) {
    const cluster = await startTrackedCluster()
    const fleet = new Fleet(cluster, serverEnv)
    fleets.add(fleet)
    for (let i = 0; i < slots; i++) fleet.ports.push(await freePort())
    if (sql) await fleet.sql(sql)
    return fleet
  }

  constructor(cluster, serverEnv) {
    this.cluster = cluster
    this.serverEnv = serverEnv
    this.pool = new pg.Pool({ connectionString: cluster.url, max: 4 })
    this.dir = tempDir('syncline-fleet-')
    this.storageDir = path.join(this.dir, 'storage')
    this.logDir = path.join(this.dir, 'logs')
    mkdirSync(this.logDir)
    this.streamId = `fleet_${process.pid}_${nextStreamId++}`
    this.ports = []
    this.servers = []
    /** Timestamped starts, signals and exits, in order. */
    this.events = []
    this.nginx = null
    this.clients = null
  }

  /** Spawns a server in `slot` (whose previous server must be gone) and waits until it serves. */
  async startServer({ name, slot, role = 'auto', timeoutMs } = {}) {
    const busy = this.servers.find((s) => s.slot === slot && s.alive)
    assert.ok(!busy, `slot ${slot} is still held by ${busy?.name}`)
    const server = new Server(this, { name: name ?? `s${this.servers.length}`, slot, role })
    this.servers.push(server)
    server.spawn()
    server.servingAfterMs = await server.waitHealth(
      (h) => h.code === 200 && h.body.status === 'active',
      '200 active health',
      timeoutMs,
    )
    return server
  }

  /** Starts nginx with deploy/nginx/syncline.conf over every slot. */
  async startNginx() {
    this.nginx = await Nginx.start(this.ports.map((p) => `127.0.0.1:${p}`))
    return this.nginx
  }

  /** Runs SQL on the cluster's `postgres` database. */
  async sql(text, params) {
    return this.pool.query(text, params)
  }

  async rows(text, params) {
    return (await this.pool.query(text, params)).rows
  }

  diagnostics() {
    const parts = []
    for (const s of this.servers.slice(-4)) {
      parts.push(
        `--- ${s.name} (slot ${s.slot}, ${s.alive ? 'running' : `exited ${s.exitStatus}`}) last ${OUTPUT_TAIL_LINES} lines ---`,
      )
      parts.push(s.tail())
    }
    parts.push('--- fleet events (last 30) ---', this.events.slice(-30).join('\n'))
    if (this.nginx) parts.push(this.nginx.diagnostics())
    if (this.clients) parts.push(this.clients.diagnostics())
    return parts.join('\n')
  }

  async close() {
    if (!fleets.delete(this)) return
    this.clients?.abortAll()
    await Promise.all(this.servers.filter((s) => s.alive).map((s) => s.kill().catch(() => {})))
    await this.nginx?.stop()
    await this.pool.end()
    await this.cluster.stop()
  }
}

/** `$time_iso8601 $status "$upstream_status" "$upstream_addr" $upstream_cache_status $request_time $request_method $request_uri` */
const ACCESS_LINE = /^(\S+) (\d{3}) "([^"]*)" "([^"]*)" (\S+) (\S+) (\S+) (.*)$/

/**
 * nginx in the foreground (`-g 'daemon off;'`) with everything it writes (pid, logs, temp and
 * cache directories) in a temp dir, and deploy/nginx/syncline.conf filled in for the upstreams.
 */
export class Nginx {
  static async start(upstreams) {
    assert.ok(existsSync(NGINX_BIN), `${NGINX_BIN} is missing (Debian: apt-get install nginx-light)`)
    const dir = tempDir('syncline-nginx-')
    // Workers run as another user when nginx starts as root, unless `user root;`; the dirs are
    // world-writable too, for whichever user the workers end up as.
    chmodSync(dir, 0o777)
    const port = await freePort()
    const sub = (name) => path.join(dir, name)
    for (const d of ['cache', 'client_body_temp', 'proxy_temp', 'fastcgi_temp', 'uwsgi_temp', 'scgi_temp']) {
      mkdirSync(sub(d))
      chmodSync(sub(d), 0o777)
    }
    const values = {
      SYNCLINE_LISTEN: `127.0.0.1:${port}`,
      SYNCLINE_UPSTREAM_SERVERS: upstreams.map((u) => `server ${u} max_fails=0;`).join('\n    '),
      SYNCLINE_CACHE_DIR: sub('cache'),
    }
    const template = readFileSync(NGINX_TEMPLATE, 'utf8')
    const filled = template.replace(/\$\{(SYNCLINE_[A-Z_]+)\}/g, (m, name) => {
      assert.ok(name in values, `unknown placeholder ${m} in ${NGINX_TEMPLATE}`)
      return values[name]
    })
    writeFileSync(sub('syncline.conf'), filled)
    const conf = sub('nginx.conf')
    writeFileSync(
      conf,
      [
        process.getuid?.() === 0 ? 'user root;' : '',
        'worker_processes 1;',
        `pid ${sub('nginx.pid')};`,
        `error_log ${sub('error.log')} warn;`,
        'events { worker_connections 1024; }',
        'http {',
        `  client_body_temp_path ${sub('client_body_temp')};`,
        `  proxy_temp_path ${sub('proxy_temp')};`,
        `  fastcgi_temp_path ${sub('fastcgi_temp')};`,
        `  uwsgi_temp_path ${sub('uwsgi_temp')};`,
        `  scgi_temp_path ${sub('scgi_temp')};`,
        `  include ${sub('syncline.conf')};`,
        `  access_log ${sub('access.log')} syncline;`,
        '}',
        '',
      ].join('\n'),
    )
    writeFileSync(sub('access.log'), '')
    writeFileSync(sub('error.log'), '')
    const args = ['-p', dir, '-c', conf, '-e', sub('error.log')]
    const check = spawn(NGINX_BIN, [...args, '-t'], { stdio: ['ignore', 'pipe', 'pipe'] })
    let checkOutput = ''
    check.stdout.on('data', (d) => (checkOutput += d))
    check.stderr.on('data', (d) => (checkOutput += d))
    const checkCode = await new Promise((resolve) => check.once('exit', resolve))
    assert.equal(checkCode, 0, `nginx -t failed:\n${checkOutput}\n${filled}`)

    const child = spawnGuarded(NGINX_BIN, [...args, '-g', 'daemon off;'], { stdio: ['ignore', 'pipe', 'pipe'] })
    let output = ''
    child.stdout.on('data', (d) => (output += d))
    child.stderr.on('data', (d) => (output += d))
    const nginx = new Nginx(dir, port, child)
    const deadline = Date.now() + NGINX_START_TIMEOUT_MS
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`nginx exited during start-up: ${output}\n${nginx.errorLog()}`)
      }
      if (await canConnect(port)) break
      if (Date.now() > deadline) throw new Error(`nginx does not listen on ${port}: ${output}`)
      await sleep(50)
    }
    // The workers too, so that an unclean exit of this process kills them (a killed master
    // leaves its workers running).
    nginx.trackWorkers()
    return nginx
  }

  constructor(dir, port, child) {
    this.dir = dir
    this.port = port
    this.child = child
    this.workers = []
  }

  trackWorkers() {
    try {
      const pids = readFileSync(`/proc/${this.child.pid}/task/${this.child.pid}/children`, 'utf8')
      // With setpriv, this.child is setpriv's pid, which exec'd nginx: same pid.
      for (const pid of pids.trim().split(/\s+/).filter(Boolean).map(Number)) {
        this.workers.push(pid)
        children.add(pid)
      }
    } catch {
      // no /proc: the workers exit when the master is stopped cleanly
    }
  }

  get baseUrl() {
    return `http://127.0.0.1:${this.port}`
  }

  get shapeUrl() {
    return `${this.baseUrl}/v1/shape`
  }

  /** Every access-log line so far, parsed. */
  accessLog() {
    const text = readFileSync(path.join(this.dir, 'access.log'), 'utf8')
    return text
      .split('\n')
      .filter(Boolean)
      .map((line) => {
        const m = ACCESS_LINE.exec(line)
        if (!m) return { line, status: 0 }
        const [, time, status, upstreamStatus, upstreamAddr, cacheStatus, requestTime, method, uri] = m
        return {
          line,
          time,
          status: Number(status),
          upstreamStatus,
          upstreamAddr,
          cacheStatus,
          requestTime: Number(requestTime),
          method,
          uri: uri.trim(),
        }
      })
  }

  errorLog() {
    try {
      return readFileSync(path.join(this.dir, 'error.log'), 'utf8')
    } catch {
      return ''
    }
  }

  diagnostics() {
    const failed = this.accessLog().filter((e) => !isSuccess(e.status))
    return [
      `--- nginx error log (last 30 lines) ---`,
      this.errorLog().split('\n').filter(Boolean).slice(-30).join('\n') || '  empty',
      `--- nginx responses that were not 2xx/304 (last 30 of ${failed.length}) ---`,
      failed
        .slice(-30)
        .map((e) => `  ${e.line}`)
        .join('\n') || '  none',
    ].join('\n')
  }

  async stop() {
    const child = this.child
    if (child.exitCode !== null || child.signalCode !== null) return
    child.kill('SIGTERM') // fast shutdown; the master stops its workers
    await Promise.race([child.exited, sleep(5000)])
    for (const pid of this.workers) children.delete(pid)
  }
}

async function canConnect(port) {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => resolve(false))
  })
}

/** What a client may be sent: 2xx, or 304 (not modified). */
export function isSuccess(status) {
  return (status >= 200 && status < 300) || status === 304
}

/**
 * Summary of an access log: how many requests, how many a client got something other than
 * 2xx/304 (`failed`, listed in `failures`), 499s (the client gave up; not sent to it), how many
 * needed more than one upstream (`retried`, by first upstream status), cache hits.
 */
export function summarizeAccess(entries) {
  const summary = {
    requests: entries.length,
    failed: 0,
    failures: [],
    clientClosed: 0,
    retried: 0,
    retriedAfter: {},
    retriedMaxTime: 0,
    cache: {},
    byStatus: {},
  }
  for (const e of entries) {
    summary.byStatus[e.status] = (summary.byStatus[e.status] ?? 0) + 1
    if (e.status === 499) summary.clientClosed++
    else if (!isSuccess(e.status)) {
      summary.failed++
      summary.failures.push(e.line)
    }
    const attempts = (e.upstreamStatus ?? '').split(/,\s*|\s*:\s*/).filter((s) => s && s !== '-')
    if (attempts.length > 1) {
      summary.retried++
      summary.retriedMaxTime = Math.max(summary.retriedMaxTime, e.requestTime)
      for (const a of attempts.slice(0, -1)) summary.retriedAfter[a] = (summary.retriedAfter[a] ?? 0) + 1
    }
    if (e.cacheStatus && e.cacheStatus !== '-') summary.cache[e.cacheStatus] = (summary.cache[e.cacheStatus] ?? 0) + 1
  }
  return summary
}

/**
 * Clients of the official @electric-sql/client through one URL: each records its HTTP exchanges
 * and its errors (an onError that returns nothing, so a reported error stops its stream).
 */
export class Clients {
  constructor(fleet, shapeUrl) {
    this.fleet = fleet
    this.shapeUrl = shapeUrl
    this.list = []
    this.controllers = []
    /** Every HTTP exchange, in order: {client, t, method, url, status?, error?, body?}. */
    this.exchanges = []
    /** {client, error} for each onError callback. */
    this.errors = []
    fleet.clients = this
  }

  /**
   * A Shape following `params` (liveSse when `sse`); `query` is the SELECT it must end equal to.
   * The client's messages are checked with trackLog.
   */
  open(name, { params, sse = false, query }) {
    const controller = new AbortController()
    this.controllers.push(controller)
    const stream = new ShapeStream({
      url: this.shapeUrl,
      params,
      liveSse: sse,
      signal: controller.signal,
      fetchClient: this.recordingFetch(name),
      backoffOptions: { initialDelay: 50, maxDelay: 500, multiplier: 2, maxRetries: Infinity },
      onError: (error) => {
        this.errors.push({ client: name, error })
      },
    })
    const client = { name, params, sse, query, stream, shape: new Shape(stream), log: trackLog(stream) }
    this.list.push(client)
    return client
  }

  recordingFetch(name) {
    return async (input, init = {}) => {
      const entry = {
        client: name,
        t: Date.now(),
        method: init.method ?? 'GET',
        url: typeof input === 'string' ? input : input.url,
      }
      this.exchanges.push(entry)
      try {
        const res = await fetch(input, init)
        entry.status = res.status
        entry.contentType = res.headers.get('content-type')
        entry.handle = res.headers.get('electric-handle')
        entry.offset = res.headers.get('electric-offset')
        if (res.status >= 400) entry.body = await res.clone().text()
        return res
      } catch (error) {
        entry.error = String(error.cause ?? error)
        throw error
      }
    }
  }

  /** Exchanges whose answer was neither 2xx nor 304, or that failed below HTTP (not aborts). */
  failedExchanges() {
    return this.exchanges.filter(
      (e) => (e.status !== undefined && !isSuccess(e.status)) || (e.error && !/abort/i.test(e.error)),
    )
  }

  abortAll() {
    for (const c of this.controllers) c.abort()
  }

  diagnostics() {
    const errors = this.errors.map((e) => `  ${e.client}: ${describeError(e.error)}`).join('\n')
    const failed = this.failedExchanges().slice(-EXCHANGES_SHOWN).map(describeExchange).join('\n')
    const last = this.exchanges.slice(-EXCHANGES_SHOWN).map(describeExchange).join('\n')
    return [
      `--- client onError callbacks ---`,
      errors || '  none',
      `--- client exchanges that failed (last ${EXCHANGES_SHOWN}) ---`,
      failed || '  none',
      `--- last ${EXCHANGES_SHOWN} client exchanges ---`,
      last || '  none',
    ].join('\n')
  }
}

export function describeExchange(e) {
  const answer = e.error
    ? `error ${e.error}`
    : e.status === undefined
      ? 'pending'
      : `${e.status} ${e.contentType ?? ''} handle=${e.handle} offset=${e.offset}` + (e.body ? ` body=${e.body}` : '')
  return `  [${e.client}] ${new Date(e.t).toISOString()} ${e.method} ${decodeURIComponent(e.url)}\n    -> ${answer}`
}

export function describeError(e) {
  if (e && typeof e === 'object' && 'status' in e) {
    return `${e.name} ${e.status} ${e.url ?? ''}: ${e.text ?? JSON.stringify(e.json) ?? e.message}`
  }
  return String(e?.stack ?? e)
}

/**
 * Subscribes to `stream` and checks the log it delivers, like harness.js's trackMessages (no
 * insert of a key already present, no update or delete of an absent key; must-refetch starts
 * over), except for one documented client quirk: after an SSE up-to-date the client resumes
 * from `<global_last_seen_lsn>_0`, so a reconnect re-delivers the rest of that transaction.
 * A replicated change (one with `lsn` and `op_position`) delivered again is counted in
 * `resent` and must be byte-for-byte the message delivered before; it is not applied twice.
 * Returns `{messages, problems, resent}`; `problems` should stay empty.
 */
export function trackLog(stream) {
  const present = new Set()
  const seen = new Map()
  const result = { messages: 0, problems: [], resent: [] }
  stream.subscribe((batch) => {
    for (const m of batch) {
      result.messages++
      if (m.headers.control === 'must-refetch') {
        present.clear()
        seen.clear()
      }
      if (!('key' in m)) continue
      const { lsn, op_position: position } = m.headers
      if (lsn !== undefined && position !== undefined) {
        const id = `${lsn}/${position}`
        const text = JSON.stringify(m)
        if (seen.has(id)) {
          result.resent.push(id)
          if (seen.get(id) !== text)
            result.problems.push(`change ${id} delivered twice, differently:\n    ${seen.get(id)}\n    ${text}`)
          continue
        }
        seen.set(id, text)
      }
      const op = m.headers.operation
      if (op === 'insert') {
        if (present.has(m.key)) result.problems.push(`duplicate insert of ${m.key} (lsn ${lsn ?? 'snapshot'})`)
        present.add(m.key)
      } else if (!present.has(m.key)) {
        result.problems.push(`${op} of absent ${m.key} (lsn ${lsn})`)
      } else if (op === 'delete') {
        present.delete(m.key)
      }
    }
  })
  return result
}

// The auth proxy in front of a real Syncline (started with ELECTRIC_SECRET) on a private Postgres
// cluster: the official @electric-sql/client syncs through it as alice and as bob, then alice
// tries, with raw HTTP, every way we could think of to see bob's rows, another table, or
// Syncline's secret.
//
// Run: npm ci && npm test (SYNCLINE_BIN / SYNCLINE_PG_CLUSTER_BIN point at other binaries).

import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { existsSync } from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { createInterface } from 'node:readline'
import { after, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { gunzipSync } from 'node:zlib'

import { Shape, ShapeStream } from '@electric-sql/client'
import pg from 'pg'

import { freePort, startCluster } from '../../../tests/support/cluster.js'
import { createProxy, privateCacheControl } from '../proxy.js'

const here = path.dirname(fileURLToPath(import.meta.url))
const exampleDir = path.resolve(here, '..')
const SYNCLINE_BIN = path.resolve(process.env.SYNCLINE_BIN ?? path.join(exampleDir, '../../target/debug/syncline'))

const LONG_POLL_TIMEOUT_MS = 3000
const START_TIMEOUT_MS = 60_000
const EVENTUALLY_TIMEOUT_MS = 15_000

/** Syncline's secret: only the proxy knows it. */
const SECRET = randomBytes(24).toString('hex')
const ALICE_TOKEN = `alice-${randomBytes(12).toString('hex')}`
const BOB_TOKEN = `bob-${randomBytes(12).toString('hex')}`
/** Every row alice must never see carries this text (and an id of 100 or more). */
const MARKER = 'BOB-PRIVATE'

// ------------------------------------------------------------------------------------------
// The stack: cluster, Syncline, proxy. Everything started is stopped in `after`.
// ------------------------------------------------------------------------------------------

const children = new Set()
process.on('exit', () => {
  for (const child of children) child.kill('SIGKILL')
})
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => process.exit(128 + os.constants.signals[signal]))
}

const controllers = []
const output = []

const cluster = await startCluster()
const pool = new pg.Pool({ connectionString: cluster.url, max: 4 })
let syncline
let proxy
after(async () => {
  for (const c of controllers) c.abort()
  await stop(proxy?.child, 'SIGTERM')
  await stop(syncline?.child, 'SIGTERM')
  await pool.end()
  await cluster.stop()
  // The client keeps a 60 s timer (its throttled up-to-date cache save) that would hold this
  // process open after the last test.
  setTimeout(() => process.exit(), 1000).unref()
})

await sql(`
  CREATE TABLE notes (id int PRIMARY KEY, owner_id text NOT NULL, body text);
  INSERT INTO notes VALUES
    (1, 'alice', 'alice note 1'), (2, 'alice', 'alice note 2'), (3, 'alice', 'alice note 3'),
    (101, 'bob', '${MARKER} 101'), (102, 'bob', '${MARKER} 102');
  CREATE TABLE secrets (id int PRIMARY KEY, owner_id text NOT NULL, body text);
  INSERT INTO secrets VALUES (1, 'alice', '${MARKER} secrets 1'), (100, 'bob', '${MARKER} secrets 100');
`)
syncline = await startSyncline()
proxy = await startProxy()

async function startSyncline() {
  assert.ok(existsSync(SYNCLINE_BIN), `${SYNCLINE_BIN} is missing: cargo build -p syncline-server`)
  const port = await freePort()
  const child = spawnChild('syncline', SYNCLINE_BIN, ['serve'], {
    DATABASE_URL: cluster.url,
    ELECTRIC_PORT: String(port),
    SYNCLINE_LISTEN_ADDRESS: '127.0.0.1',
    ELECTRIC_SECRET: SECRET,
    ELECTRIC_STORAGE_DIR: path.join(cluster.socket_dir, 'syncline-storage'),
    ELECTRIC_LONG_POLL_TIMEOUT: String(LONG_POLL_TIMEOUT_MS),
    ELECTRIC_REPLICATION_STREAM_ID: `auth_proxy_${process.pid}`,
    NO_COLOR: '1',
  })
  const baseUrl = `http://127.0.0.1:${port}`
  const deadline = Date.now() + START_TIMEOUT_MS
  for (;;) {
    if (child.exitCode !== null) throw new Error(`syncline exited during start-up:\n${tail()}`)
    try {
      const res = await fetch(`${baseUrl}/v1/health`)
      if (res.status === 200 && (await res.json()).status === 'active') break
    } catch {}
    if (Date.now() > deadline) throw new Error(`syncline not healthy:\n${tail()}`)
    await sleep(50)
  }
  return { child, baseUrl, port }
}

async function startProxy() {
  const child = spawnChild('proxy', process.execPath, [path.join(exampleDir, 'server.js')], {
    ELECTRIC_SECRET: SECRET,
    SYNCLINE_URL: syncline.baseUrl,
    HOST: '127.0.0.1',
    PORT: '0',
    AUTH_TOKENS: JSON.stringify({ [ALICE_TOKEN]: 'alice', [BOB_TOKEN]: 'bob' }),
  })
  const line = await firstLine(child.stdout, 'proxy')
  const match = /listening on (http:\/\/[^/]+)/.exec(line ?? '')
  if (!match) throw new Error(`the proxy did not start:\n${tail()}`)
  return { child, baseUrl: match[1], port: Number(new URL(match[1]).port), url: `${match[1]}/shapes/notes` }
}

function spawnChild(label, bin, args, env) {
  // setpriv makes the kernel kill the child if this process dies without cleaning up.
  const [cmd, argv] = existsSync('/usr/bin/setpriv')
    ? ['/usr/bin/setpriv', ['--pdeathsig', 'KILL', '--', bin, ...args]]
    : [bin, args]
  const child = spawn(cmd, argv, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  children.add(child)
  child.exited = new Promise((resolve) => child.once('exit', resolve))
  createInterface({ input: child.stderr }).on('line', (l) => output.push(`[${label}] ${l}`))
  return child
}

async function stop(child, signal) {
  if (!child) return
  if (child.exitCode === null && child.signalCode === null) child.kill(signal)
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000)
  await child.exited
  clearTimeout(timer)
  children.delete(child)
}

function firstLine(stream, label) {
  const lines = createInterface({ input: stream })
  const first = new Promise((resolve) => {
    lines.once('line', resolve)
    lines.once('close', () => resolve(null))
  })
  // Later lines go to the shared output (shown when a test fails).
  first.then(() => lines.on('line', (l) => output.push(`[${label}] ${l}`)))
  return Promise.race([
    first,
    sleep(START_TIMEOUT_MS).then(() => Promise.reject(new Error(`${label}: no output after ${START_TIMEOUT_MS} ms`))),
  ])
}

function tail() {
  return output.slice(-40).join('\n')
}

async function sql(text, params) {
  return pool.query(text, params)
}

async function rows(text, params) {
  return (await pool.query(text, params)).rows
}

async function eventually(check, timeoutMs = EVENTUALLY_TIMEOUT_MS) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    try {
      return await check()
    } catch (error) {
      if (Date.now() > deadline) {
        if (error instanceof Error) error.message += `\n--- output ---\n${tail()}`
        throw error
      }
    }
    await sleep(50)
  }
}

const byId = (list) => [...list].sort((a, b) => a.id - b.id)

// ------------------------------------------------------------------------------------------
// Leak checks: every response the proxy gives is recorded and checked.
// ------------------------------------------------------------------------------------------

/** Responses the proxy gave alice (and anyone else but bob): never bob's rows, never the secret. */
const problems = []

/** Fails the check of one response as alice: bob's rows, the other table, or the secret. */
function checkAliceResponse(what, status, headers, text) {
  const flat = [...headers].map(([k, v]) => `${k}: ${v}`).join('\n')
  if (text.includes(MARKER)) problems.push(`${what} -> ${status}: bob's rows leaked: ${text.slice(0, 300)}`)
  if (text.includes(SECRET) || flat.includes(SECRET)) problems.push(`${what} -> ${status}: the secret leaked`)
  if (/"owner_id":"bob"/.test(text)) problems.push(`${what} -> ${status}: a row of bob's: ${text.slice(0, 300)}`)
}

/**
 * fetch() on the proxy as alice (unless `init.headers` says otherwise), checked for leaks (as
 * bob: for the secret only).
 */
async function aliceFetch(pathAndQuery, init = {}) {
  const headers = { authorization: `Bearer ${ALICE_TOKEN}`, ...init.headers }
  for (const [k, v] of Object.entries(headers)) if (v === undefined) delete headers[k]
  const res = await fetch(`${proxy.baseUrl}${pathAndQuery}`, { ...init, headers })
  const text = await res.text()
  if (headers.authorization !== `Bearer ${BOB_TOKEN}`) {
    checkAliceResponse(`${init.method ?? 'GET'} ${pathAndQuery}`, res.status, res.headers, text)
  } else if (text.includes(SECRET) || [...res.headers.values()].some((v) => v.includes(SECRET))) {
    problems.push(`${pathAndQuery} as bob: the secret leaked`)
  }
  return { status: res.status, headers: res.headers, text, json: () => JSON.parse(text) }
}

/** A raw HTTP request to the proxy: the request target is sent exactly as given. */
function rawRequest(target, { method = 'GET', headers = {} } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: proxy.port, method, path: target, headers }, (res) => {
      const chunks = []
      res.on('data', (c) => chunks.push(c))
      res.on('end', () => {
        const body = Buffer.concat(chunks)
        const text = res.headers['content-encoding'] === 'gzip' ? gunzipSync(body).toString() : body.toString()
        const h = new Headers()
        for (const [k, v] of Object.entries(res.headers)) h.set(k, String(v))
        checkAliceResponse(`${method} ${target}`, res.statusCode, h, text)
        resolve({ status: res.statusCode, headers: res.headers, text, raw: body })
      })
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end()
  })
}

/**
 * Reads alice's shape over plain HTTP the way the protocol describes (offset -1, then each
 * offset given, until up-to-date), adding `extra` (a raw query string) to every request.
 */
async function follow(extra, { token = ALICE_TOKEN } = {}) {
  let offset = '-1'
  let handle
  const messages = []
  for (let i = 0; i < 20; i++) {
    const query = `offset=${offset}${handle ? `&handle=${handle}` : ''}${extra ? `&${extra}` : ''}`
    const res = await aliceFetch(`/shapes/notes?${query}`, { headers: { authorization: `Bearer ${token}` } })
    assert.equal(res.status, 200, `?${query} -> ${res.status} ${res.text}`)
    messages.push(...res.json())
    handle = res.headers.get('electric-handle')
    offset = res.headers.get('electric-offset')
    if (res.headers.has('electric-up-to-date')) return { handle, offset, messages }
  }
  throw new Error(`not up to date after 20 requests with ${extra}`)
}

/** The rows a message list leaves (insert = set, update = merge, delete = remove). */
function apply(messages) {
  const state = new Map()
  for (const m of messages) {
    if (!('key' in m)) continue
    if (m.headers.operation === 'delete') state.delete(m.key)
    else state.set(m.key, { ...state.get(m.key), ...m.value })
  }
  return byId([...state.values()].map((v) => ({ ...v, id: Number(v.id) })))
}

const aliceRows = () => rows(`SELECT * FROM notes WHERE owner_id = 'alice' ORDER BY id`)
const bobRows = () => rows(`SELECT * FROM notes WHERE owner_id = 'bob' ORDER BY id`)

// ------------------------------------------------------------------------------------------
// The official client.
// ------------------------------------------------------------------------------------------

/** A ShapeStream through the proxy with `token`; every response of alice's is leak-checked. */
function stream(token, options = {}) {
  const controller = new AbortController()
  controllers.push(controller)
  const exchanges = []
  const errors = []
  const s = new ShapeStream({
    url: proxy.url,
    headers: { Authorization: `Bearer ${token}` },
    signal: controller.signal,
    backoffOptions: { initialDelay: 50, maxDelay: 500, multiplier: 2, maxRetries: Infinity },
    onError: (error) => {
      errors.push(error)
    },
    fetchClient: async (input, init) => {
      const url = typeof input === 'string' ? input : input.url
      const entry = { url, method: init?.method ?? 'GET' }
      exchanges.push(entry)
      const res = await fetch(input, init)
      entry.status = res.status
      entry.contentType = res.headers.get('content-type')
      if (token === ALICE_TOKEN) {
        // Read a copy of the body; a stream aborted by the client just goes unchecked here
        // (its messages are checked where they arrive).
        res
          .clone()
          .text()
          .then((text) => checkAliceResponse(`client ${url}`, res.status, res.headers, text))
          .catch(() => {})
      }
      return res
    },
    ...options,
  })
  s.exchanges = exchanges
  s.errors = errors
  s.stop = () => controller.abort()
  return s
}

/** Collects every message of a stream. */
function collect(s) {
  const messages = []
  s.subscribe((batch) => messages.push(...batch))
  return messages
}

/** Asserts none of `messages` is a row of bob's (ids >= 100) or carries his text. */
function assertOnlyAlice(messages, label) {
  const foreign = messages.filter((m) => 'key' in m && (Number(m.value?.id) >= 100 || JSON.stringify(m).includes(MARKER)))
  assert.deepEqual(foreign, [], `${label}: messages of bob's rows`)
}

async function untilRows(shape, expected, s = shape.stream) {
  await eventually(async () => {
    if (s.errors.length) throw new Error(`stream failed: ${s.errors.map(String).join('; ')}`)
    assert.deepEqual(byId(shape.currentRows), await expected())
  })
}

test('alice syncs only her rows; her live changes arrive, bob\'s never do', async () => {
  const s = stream(ALICE_TOKEN)
  const messages = collect(s)
  const shape = new Shape(s)
  await untilRows(shape, aliceRows, s)

  // Bob's changes first, then alice's: once alice's have arrived, bob's would have too.
  await sql(`INSERT INTO notes VALUES (103, 'bob', '${MARKER} 103')`)
  await sql(`UPDATE notes SET body = '${MARKER} changed' WHERE id = 101`)
  await sql(`DELETE FROM notes WHERE id = 102`)
  await sql(`INSERT INTO notes VALUES (4, 'alice', 'alice note 4')`)
  await sql(`UPDATE notes SET body = 'alice changed' WHERE id = 1`)
  await sql(`DELETE FROM notes WHERE id = 2`)
  // A row given away: alice gets its delete, never its new text.
  await sql(`UPDATE notes SET owner_id = 'bob', body = '${MARKER} given' WHERE id = 3`)
  await sql(`INSERT INTO notes VALUES (5, 'alice', 'alice note 5')`)
  await untilRows(shape, aliceRows, s)
  assert.deepEqual(byId(shape.currentRows).map((r) => r.id), [1, 4, 5])
  assertOnlyAlice(messages, 'alice')
  assert.ok(s.exchanges.some((e) => e.url.includes('live=true') && e.status === 200), 'alice went live')
  s.stop()
})

test('bob syncs only his rows, through the same URL', async () => {
  const s = stream(BOB_TOKEN)
  const shape = new Shape(s)
  await untilRows(shape, bobRows, s)
  await sql(`INSERT INTO notes VALUES (6, 'alice', 'alice note 6'), (104, 'bob', '${MARKER} 104')`)
  await untilRows(shape, bobRows, s)
  assert.ok(byId(shape.currentRows).every((r) => r.owner_id === 'bob'))
  s.stop()
})

test('the client\'s own table, where, params and columns are ignored', async () => {
  const s = stream(ALICE_TOKEN, {
    params: { table: 'secrets', where: `owner_id = $1 OR true`, params: ['bob'], columns: ['id'], replica: 'full' },
  })
  const messages = collect(s)
  const shape = new Shape(s)
  await untilRows(shape, aliceRows, s)
  assert.ok(s.exchanges[0].url.includes('table=secrets'), 'the client did send its params')
  assertOnlyAlice(messages, 'alice with params')
  s.stop()
})

test('live changes over SSE reach alice, bob\'s do not', async () => {
  const s = stream(ALICE_TOKEN, { liveSse: true })
  const messages = collect(s)
  const shape = new Shape(s)
  await untilRows(shape, aliceRows, s)
  await eventually(() => assert.ok(s.exchanges.some((e) => e.url.includes('live_sse=true')), 'SSE request'))
  await sql(`INSERT INTO notes VALUES (105, 'bob', '${MARKER} 105')`)
  await sql(`INSERT INTO notes VALUES (7, 'alice', 'alice note 7')`)
  await untilRows(shape, aliceRows, s)
  assertOnlyAlice(messages, 'alice over SSE')
  const live = s.exchanges.filter((e) => e.url.includes('live=true'))
  assert.ok(live.length > 0)
  for (const e of live) {
    assert.ok(e.url.includes('live_sse=true'), `fell back to long-polling: ${e.url}`)
    if (e.status !== undefined) assert.match(e.contentType ?? '', /^text\/event-stream/, e.url)
  }
  s.stop()
})

for (const subsetMethod of ['GET', 'POST']) {
  test(`subset snapshots (${subsetMethod}) only narrow alice's shape`, async () => {
    const s = stream(ALICE_TOKEN, { log: 'changes_only', subsetMethod })
    const messages = collect(s)
    await eventually(() => assert.ok(s.isUpToDate && !s.errors.length, 'up to date'))
    const all = await s.requestSnapshot({ where: `owner_id <> $1 OR true`, params: { 1: 'alice' }, orderBy: 'id', limit: 100 })
    assert.deepEqual(byId(all.data.map((m) => ({ ...m.value }))), await aliceRows())
    const bobs = await s.requestSnapshot({ where: `owner_id = 'bob'` })
    assert.deepEqual(bobs.data, [])
    assertOnlyAlice([...messages, ...all.data, ...bobs.data], `${subsetMethod} subsets`)
    s.stop()
  })
}

// ------------------------------------------------------------------------------------------
// Raw requests as alice.
// ------------------------------------------------------------------------------------------

/** Extra query parameters that try to change the shape; each is added to every request. */
const TAMPERING = [
  'table=secrets',
  'table=public.secrets',
  'table=%22public%22.%22secrets%22',
  '%74able=secrets',
  'table%5B%5D=secrets',
  'table[x]=secrets',
  'where=true',
  "where=owner_id%3D'bob'",
  "where=owner_id+%3D+'bob'+OR+true",
  'where=true&where=false',
  "where=owner_id%3D'alice'&where=owner_id%3D'bob'",
  '%77here=true',
  'where%20=true',
  'WHERE=true',
  'where%3Dtrue',
  'params[1]=bob',
  'params%5B1%5D=bob',
  'params[1]=bob&params[1]=bob',
  'params[2]=bob',
  'params=%7B%221%22%3A%22bob%22%7D',
  'columns=id',
  'columns=id,owner_id,body',
  'columns[]=id',
  'queryable_columns=id',
  'replica=full',
  'experimental_compaction=true',
  'secret=wrong',
  'secret=',
  'api_secret=wrong',
  `secret=${SECRET.slice(0, 8)}`,
  'x=1;where=true',
  'x=1%26where%3Dtrue',
  'cursor=1%26table%3Dsecrets',
  'expired_handle=x%26where%3Dtrue',
  'cache-buster=1&table=secrets',
]

test('parameters that would change the shape are dropped: alice still gets exactly her rows', async () => {
  const expected = await aliceRows()
  for (const extra of TAMPERING) {
    const { messages } = await follow(extra)
    assert.deepEqual(apply(messages), expected, `with ${extra}`)
  }
  assert.deepEqual(problems, [])
})

test('a protocol parameter given twice, or smuggling others, is refused', async () => {
  for (const query of ['offset=-1&offset=0_0', 'offset=-1&log=full&log=changes_only', 'offset=-1&live_sse=false&live_sse=true']) {
    const res = await aliceFetch(`/shapes/notes?${query}`)
    assert.equal(res.status, 400, `${query} -> ${res.status} ${res.text}`)
  }
  // An encoded `&` stays inside its value: Syncline sees one odd offset, not a table.
  for (const query of ['offset=-1%26table%3Dsecrets', 'offset=-1%26where%3Dtrue', 'offset=-1&handle=x%26where%3Dtrue']) {
    const res = await aliceFetch(`/shapes/notes?${query}`)
    assert.ok(res.status === 400 || res.status === 200, `${query} -> ${res.status}`)
    // (An offset -1 answer is the shape's first snapshot: alice's rows back then.)
    if (res.status === 200) assertOnlyAlice(res.json(), query)
  }
  assert.deepEqual(problems, [])
})

test('bob\'s handle gets alice a 409 with her own handle, never his rows', async () => {
  const bob = await follow('', { token: BOB_TOKEN })
  const alice = await follow('')
  assert.notEqual(bob.handle, alice.handle)
  // offset -1 ignores the handle: alice's snapshot.
  const initial = await aliceFetch(`/shapes/notes?offset=-1&handle=${bob.handle}`)
  assert.equal(initial.status, 200)
  assert.equal(initial.headers.get('electric-handle'), alice.handle)
  for (const query of [
    `offset=0_0&handle=${bob.handle}`,
    `offset=${bob.offset}&handle=${bob.handle}`,
    `offset=${bob.offset}&handle=${bob.handle}&live=true`,
    `offset=${bob.offset}&handle=${bob.handle}&live=true&live_sse=true`,
    `offset=${bob.offset}&handle=${bob.handle}&subset__where=true`,
  ]) {
    const res = await aliceFetch(`/shapes/notes?${query}`)
    assert.equal(res.status, 409, `${query} -> ${res.status} ${res.text}`)
    assert.equal(res.headers.get('electric-handle'), alice.handle, query)
    assert.deepEqual(res.json(), [{ headers: { control: 'must-refetch' } }], query)
  }
  assert.deepEqual(problems, [])
})

test('subset parameters cannot widen the shape or reach another table', async () => {
  const { handle, offset } = await follow('log=changes_only')
  const base = `/shapes/notes?log=changes_only&offset=${offset}&handle=${handle}`
  const expected = await aliceRows()
  const rowsOfSubset = (res) => byId(res.json().data.map((m) => ({ ...m.value, id: Number(m.value.id) })))
  const cases = [
    // [query, expected rows or the status of a refusal]
    ['subset__where=true', expected],
    ['subset__where=true&where=true&table=secrets&params[1]=bob', expected],
    [`subset__where=owner_id+%3D+'bob'`, []],
    [`subset__where=owner_id+%3D+%241&subset__params=%7B%221%22%3A%22bob%22%7D`, []],
    [`subset__where=owner_id+%3D+%241&subset__params[1]=bob`, []],
    [`subset__where=owner_id+<>+%241+OR+true&subset__params[1]=alice&subset__order_by=id&subset__limit=100`, expected],
    [`subset__where=owner_id+%3D+%241&params[1]=bob`, 400],
    ['subset__where=true)+OR+(true', 400],
    [`subset__where=1%3D1)+OR+(owner_id+%3D+'bob'`, 400],
    [`subset__where=true%3B+SELECT+*+FROM+secrets`, 400],
    ['subset__where=id+IN+(SELECT+id+FROM+secrets)', 400],
    ['subset__where=EXISTS+(SELECT+1+FROM+secrets)', 400],
    ['subset__where=true&subset__order_by=id%3B+DELETE+FROM+notes', 400],
    ['subset__where=true&subset__order_by=(SELECT+1)', 400],
    ['subset__where=true&subset__order_by=id)+UNION+SELECT+*+FROM+notes+--', 400],
    ['subset__where=true&subset__where=false', 400],
    // Errors as an oracle: Postgres runs `owner_id = $1` (one operator, the cheapest a clause
    // can be) before any subset clause that can fail, so bob's row 101 never reaches the
    // division and no error text quotes his values (see the README for shapes where that
    // does not hold).
    ['subset__where=1%2F(id-101)+%3D+1', []],
    ['subset__where=body::bool', 400],
    ['subset__where=body::int+%3D+1', 400],
  ]
  for (const [query, want] of cases) {
    const res = await aliceFetch(`${base}&${query}`)
    if (typeof want === 'number') {
      assert.equal(res.status, want, `${query} -> ${res.status} ${res.text}`)
    } else {
      assert.equal(res.status, 200, `${query} -> ${res.status} ${res.text}`)
      assert.deepEqual(rowsOfSubset(res), want, query)
    }
  }
  // POST bodies: only the subset members reach Syncline.
  const post = (body) =>
    aliceFetch(base, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
  let res = await post(JSON.stringify({ where: 'true', table: 'secrets', secret: 'x', shape_where: 'true' }))
  assert.equal(res.status, 200, res.text)
  assert.deepEqual(rowsOfSubset(res), expected)
  res = await post(JSON.stringify({ where: 'owner_id = $1', params: { 1: 'bob' } }))
  assert.equal(res.status, 200, res.text)
  assert.deepEqual(rowsOfSubset(res), [])
  res = await post(JSON.stringify({ where: 'true) OR (true' }))
  assert.equal(res.status, 400, res.text)
  res = await post('{"where": "true", "where": "true) OR (true"}')
  assert.equal(res.status, 400, res.text)
  res = await post('not json')
  assert.equal(res.status, 400, res.text)
  res = await post('["where"]')
  assert.equal(res.status, 400, res.text)
  res = await post(JSON.stringify({ where: `'${'x'.repeat(2 << 20)}' = ''` }))
  assert.equal(res.status, 413, res.text)
  assert.deepEqual(problems, [])
})

test('no token, a bad token, or a token anywhere but the header: 401 and nothing else', async () => {
  const query = '/shapes/notes?offset=-1'
  for (const authorization of [
    undefined,
    '',
    'Bearer',
    'Bearer ',
    'Bearer wrong',
    `Bearer ${ALICE_TOKEN}x`,
    `Bearer ${ALICE_TOKEN.slice(0, -1)}`,
    `Bearer ${ALICE_TOKEN} ${BOB_TOKEN}`,
    `Bearer ${ALICE_TOKEN},Bearer ${BOB_TOKEN}`,
    `Basic ${Buffer.from(`alice:${ALICE_TOKEN}`).toString('base64')}`,
    `Token ${ALICE_TOKEN}`,
    ALICE_TOKEN,
    'Bearer __proto__',
    'Bearer constructor',
    'Bearer alice',
  ]) {
    const res = await aliceFetch(query, { headers: { authorization } })
    assert.equal(res.status, 401, `authorization ${authorization} -> ${res.status}`)
    assert.equal(res.headers.get('www-authenticate'), 'Bearer')
    assert.equal(res.headers.get('electric-handle'), null)
  }
  for (const q of [`token=${ALICE_TOKEN}`, `access_token=${ALICE_TOKEN}`, `authorization=Bearer+${ALICE_TOKEN}`]) {
    const res = await aliceFetch(`${query}&${q}`, { headers: { authorization: undefined } })
    assert.equal(res.status, 401, q)
  }
  // The scheme is case-insensitive (RFC 9110).
  assert.equal((await aliceFetch(query, { headers: { authorization: `bearer ${ALICE_TOKEN}` } })).status, 200)
  assert.deepEqual(problems, [])
})

test('only /shapes/notes is served: other paths, Syncline\'s own routes and odd methods are refused', async () => {
  const notFound = [
    '/',
    '/v1/shape?table=notes&offset=-1',
    '/v1/shape?table=secrets&offset=-1&secret=x',
    '/v1/health',
    '/metrics',
    '/shapes/secrets?offset=-1',
    '/shapes/notes/?offset=-1',
    '/shapes/notes/x?offset=-1',
    '/shapes/%6eotes?offset=-1',
    '/shapes/NOTES?offset=-1',
    '/shapes/notes%3Foffset=-1',
    '/shapes/notes%00?offset=-1',
    '/shapes/x/../notes?offset=-1',
    '/shapes/./notes?offset=-1',
    '//shapes/notes?offset=-1',
    '/shapes//notes?offset=-1',
    '/shapes/?offset=-1',
    '/shapes/__proto__?offset=-1',
    '/shapes/constructor?offset=-1',
    '/shapes/toString?offset=-1',
    '/shapes/hasOwnProperty?offset=-1',
    `http://127.0.0.1:${syncline.port}/v1/health`,
    `http://127.0.0.1:${syncline.port}/v1/shape?table=notes&offset=-1`,
    '*',
  ]
  const headers = { authorization: `Bearer ${ALICE_TOKEN}` }
  for (const target of notFound) {
    const res = await rawRequest(target, { headers })
    assert.equal(res.status, 404, `${target} -> ${res.status} ${res.text}`)
    assert.deepEqual(JSON.parse(res.text), { message: 'Not found' }, `${target}: answered by the proxy`)
    assert.equal(res.headers['electric-server'], undefined, `${target}: answered by the proxy`)
  }
  for (const method of ['DELETE', 'PUT', 'PATCH', 'HEAD']) {
    const res = await rawRequest('/shapes/notes?offset=-1', { method, headers })
    assert.equal(res.status, 405, `${method} -> ${res.status}`)
  }
  // A DELETE of bob's shape by handle is refused before it reaches Syncline.
  const bob = await follow('', { token: BOB_TOKEN })
  const del = await rawRequest(`/shapes/notes?handle=${bob.handle}`, { method: 'DELETE', headers })
  assert.equal(del.status, 405)
  assert.equal((await follow('', { token: BOB_TOKEN })).handle, bob.handle, "bob's shape is still there")
  assert.deepEqual(problems, [])
})

test('responses carry what the client needs and are private to the user', async () => {
  const first = await aliceFetch('/shapes/notes?offset=-1', { headers: { origin: 'https://app.example' } })
  assert.equal(first.status, 200)
  const h = first.headers
  for (const name of ['electric-handle', 'electric-offset', 'electric-schema', 'etag', 'content-type']) {
    assert.ok(h.get(name), `${name} is passed through`)
  }
  const cacheControl = h.get('cache-control')
  assert.match(cacheControl, /^private\b/)
  assert.doesNotMatch(cacheControl, /public|s-maxage/)
  assert.match(cacheControl, /max-age=\d+/, 'the browser cache still works')
  assert.ok(h.get('vary').split(/, */).includes('authorization'), `vary: ${h.get('vary')}`)
  assert.equal(h.get('access-control-allow-origin'), '*')
  const exposed = h.get('access-control-expose-headers').split(/, */)
  for (const name of ['electric-handle', 'electric-offset', 'electric-schema', 'electric-cursor', 'electric-up-to-date']) {
    assert.ok(exposed.includes(name), `${name} is exposed to browser scripts`)
  }
  // Revalidation with the etag: 304.
  const again = await aliceFetch('/shapes/notes?offset=-1', { headers: { 'if-none-match': h.get('etag') } })
  assert.equal(again.status, 304)
  // Bob's answer to the same URL has another etag: a cache holding alice's cannot satisfy bob.
  const bobs = await fetch(`${proxy.baseUrl}/shapes/notes?offset=-1`, {
    headers: { authorization: `Bearer ${BOB_TOKEN}`, 'if-none-match': h.get('etag') },
  })
  assert.equal(bobs.status, 200)
  assert.notEqual(bobs.headers.get('etag'), h.get('etag'))
  assert.ok(!(await bobs.text()).includes(SECRET))
  // gzip passes through as Syncline made it.
  const gz = await rawRequest('/shapes/notes?offset=-1', {
    headers: { authorization: `Bearer ${ALICE_TOKEN}`, 'accept-encoding': 'gzip' },
  })
  assert.equal(gz.status, 200)
  assert.equal(gz.headers['content-encoding'], 'gzip')
  assert.equal(gz.text, first.text, 'the same body, gzipped')
  // A live request held to the long-poll timeout answers up-to-date with a cursor.
  const { handle, offset } = await follow('')
  const live = await aliceFetch(`/shapes/notes?offset=${offset}&handle=${handle}&live=true`)
  assert.equal(live.status, 200)
  assert.ok(live.headers.has('electric-cursor'))
  assert.match(live.headers.get('cache-control'), /^private\b/)
  // CORS preflight.
  const pre = await rawRequest('/shapes/notes', {
    method: 'OPTIONS',
    headers: { origin: 'https://app.example', 'access-control-request-headers': 'authorization' },
  })
  assert.equal(pre.status, 204)
  assert.match(pre.headers['access-control-allow-headers'], /authorization/)
  assert.deepEqual(problems, [])
})

test('raw SSE with tampering parameters streams only alice\'s changes', async () => {
  const { handle, offset } = await follow('')
  const controller = new AbortController()
  controllers.push(controller)
  const res = await fetch(
    `${proxy.url}?offset=${offset}&handle=${handle}&live=true&live_sse=true&where=true&table=secrets&params[1]=bob`,
    { headers: { authorization: `Bearer ${ALICE_TOKEN}`, accept: 'text/event-stream' }, signal: controller.signal },
  )
  assert.equal(res.status, 200)
  assert.match(res.headers.get('content-type'), /^text\/event-stream/)
  await sql(`INSERT INTO notes VALUES (106, 'bob', '${MARKER} 106')`)
  await sql(`INSERT INTO notes VALUES (8, 'alice', 'alice note 8')`)
  let text = ''
  const decoder = new TextDecoder()
  const reader = res.body.getReader()
  const deadline = setTimeout(() => controller.abort(), EVENTUALLY_TIMEOUT_MS)
  try {
    while (!text.includes('alice note 8')) {
      const { value, done } = await reader.read()
      if (done) break
      text += decoder.decode(value, { stream: true })
    }
  } finally {
    clearTimeout(deadline)
    controller.abort()
  }
  assert.ok(text.includes('alice note 8'), `alice's insert arrived over SSE: ${text}`)
  checkAliceResponse('SSE', res.status, res.headers, text)
  assert.deepEqual(problems, [])
})

test('allowSubsets: false refuses subset requests; cache-control rewriting', async () => {
  const server = http.createServer(
    createProxy({
      upstream: syncline.baseUrl,
      secret: SECRET,
      authenticate: (req) => (req.headers.authorization === `Bearer ${ALICE_TOKEN}` ? { id: 'alice' } : null),
      shapes: { notes: (user) => ({ table: 'notes', where: 'owner_id = $1', params: [user.id] }) },
      allowSubsets: false,
      log: () => {},
    }),
  )
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  try {
    const base = `http://127.0.0.1:${server.address().port}/shapes/notes`
    const headers = { authorization: `Bearer ${ALICE_TOKEN}` }
    const { handle, offset } = await follow('')
    const plain = await fetch(`${base}?offset=-1`, { headers })
    assert.equal(plain.status, 200)
    assertOnlyAlice(await plain.json(), 'in-process proxy')
    for (const q of ['subset__where=true', 'subset__params[1]=x', 'subset__limit=1']) {
      const res = await fetch(`${base}?offset=${offset}&handle=${handle}&${q}`, { headers })
      assert.equal(res.status, 400, q)
      await res.text()
    }
    const post = await fetch(`${base}?offset=${offset}&handle=${handle}`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: '{"where":"true"}',
    })
    assert.equal(post.status, 400)
    await post.text()
  } finally {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  }
  assert.equal(
    privateCacheControl('public, max-age=604800, s-maxage=3600, stale-while-revalidate=2629746'),
    'private, max-age=604800, stale-while-revalidate=2629746',
  )
  assert.equal(privateCacheControl('public, max-age=60, must-revalidate'), 'private, max-age=60, must-revalidate')
  assert.equal(privateCacheControl('no-cache'), 'private, no-cache')
  assert.equal(privateCacheControl('no-store'), 'no-store')
  assert.equal(privateCacheControl(undefined), 'no-store')
})

test('Syncline itself refuses requests without its secret', async () => {
  for (const query of [
    'table=notes&offset=-1',
    'table=notes&offset=-1&secret=wrong',
    'table=notes&offset=-1&api_secret=wrong',
    'table=notes&offset=-1&secret=',
    `table=notes&offset=-1&secret=${SECRET.slice(0, -1)}`,
  ]) {
    const res = await fetch(`${syncline.baseUrl}/v1/shape?${query}`)
    const text = await res.text()
    assert.equal(res.status, 401, `${query} -> ${res.status}`)
    assert.deepEqual(JSON.parse(text), { message: 'Unauthorized - Invalid API secret' })
    assert.ok(!text.includes(MARKER))
  }
  // With the secret it answers (so the 401s above are about the secret).
  const ok = await fetch(`${syncline.baseUrl}/v1/shape?table=notes&offset=-1&secret=${SECRET}`)
  assert.equal(ok.status, 200)
  await ok.text()
})

test('no response of the proxy carried the secret or bob\'s rows to alice', () => {
  assert.deepEqual(problems, [])
})

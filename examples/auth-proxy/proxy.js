// An auth proxy ("gatekeeper") in front of Syncline's /v1/shape.
//
// The browser never talks to Syncline. It asks this proxy for a named shape
// (`GET /shapes/notes?offset=...`) with its own credentials; the proxy
//
//   1. authenticates the request (`authenticate(req)` -> user or null),
//   2. builds the upstream URL from scratch: the shape definition (`table`, `where`, `params`,
//      `columns`, `replica`) comes from the proxy's own shape table for that user, only the
//      protocol parameters in PASS_THROUGH are copied from the client, and Syncline's secret is
//      added last,
//   3. streams Syncline's answer back (status, body, the headers the client needs), made private
//      to the user (`cache-control: private`, `vary: authorization`).
//
// No dependencies: node:http(s) both ways, so the body bytes (gzip included) go through as they
// are, long-poll and SSE alike.

import http from 'node:http'
import https from 'node:https'
import { pipeline } from 'node:stream'

/**
 * Protocol parameters the client may set. They choose *where in the log* to read and how to
 * wait, never *which rows*: every request carries the shape definition the proxy chose, and
 * Syncline answers a `handle` that does not belong to that definition with 409 (the handle of
 * the right shape), so a stolen handle is of no use.
 */
export const PASS_THROUGH = new Set([
  'offset',
  'handle',
  'live',
  'live_sse',
  'experimental_live_sse',
  'cursor',
  'log',
  'expired_handle',
  'cache-buster',
])

/**
 * Subset snapshot parameters (`stream.requestSnapshot`, `log: 'changes_only'`). A subset can
 * only narrow: Syncline parses `subset__where` and `subset__order_by` on their own (so a
 * `true) OR (true` does not parse), writes them back out from the parse tree, and runs
 * `(<shape where>) AND (<subset where>)`; `subset__params` only fill the subset's own `$n`.
 * Turn them off with `allowSubsets: false` if your server is not known to do that.
 */
export const SUBSET_PARAMS = new Set([
  'subset__where',
  'subset__params',
  'subset__limit',
  'subset__offset',
  'subset__order_by',
])
/** `subset__params[1]=...`, the deep-object form of `subset__params`. */
const SUBSET_PARAM_ENTRY = /^subset__params\[[0-9]+\]$/
/** The members of a `POST` body (subset parameters outside the URL) that are forwarded. */
const SUBSET_BODY_FIELDS = ['where', 'params', 'limit', 'offset', 'order_by']

/** Response headers copied from Syncline (besides every `electric-*` one). */
const FORWARDED_RESPONSE_HEADERS = new Set([
  'content-type',
  'content-encoding',
  'content-length',
  'etag',
  'retry-after',
  'x-request-id',
])

/** Request headers copied to Syncline. Nothing else: no Authorization, no cookies. */
const FORWARDED_REQUEST_HEADERS = ['accept', 'accept-encoding', 'if-none-match', 'traceparent']

/** The response headers a browser script may read (CORS hides the others). */
export const EXPOSED_HEADERS = [
  'electric-cursor',
  'electric-handle',
  'electric-has-data',
  'electric-offset',
  'electric-schema',
  'electric-up-to-date',
  'electric-snapshot',
  'electric-internal-known-error',
  'retry-after',
  'etag',
].join(', ')

const SHAPE_PATH_PREFIX = '/shapes/'

/**
 * Creates the proxy's request listener (use it with `http.createServer`).
 *
 * @param {object} options
 * @param {string} options.upstream Syncline's base URL, e.g. `http://127.0.0.1:3000`.
 * @param {string} options.secret Syncline's `ELECTRIC_SECRET`.
 * @param {(req: http.IncomingMessage) => Promise<{id: string} | null> | {id: string} | null} options.authenticate
 *   The user making the request, or null to answer 401.
 * @param {Record<string, (user: {id: string}) => ShapeDefinition>} options.shapes
 *   The shapes served, by name (`/shapes/<name>`), each a function of the user.
 * @param {'*' | string[]} [options.allowedOrigins] CORS: `*` or the origins allowed.
 * @param {boolean} [options.allowSubsets] Forward subset snapshot requests (default true).
 * @param {number} [options.maxBodyBytes] Largest POST body accepted.
 * @param {(message: string) => void} [options.log] Where problems are reported.
 *
 * @typedef {object} ShapeDefinition
 * @property {string} table `name` or `schema.name` (quote parts that need it: `"My Table"`).
 * @property {string} [where] A where clause; use `$1`, `$2`, ... for values.
 * @property {string[]} [params] The values of `$1`, `$2`, ...
 * @property {string[]} [columns] The columns (must include the primary key); default all.
 * @property {'default' | 'full'} [replica]
 */
export function createProxy(options) {
  const {
    upstream,
    secret,
    authenticate,
    shapes,
    allowedOrigins = '*',
    allowSubsets = true,
    maxBodyBytes = 1 << 20,
    log = (message) => console.error(message),
  } = options
  if (typeof secret !== 'string' || secret === '') throw new Error('createProxy: the Syncline secret is required')
  if (typeof authenticate !== 'function') throw new Error('createProxy: authenticate is required')
  const shapeUrl = new URL(`${String(upstream).replace(/\/+$/, '')}/v1/shape`)
  if (shapeUrl.protocol !== 'http:' && shapeUrl.protocol !== 'https:') {
    throw new Error(`createProxy: upstream must be an http(s) URL, not ${upstream}`)
  }
  // A Map, so that names such as `__proto__` or `constructor` are just unknown shapes.
  const shapeTable = new Map(Object.entries(shapes))
  const transport = shapeUrl.protocol === 'https:' ? https : http
  const agent = new transport.Agent({ keepAlive: true })

  function corsHeaders(req) {
    if (allowedOrigins === '*') return { 'access-control-allow-origin': '*' }
    const origin = req.headers.origin
    return origin && allowedOrigins.includes(origin) ? { 'access-control-allow-origin': origin } : {}
  }

  /** `vary` for every answer: the user (and the origin, when it is echoed) changes it. */
  function vary(upstreamVary) {
    const names = new Set(
      (upstreamVary ?? '')
        .split(',')
        .map((v) => v.trim().toLowerCase())
        .filter(Boolean),
    )
    names.add('authorization')
    if (allowedOrigins !== '*') names.add('origin')
    return [...names].join(', ')
  }

  function reply(req, res, status, body, extraHeaders = {}) {
    if (res.headersSent) return res.destroy()
    const text = JSON.stringify(body)
    res.writeHead(status, {
      ...corsHeaders(req),
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(text),
      'cache-control': 'no-store',
      vary: vary(),
      ...extraHeaders,
    })
    res.end(text)
  }

  async function handle(req, res) {
    // The raw request target, split by hand: only `/shapes/<name>` exactly, no decoding, no
    // normalising (so `/shapes/%6eotes`, `/shapes/notes/`, `/shapes/x/../notes` are 404s).
    const target = req.url ?? ''
    const q = target.indexOf('?')
    const path = q === -1 ? target : target.slice(0, q)
    const query = q === -1 ? '' : target.slice(q + 1)
    const name = path.startsWith(SHAPE_PATH_PREFIX) ? path.slice(SHAPE_PATH_PREFIX.length) : null
    const shapeFor = name === null ? undefined : shapeTable.get(name)
    if (!shapeFor) return reply(req, res, 404, { message: 'Not found' })

    if (req.method === 'OPTIONS') {
      // CORS preflight: the browser asks before sending `Authorization` cross-origin.
      res.writeHead(204, {
        ...corsHeaders(req),
        'access-control-allow-methods': 'GET, POST, OPTIONS',
        'access-control-allow-headers': 'authorization, content-type, if-none-match, traceparent',
        'access-control-max-age': '86400',
        vary: vary(),
      })
      return res.end()
    }
    if (req.method !== 'GET' && req.method !== 'POST') {
      return reply(req, res, 405, { message: 'Method not allowed' }, { allow: 'GET, POST, OPTIONS' })
    }

    // 1. Who is asking.
    let user
    try {
      user = await authenticate(req)
    } catch (error) {
      log(`auth-proxy: authenticate failed: ${error?.stack ?? error}`)
      return reply(req, res, 500, { message: 'Authentication failed' })
    }
    if (!user || typeof user.id !== 'string' || user.id === '') {
      return reply(req, res, 401, { message: 'Unauthorized' }, { 'www-authenticate': 'Bearer' })
    }

    // 2. The upstream URL, built from scratch.
    const upstreamQuery = new URLSearchParams()
    const seen = new Set()
    for (const [key, value] of new URLSearchParams(query)) {
      const subset = SUBSET_PARAMS.has(key) || SUBSET_PARAM_ENTRY.test(key)
      if (!PASS_THROUGH.has(key) && !subset) continue // table, where, params, secret, ...: dropped
      if (subset && !allowSubsets) return reply(req, res, 400, { message: 'Subset snapshots are not available' })
      // The official client never repeats one; two values would leave it to the server to
      // pick one, and the proxy to guess which.
      if (seen.has(key)) return reply(req, res, 400, { message: `Parameter given more than once: ${key}` })
      seen.add(key)
      upstreamQuery.append(key, value)
    }
    let shape
    try {
      shape = shapeFor(user)
    } catch (error) {
      log(`auth-proxy: shape ${name} failed: ${error?.stack ?? error}`)
      return reply(req, res, 500, { message: 'Internal error' })
    }
    if (!shape) return reply(req, res, 403, { message: 'Forbidden' })
    upstreamQuery.append('table', shape.table)
    if (shape.where !== undefined) upstreamQuery.append('where', shape.where)
    for (const [i, value] of (shape.params ?? []).entries()) upstreamQuery.append(`params[${i + 1}]`, String(value))
    if (shape.columns) upstreamQuery.append('columns', shape.columns.map(quoteIdentifier).join(','))
    if (shape.replica) upstreamQuery.append('replica', shape.replica)
    upstreamQuery.append('secret', secret)

    let body
    if (req.method === 'POST') {
      let raw
      try {
        raw = await readBody(req, maxBodyBytes)
      } catch (error) {
        if (error instanceof BodyTooLarge) return reply(req, res, 413, { message: 'Request body too large' })
        return res.destroy()
      }
      if (raw.length > 0) {
        if (!allowSubsets) return reply(req, res, 400, { message: 'Subset snapshots are not available' })
        let parsed
        try {
          parsed = JSON.parse(raw.toString('utf8'))
        } catch {
          return reply(req, res, 400, { message: 'Request body must be JSON' })
        }
        if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
          return reply(req, res, 400, { message: 'Request body must be a JSON object' })
        }
        const picked = {}
        for (const field of SUBSET_BODY_FIELDS) if (Object.hasOwn(parsed, field)) picked[field] = parsed[field]
        body = Buffer.from(JSON.stringify(picked))
      }
    }

    const headers = {}
    for (const name of FORWARDED_REQUEST_HEADERS) {
      if (req.headers[name] !== undefined) headers[name] = req.headers[name]
    }
    if (body) {
      headers['content-type'] = 'application/json'
      headers['content-length'] = body.length
    }

    // 3. Syncline's answer, streamed back.
    const url = new URL(shapeUrl)
    url.search = upstreamQuery.toString()
    const upstreamReq = transport.request(url, { method: req.method, headers, agent })
    let clientGone = false
    res.on('close', () => {
      // The browser went away before the answer was complete: stop holding a long-poll or an
      // SSE stream upstream for nobody.
      if (!res.writableFinished) {
        clientGone = true
        upstreamReq.destroy()
      }
    })
    upstreamReq.on('error', (error) => {
      if (clientGone) return
      // Never the URL: it carries the secret.
      log(`auth-proxy: upstream request failed: ${error.code ?? error.message}`)
      if (!res.headersSent) reply(req, res, 502, { message: 'Upstream unavailable' })
      else res.destroy()
    })
    upstreamReq.on('response', (up) => {
      if (up.statusCode === 401 || up.statusCode === 403) {
        // Syncline refused the proxy's secret: a misconfiguration, not the user's fault (a 401
        // would tell the client its own credentials are wrong).
        up.resume()
        log(`auth-proxy: Syncline answered ${up.statusCode}: is the proxy's secret Syncline's ELECTRIC_SECRET?`)
        return reply(req, res, 502, { message: 'Upstream refused the proxy' })
      }
      const out = { ...corsHeaders(req) }
      for (const [name, value] of Object.entries(up.headers)) {
        if (name.startsWith('electric-') || FORWARDED_RESPONSE_HEADERS.has(name)) out[name] = value
      }
      out['cache-control'] = privateCacheControl(up.headers['cache-control'])
      out.vary = vary(up.headers.vary)
      out['access-control-expose-headers'] = EXPOSED_HEADERS
      res.writeHead(up.statusCode, out)
      res.flushHeaders()
      pipeline(up, res, (error) => {
        // A body cut short upstream must not look complete downstream: drop the connection.
        if (error) {
          upstreamReq.destroy()
          res.destroy()
        }
      })
    })
    upstreamReq.end(body)
  }

  return (req, res) => {
    handle(req, res).catch((error) => {
      log(`auth-proxy: ${error?.stack ?? error}`)
      if (!res.headersSent) reply(req, res, 500, { message: 'Internal error' })
      else res.destroy()
    })
  }
}

/**
 * Syncline's `cache-control`, for one user only: `public` and `s-maxage` go (no shared cache
 * may keep one user's rows), `private` is added; `max-age` and the rest stay, so the browser's
 * own cache still works as the client expects.
 */
export function privateCacheControl(value) {
  if (!value) return 'no-store'
  const directives = value
    .split(',')
    .map((d) => d.trim())
    .filter((d) => d && !/^(public|private|proxy-revalidate|s-maxage\s*=.*)$/i.test(d))
  if (directives.some((d) => /^no-store$/i.test(d))) return directives.join(', ')
  return ['private', ...directives].join(', ')
}

function quoteIdentifier(name) {
  return `"${name.replaceAll('"', '""')}"`
}

class BodyTooLarge extends Error {}

function readBody(req, limit) {
  return new Promise((resolve, reject) => {
    const chunks = []
    let size = 0
    req.on('data', (chunk) => {
      size += chunk.length
      if (size > limit) {
        req.removeAllListeners('data')
        req.resume()
        return reject(new BodyTooLarge())
      }
      chunks.push(chunk)
    })
    req.on('end', () => resolve(Buffer.concat(chunks)))
    req.on('error', reject)
  })
}

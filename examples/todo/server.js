// The example's write path (Electric's documented pattern): the browser POSTs a change here,
// this server writes it to Postgres, and the change reaches every client through the shape
// Syncline serves. Each answer carries the Postgres transaction id (`txid`), which TanStack DB's
// electric collection waits for in the shape log before it drops its optimistic state.
//
//   POST   /todos      {"title": "..."}                 -> 201 {"todo": {...}, "txid": 123}
//   PATCH  /todos/:id  {"done": true, "title": "..."}    -> 200 {"todo": {...}, "txid": 124}
//   DELETE /todos/:id                                    -> 200 {"todo": {...}, "txid": 125}
//   GET    /health                                       -> 200 {"status": "ok"}
//
// Settings (environment):
//   DATABASE_URL  Postgres (default: scripts/run's, postgres://postgres@127.0.0.1:54320/postgres)
//   API_PORT      port to listen on (default 3001); API_HOST the address (default 127.0.0.1)
//   CORS_ORIGIN   the Access-Control-Allow-Origin answer (default *)

import http from 'node:http'

import pg from 'pg'

const databaseUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:54320/postgres'
const port = Number(process.env.API_PORT ?? 3001)
const host = process.env.API_HOST ?? '127.0.0.1'
const corsOrigin = process.env.CORS_ORIGIN ?? '*'
const MAX_BODY_BYTES = 64 * 1024
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

const pool = new pg.Pool({ connectionString: databaseUrl, max: 5 })
pool.on('error', (error) => console.error('api: idle Postgres connection failed:', error.message))

class HttpError extends Error {
  constructor(status, message) {
    super(message)
    this.status = status
  }
}

/** Runs `text` in a transaction and returns its first row and the transaction's id. */
async function write(text, params) {
  const client = await pool.connect()
  try {
    await client.query('BEGIN')
    const { rows } = await client.query(text, params)
    // The 32-bit xid, as in the `txids` header of the shape's change messages.
    const { rows: txRows } = await client.query('SELECT pg_current_xact_id()::xid::text AS txid')
    await client.query('COMMIT')
    return { todo: rows[0], txid: Number(txRows[0].txid) }
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {})
    throw error
  } finally {
    client.release()
  }
}

async function readJson(req) {
  let size = 0
  const chunks = []
  for await (const chunk of req) {
    size += chunk.length
    if (size > MAX_BODY_BYTES) throw new HttpError(413, 'body too large')
    chunks.push(chunk)
  }
  if (size === 0) return {}
  try {
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8'))
    if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new Error()
    return body
  } catch {
    throw new HttpError(400, 'the body must be a JSON object')
  }
}

function title(value) {
  if (typeof value !== 'string' || value.trim() === '') {
    throw new HttpError(400, '`title` must be a non-empty string')
  }
  return value.trim()
}

async function route(req) {
  const { pathname } = new URL(req.url, 'http://localhost')
  if (req.method === 'GET' && pathname === '/health') return [200, { status: 'ok' }]
  if (pathname === '/todos' && req.method === 'POST') {
    const body = await readJson(req)
    if (body.id !== undefined && !UUID.test(String(body.id))) throw new HttpError(400, '`id` must be a uuid')
    const result = await write(
      'INSERT INTO todos (id, title) VALUES (COALESCE($1::uuid, gen_random_uuid()), $2) RETURNING *',
      [body.id ?? null, title(body.title)],
    )
    return [201, result]
  }
  const match = /^\/todos\/([^/]+)$/.exec(pathname)
  if (!match) throw new HttpError(404, 'not found')
  const id = decodeURIComponent(match[1])
  if (!UUID.test(id)) throw new HttpError(400, 'the id must be a uuid')
  let result
  if (req.method === 'PATCH') {
    const body = await readJson(req)
    if (body.done !== undefined && typeof body.done !== 'boolean') {
      throw new HttpError(400, '`done` must be a boolean')
    }
    result = await write(
      `UPDATE todos SET done = COALESCE($2, done), title = COALESCE($3, title) WHERE id = $1 RETURNING *`,
      [id, body.done ?? null, body.title === undefined ? null : title(body.title)],
    )
  } else if (req.method === 'DELETE') {
    result = await write('DELETE FROM todos WHERE id = $1 RETURNING *', [id])
  } else {
    throw new HttpError(405, 'method not allowed')
  }
  if (!result.todo) throw new HttpError(404, `no todo ${id}`)
  return [200, result]
}

const server = http.createServer(async (req, res) => {
  res.setHeader('access-control-allow-origin', corsOrigin)
  res.setHeader('vary', 'origin')
  if (req.method === 'OPTIONS') {
    res.writeHead(204, {
      'access-control-allow-methods': 'GET, POST, PATCH, DELETE, OPTIONS',
      'access-control-allow-headers': 'content-type',
      'access-control-max-age': '600',
    })
    res.end()
    return
  }
  let status
  let body
  try {
    ;[status, body] = await route(req)
  } catch (error) {
    status = error instanceof HttpError ? error.status : 500
    body = { error: error.message }
    if (status === 500) console.error(`api: ${req.method} ${req.url} failed:`, error)
  }
  res.writeHead(status, { 'content-type': 'application/json' })
  res.end(JSON.stringify(body))
})

server.listen(port, host, () => {
  console.log(`api: listening on http://${host}:${port} (Postgres: ${databaseUrl.replace(/:[^:@/]*@/, ':***@')})`)
})

function shutdown() {
  server.close()
  server.closeAllConnections?.()
  pool.end().finally(() => process.exit(0))
}
process.on('SIGINT', shutdown)
process.on('SIGTERM', shutdown)

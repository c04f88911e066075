// Runs the auth proxy: `ELECTRIC_SECRET=... SYNCLINE_URL=http://127.0.0.1:3000 node server.js`.
//
// Environment:
//   ELECTRIC_SECRET   Syncline's secret (required; the proxy adds it, the browser never sees it)
//   SYNCLINE_URL      Syncline's base URL (default http://127.0.0.1:3000)
//   HOST, PORT        where the proxy listens (default 127.0.0.1:3001; PORT=0 picks a free port)
//   AUTH_TOKENS       the demo token table as JSON, {"<token>": "<user id>", ...}
//                     (default: alice-token -> alice, bob-token -> bob)
//   ALLOWED_ORIGINS   comma-separated CORS origins (default *)
//   ALLOW_SUBSETS     `false` refuses subset snapshot requests (see the README's caveat)

import http from 'node:http'

import { createProxy } from './proxy.js'

const secret = process.env.ELECTRIC_SECRET
if (!secret) {
  console.error('auth-proxy: set ELECTRIC_SECRET to the secret Syncline was started with')
  process.exit(1)
}

// ---------------------------------------------------------------------------------------------
// Authentication: THE place to plug in real auth.
//
// This example maps bearer tokens to user ids with a fixed table. In an application, verify a
// session cookie against your session store, or a JWT's signature, issuer, audience and expiry
// (e.g. with `jose`), and return the user it names; return null for anything else.
// ---------------------------------------------------------------------------------------------
const tokens = new Map(
  Object.entries(
    process.env.AUTH_TOKENS ? JSON.parse(process.env.AUTH_TOKENS) : { 'alice-token': 'alice', 'bob-token': 'bob' },
  ),
)

function authenticate(req) {
  const match = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i.exec(req.headers.authorization ?? '')
  const id = match && tokens.get(match[1])
  return typeof id === 'string' ? { id } : null
}

// ---------------------------------------------------------------------------------------------
// Authorisation: which rows each user may sync. The client names a shape (`/shapes/notes`);
// the table, where clause, params and columns come from here, never from the request.
// ---------------------------------------------------------------------------------------------
const shapes = {
  notes: (user) => ({ table: 'notes', where: 'owner_id = $1', params: [user.id] }),
}

const proxy = createProxy({
  upstream: process.env.SYNCLINE_URL ?? 'http://127.0.0.1:3000',
  secret,
  authenticate,
  shapes,
  allowedOrigins: process.env.ALLOWED_ORIGINS ? process.env.ALLOWED_ORIGINS.split(',').map((o) => o.trim()) : '*',
  allowSubsets: process.env.ALLOW_SUBSETS !== 'false',
})

const server = http.createServer(proxy)
server.listen(Number(process.env.PORT ?? 3001), process.env.HOST ?? '127.0.0.1', () => {
  const { address, port } = server.address()
  console.log(`auth-proxy listening on http://${address}:${port}/shapes/notes`)
})

for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    server.close(() => process.exit(0))
    // Long-polls and SSE streams would hold close() for up to a minute.
    server.closeAllConnections()
  })
}

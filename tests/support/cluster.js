// A private Postgres cluster for the Node suites (tests/conformance, tests/browser,
// examples/auth-proxy), started by the testkit's `syncline-pg-cluster` binary, and free ports.
// Node built-ins only, so a suite imports it without another suite's node_modules.

import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { createInterface } from 'node:readline'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))

/** The testkit CLI that starts a private cluster. */
export const CLUSTER_BIN = process.env.SYNCLINE_PG_CLUSTER_BIN
  ? path.resolve(process.env.SYNCLINE_PG_CLUSTER_BIN)
  : path.resolve(here, '../../target/debug/syncline-pg-cluster')

const CLUSTER_START_TIMEOUT_MS = 60_000

/**
 * Starts `syncline-pg-cluster`; resolves to its JSON line (`{url, port, socket_dir}`) plus its
 * `child` process and `stop()`. The cluster is removed when its stdin closes, also when this
 * process dies.
 */
export async function startCluster() {
  assert.ok(existsSync(CLUSTER_BIN), `${CLUSTER_BIN} is missing: cargo build -p syncline-testkit`)
  const child = spawn(CLUSTER_BIN, [], { stdio: ['pipe', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (d) => (stderr += d))
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code)))
  const line = await Promise.race([
    createInterface({ input: child.stdout })[Symbol.asyncIterator]().next(),
    // Unreferenced: the losing side of the race must not keep the process alive.
    sleep(CLUSTER_START_TIMEOUT_MS, undefined, { ref: false }).then(() =>
      Promise.reject(new Error('cluster start timed out')),
    ),
  ])
  if (line.done) throw new Error(`syncline-pg-cluster exited (${await exited}) without a line: ${stderr}`)
  return {
    ...JSON.parse(line.value),
    child,
    async stop() {
      child.stdin.end()
      await exited
    },
  }
}

/** Ports this process has handed out: the kernel may offer a just-closed one again. */
const handedOut = new Set()

/** A TCP port on 127.0.0.1 that was free a moment ago, and not handed out before here. */
export async function freePort() {
  for (;;) {
    const server = net.createServer()
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
    const { port } = server.address()
    await new Promise((resolve) => server.close(resolve))
    if (!handedOut.has(port)) {
      handedOut.add(port)
      return port
    }
  }
}

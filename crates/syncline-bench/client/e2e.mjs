// The Node side of the `e2e` benchmark: one fresh ShapeStream + Shape of `@electric-sql/client`
// on a whole table, driven by the Rust harness.
//
//   node e2e.mjs <server url> <table> <rows>
//
// Output, one JSON object per line on stdout. Times are process.hrtime.bigint(), i.e.
// CLOCK_MONOTONIC in nanoseconds — the clock the Rust side reads too — sent as decimal strings.
//   {"event":"started","now_ns":…}                        before the stream is created
//   {"event":"synced","rows":n,"start_ns":…,"end_ns":…}   once the Shape holds <rows> rows
//   {"event":"rows","rows":n,"at_ns":…}                   answer to a `{"wait_rows":n}` line
//   {"event":"error","message":…}                         then exit 1
// Input, one JSON object per line on stdin: `{"wait_rows":n}` asks to be told when the Shape
// holds at least n rows. The process exits when stdin closes.
import { createInterface } from 'node:readline'
import { Shape, ShapeStream } from '@electric-sql/client'

const [url, table, rowsArg] = process.argv.slice(2)
const expected = Number(rowsArg)
const now = () => process.hrtime.bigint()
const report = (event) => process.stdout.write(JSON.stringify(event) + '\n')
const fail = (error) => {
  report({ event: 'error', message: String(error?.stack ?? error) })
  process.exit(1)
}

report({ event: 'started', now_ns: String(now()) })
const start = now()
const stream = new ShapeStream({
  url: `${url}/v1/shape`,
  params: { table },
  onError: fail,
})
const shape = new Shape(stream)
let synced = false
const waits = []

// Subscribed after the Shape, so by the time this runs the Shape has applied the batch.
stream.subscribe(check, fail)

function check() {
  const rows = shape.currentValue.size
  if (!synced && rows >= expected) {
    synced = true
    report({ event: 'synced', rows, start_ns: String(start), end_ns: String(now()) })
  }
  while (waits.length > 0 && rows >= waits[0]) {
    waits.shift()
    report({ event: 'rows', rows, at_ns: String(now()) })
  }
}

createInterface({ input: process.stdin })
  .on('line', (line) => {
    waits.push(JSON.parse(line).wait_rows)
    waits.sort((a, b) => a - b)
    check()
  })
  .on('close', () => process.exit(0))

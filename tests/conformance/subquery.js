// Helpers for the subquery-shape tests (subquery.test.js): a materialiser that applies a shape's
// raw messages as Electric's clients do (tags, active conditions, move-out and move-in events;
// shared/design/electric-subqueries.md §5), a TanStack DB collection on the same shape, a
// check that every client holds exactly the rows Postgres selects, and small SQL helpers.

import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'
import { inspect } from 'node:util'

import { electricCollectionOptions } from '@tanstack/electric-db-collection'
import { createCollection } from '@tanstack/db'

import { addContext, assertSameRows, describeError, recordingFetch } from './harness.js'

/** How long a client may take to show a committed change. */
export const CATCH_UP_TIMEOUT_MS = 20_000

/**
 * A shape's rows rebuilt from its raw messages the way TanStack's `electric-db-collection` and
 * Electric's Elixir `TagTracker` do:
 * - change messages by key (an update merges the changed columns; `is_move_in` rows are inserts);
 *   `tags` are added to the row's tag set, `removed_tags` dropped, `active_conditions` replace
 *   the row's;
 * - tags split on `/`, an empty slot is a position the disjunct does not use; the positions of
 *   each disjunct come from the first tagged message;
 * - `move-out`: every row with a tag whose slot `pos` equals `value` gets `ac[pos] = false` and
 *   is dropped when no disjunct has all its positions true (without active conditions: the
 *   matching tags are dropped, and the row with them when none is left);
 * - `move-in`: matching rows get `ac[pos] = true`, nothing else;
 * - `must-refetch` starts over.
 * It also keeps every message and lists what a consistent log never does (`problems`): an
 * insert of a present key, an update or delete of an absent key, tags of another width.
 */
export class Materializer {
  constructor() {
    /** key → {value, tags: Set<string>, ac: boolean[] | null} */
    this.rows = new Map()
    /** Every message, in order. */
    this.messages = []
    this.problems = []
    /** Per disjunct, the positions it uses (fixed by the first tagged message). */
    this.disjuncts = null
    this.width = null
  }

  /** The current rows (values only). */
  get currentRows() {
    return [...this.rows.values()].map((r) => r.value)
  }

  apply(message) {
    this.messages.push(message)
    const h = message.headers
    if ('key' in message) this.#change(message)
    else if (h.control === 'must-refetch') this.#reset()
    else if (h.event === 'move-out') this.#moveOut(h.patterns ?? [])
    else if (h.event === 'move-in') this.#moveIn(h.patterns ?? [])
  }

  #reset() {
    this.rows.clear()
    this.disjuncts = null
    this.width = null
  }

  #change({ key, value, headers: h }) {
    const row = this.rows.get(key)
    switch (h.operation) {
      case 'insert':
        if (row) {
          // TanStack turns it into an update; the log should not send it.
          this.problems.push(`insert${h.is_move_in ? ' (is_move_in)' : ''} of present ${key}`)
          row.value = { ...row.value, ...value }
          this.#tags(row, h)
        } else {
          const fresh = { value: { ...value }, tags: new Set(), ac: null }
          this.#tags(fresh, h)
          this.rows.set(key, fresh)
        }
        break
      case 'update':
        if (!row) {
          // TanStack skips it (replica=default updates are partial).
          this.problems.push(`update of absent ${key}`)
          break
        }
        row.value = { ...row.value, ...value }
        this.#tags(row, h)
        break
      case 'delete':
        if (!row) this.problems.push(`delete of absent ${key}`)
        this.rows.delete(key)
        break
      default:
        this.problems.push(`unknown operation ${h.operation} for ${key}`)
    }
  }

  #tags(row, h) {
    if (h.tags) {
      for (const tag of h.tags) {
        const width = tag.split('/').length
        this.width ??= width
        if (width !== this.width) this.problems.push(`tag ${inspect(tag)} has ${width} slots, not ${this.width}`)
        row.tags.add(tag)
      }
      this.disjuncts ??= h.tags.map((tag) => tag.split('/').flatMap((slot, pos) => (slot === '' ? [] : [pos])))
    }
    for (const tag of h.removed_tags ?? []) row.tags.delete(tag)
    if (h.active_conditions?.length) row.ac = [...h.active_conditions]
  }

  #matching(pattern) {
    const keys = []
    for (const [key, row] of this.rows) {
      if ([...row.tags].some((t) => t.split('/')[pattern.pos] === pattern.value)) keys.push(key)
    }
    return keys
  }

  #moveOut(patterns) {
    if (this.width === null) return
    for (const pattern of patterns) {
      for (const key of this.#matching(pattern)) {
        const row = this.rows.get(key)
        if (row.ac && this.disjuncts) {
          row.ac[pattern.pos] = false
          const visible = this.disjuncts.some((positions) => positions.every((p) => row.ac[p]))
          if (!visible) this.rows.delete(key)
        } else {
          for (const tag of [...row.tags]) {
            if (tag.split('/')[pattern.pos] === pattern.value) row.tags.delete(tag)
          }
          if (row.tags.size === 0) this.rows.delete(key)
        }
      }
    }
  }

  #moveIn(patterns) {
    if (this.width === null) return
    for (const pattern of patterns) {
      for (const key of this.#matching(pattern)) {
        const row = this.rows.get(key)
        if (row.ac) row.ac[pattern.pos] = true
      }
    }
  }
}

/** `params` of a shape ({1: '7'} or ['7']) as node-postgres parameters. */
function pgParams(params) {
  if (!params) return []
  if (Array.isArray(params)) return params
  return Object.keys(params)
    .sort((a, b) => Number(a) - Number(b))
    .map((k) => params[k])
}

/** A row without TanStack's virtual `$…` properties. */
function plain(row) {
  return Object.fromEntries(Object.entries(row).filter(([k]) => !k.startsWith('$')))
}

let nextCollectionId = 0

/**
 * Opens clients on the shape `{table, where, params}`: a raw ShapeStream applied to a
 * {@link Materializer} (`raw`), and unless `tanstack: false` a TanStack DB collection made with
 * `electricCollectionOptions` (`collection`). Both stop when the test ends.
 * Returns {raw, stream, collection, clients, query, check, settle, since}.
 */
export function openShape(stack, t, { table, where, params }, { tanstack = true } = {}) {
  const shapeParams = { table, where, ...(params ? { params } : {}) }
  const controllers = []

  const rawController = new AbortController()
  controllers.push(rawController)
  const stream = stack.stream({ params: shapeParams, signal: rawController.signal })
  const raw = new Materializer()
  stream.subscribe((batch) => {
    for (const m of batch) raw.apply(m)
  })
  const clients = [
    {
      name: 'ShapeStream materialiser',
      rows: () => raw.currentRows,
      ready: () => stream.isUpToDate,
      failure: () => stream.error,
      problems: () => raw.problems,
    },
  ]

  let collection
  if (tanstack) {
    const controller = new AbortController()
    controllers.push(controller)
    let failure
    collection = createCollection({
      ...electricCollectionOptions({
        id: `subquery-${nextCollectionId++}`,
        getKey: (row) => row.id,
        shapeOptions: {
          url: stack.shapeUrl,
          params: shapeParams,
          signal: controller.signal,
          fetchClient: recordingFetch(stack.exchanges),
          backoffOptions: { initialDelay: 50, maxDelay: 500, multiplier: 2, maxRetries: Infinity },
          onError: (error) => {
            failure = error
            stack.clientErrors.push(error)
          },
        },
      }),
      startSync: true,
      gcTime: 0,
    })
    clients.push({
      name: 'TanStack collection',
      rows: () => collection.toArray.map(plain),
      ready: () => collection.isReady(),
      failure: () => failure ?? (collection.status === 'error' ? new Error('collection status error') : undefined),
      problems: () => [],
    })
  }

  // t.after runs when the test ends, pass or fail, before the next test starts.
  t.after(async () => {
    for (const c of controllers) c.abort()
    await collection?.cleanup().catch(() => {})
  })

  const query = `SELECT * FROM ${table} WHERE ${where}`
  const shape = {
    raw,
    stream,
    collection,
    clients,
    query,
    /** Waits until every client holds exactly the rows Postgres selects now. */
    async check(label = 'rows', timeoutMs = CATCH_UP_TIMEOUT_MS) {
      const expected = await stack.rows(query, pgParams(params))
      await untilSame(clients, expected, `${label} (where ${where})`, timeoutMs)
      return expected
    },
    /**
     * {@link check}, then a short wait and the same comparison again: a change that arrives
     * late (a stray delete, a second copy of a move-in row) fails here.
     */
    async settle(label = 'rows after settling') {
      const expected = await shape.check(label)
      await sleep(300)
      for (const c of clients) assertSameRows(c.rows(), expected, `${label}: ${c.name} (where ${where})`)
      assertNoProblems(clients, label)
    },
    /** The raw messages after the first `mark`, up-to-date messages left out. */
    since(mark) {
      return raw.messages.slice(mark).filter((m) => m.headers.control !== 'up-to-date')
    },
  }
  return shape
}

/**
 * Waits until every client is up to date and its rows equal `expected` (by id, every column);
 * fails at once when a client stopped with an error, and after `timeoutMs` with the last
 * difference. Then checks that no client saw an inconsistent log.
 */
export async function untilSame(clients, expected, label, timeoutMs = CATCH_UP_TIMEOUT_MS) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    let difference
    for (const c of clients) {
      const failure = c.failure()
      if (failure) throw new Error(`${label}: the ${c.name} stopped: ${describeError(failure)}`)
      try {
        assert.ok(c.ready(), `${label}: the ${c.name} is not up to date`)
        assertSameRows(c.rows(), expected, `${label}: ${c.name}`)
      } catch (error) {
        difference = error
        break
      }
    }
    if (!difference) break
    if (Date.now() > deadline) throw addContext(difference, `\n  (still different after ${timeoutMs} ms)`)
    await sleep(5)
  }
  assertNoProblems(clients, label)
}

function assertNoProblems(clients, label) {
  for (const c of clients) {
    const problems = c.problems()
    if (problems.length) {
      assert.fail(`${label}: the ${c.name} saw an inconsistent log:\n  ${problems.slice(0, 20).join('\n  ')}`)
    }
  }
}

/**
 * Runs `statements` in one transaction; resolves to its 32-bit xid (what `txids` carry).
 */
export async function transaction(stack, ...statements) {
  const client = await stack.pool.connect()
  try {
    await client.query('BEGIN')
    for (const s of statements) await client.query(s)
    const { rows } = await client.query('SELECT pg_current_xact_id()::xid::text AS xid')
    await client.query('COMMIT')
    return Number(rows[0].xid)
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {})
    throw error
  } finally {
    client.release()
  }
}

/** `CREATE TABLE`s of the org/parent/child schema, names prefixed `${p}_`. */
export function schemaSql(p) {
  return `
    CREATE TABLE ${p}_org (id int PRIMARY KEY, premium bool);
    CREATE TABLE ${p}_parent (id int PRIMARY KEY, active bool, org_id int, value int);
    CREATE TABLE ${p}_child (id int PRIMARY KEY, parent_id int, urgent bool, title text);`
}

/** A 32-bit seeded generator (mulberry32) with a few helpers. */
export function random(seed) {
  let a = seed >>> 0
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const rng = {
    next,
    /** An integer in [lo, hi]. */
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),
    bool: (p = 0.5) => next() < p,
    pick: (items) => items[Math.floor(next() * items.length)],
    /** A key of `weights` ({name: weight}), chosen by weight. */
    weighted(weights) {
      const total = Object.values(weights).reduce((a, b) => a + b, 0)
      let r = next() * total
      for (const [k, w] of Object.entries(weights)) {
        if ((r -= w) < 0) return k
      }
      return Object.keys(weights).at(-1)
    },
  }
  return rng
}

/** The messages' kinds, for comparing sequences: `move-in`, `insert 12 (move-in)`, `snapshot-end`… */
export function kinds(messages) {
  return messages.map((m) => {
    if ('key' in m) return `${m.headers.operation} ${m.value.id}${m.headers.is_move_in ? ' (move-in)' : ''}`
    return m.headers.event ?? m.headers.control
  })
}

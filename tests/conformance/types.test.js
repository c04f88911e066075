// Every supported column type, round-tripped. Postgres is the oracle: a column's text output
// under Electric's session settings is the text the wire must carry (bool excepted: true/false
// in snapshots, t/f in the log), and parsing that text with the client's rules (int8 → BigInt,
// int2/int4/float → number, bool → boolean, json → parsed, arrays parsed when dims > 0,
// everything else a string) is what the client must hold.

import assert from 'node:assert/strict'

import pg from 'pg'

import { assertSameRows, eventually, rawFollow, rowsOf, startStack, test } from './harness.js'

/** [column, SQL type, the type the electric-schema header must name, array dims]. */
const COLUMNS = [
  ['b', 'bool', 'bool', 0],
  ['i2', 'int2', 'int2', 0],
  ['i4', 'int4', 'int4', 0],
  ['i8', 'int8', 'int8', 0],
  ['f4', 'float4', 'float4', 0],
  ['f8', 'float8', 'float8', 0],
  ['num', 'numeric', 'numeric', 0],
  ['num_s', 'numeric(40,30)', 'numeric', 0],
  ['t', 'text', 'text', 0],
  ['vc', 'varchar(20)', 'varchar', 0],
  ['bp', 'char(5)', 'bpchar', 0],
  ['nm', 'name', 'name', 0],
  ['u', 'uuid', 'uuid', 0],
  ['by', 'bytea', 'bytea', 0],
  ['d', 'date', 'date', 0],
  ['tm', 'time', 'time', 0],
  ['ttz', 'timetz', 'timetz', 0],
  ['ts', 'timestamp', 'timestamp', 0],
  ['tstz', 'timestamptz', 'timestamptz', 0],
  ['iv', 'interval', 'interval', 0],
  ['j', 'json', 'json', 0],
  ['jb', 'jsonb', 'jsonb', 0],
  ['e', 'mood', 'mood', 0],
  ['dom', 'posint', 'posint', 0],
  ['i4a', 'int4[]', 'int4', 1],
  ['i8a', 'int8[]', 'int8', 1],
  ['ta', 'text[]', 'text', 1],
  ['ba', 'bool[]', 'bool', 1],
  ['f8a', 'float8[]', 'float8', 1],
  ['na', 'numeric[]', 'numeric', 1],
  ['jba', 'jsonb[]', 'jsonb', 1],
  ['ea', 'mood[]', 'mood', 1],
  ['m2', 'int4[][]', 'int4', 2],
  ['t2', 'text[][]', 'text', 2],
]

/** Input texts per row (missing columns are NULL); ids 1.. in the snapshot, 101.. live. */
const ROWS = [
  {
    b: 'true', i2: '-32768', i4: '2147483647', i8: '9223372036854775807', f4: '3.14',
    f8: '2.718281828459045', num: '123.456', num_s: '0.000000000000000000000000000001',
    t: String.raw`hello, world "quoted" \ back`, vc: 'varchar', bp: 'ab', nm: 'a name',
    u: 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', by: String.raw`\xdeadbeef`, d: '2024-02-29',
    tm: '13:45:56.789', ttz: '13:45:56+05:30', ts: '2024-10-09 12:34:56.123456',
    tstz: '2024-10-09 12:34:56.5+02', iv: '1 year 2 mons 3 days 04:05:06.7',
    j: '{"b": 1, "a": [1, 2.50, "x"]}', jb: '{"b": 1, "a": [1, 2.50, "x"]}', e: 'happy',
    dom: '42', i4a: '{1,2,3}', i8a: '{9223372036854775807,-1}',
    ta: String.raw`{"a,b","c\"d","e\\f",NULL,"NULL",""," sp ","{}"}`, ba: '{t,f,NULL}',
    f8a: '{1.5,NaN,Infinity,-Infinity,-0}', na: '{1.50,NaN,NULL,-0.001}',
    jba: String.raw`{"{\"a\": \"x,y\"}","[1, \"}\"]",null,NULL}`,
    ea: String.raw`{happy,"meh, \"quoted\""}`, m2: '{{1,2},{3,NULL}}',
    t2: String.raw`{{"a","b"},{"c,d","e\"f"}}`,
  },
  {
    b: 'false', i2: '0', i4: '-2147483648', i8: '-9223372036854775808', f4: 'NaN', f8: '-0',
    num: 'NaN', num_s: '-1234567890.123456789012345678901234567890', t: '', vc: ' ', bp: 'x',
    nm: '', u: '00000000-0000-0000-0000-000000000000', by: String.raw`\x`, d: '4713-01-01 BC',
    tm: '00:00:00', ttz: '00:00:00-12', ts: '0044-03-15 12:00:00 BC', tstz: 'infinity',
    iv: '-1 days -00:00:01', j: '[]', jb: '{"nested": {"a": null, "b": [true, false]}, "u": "é ü 😀"}',
    e: 'sad', dom: '1', i4a: '{}', i8a: '{}', ta: '{}', ba: '{}', f8a: '{}', na: '{}',
    jba: '{}', ea: '{}', m2: '{}', t2: String.raw`{{NULL,""},{"}","{"}}`,
  },
  {
    b: 'true', i2: '32767', i4: '0', i8: '0', f4: 'Infinity', f8: '-Infinity',
    num: '123456789012345678901234567890.123456789012345678901234567890', num_s: '0',
    t: 'line1\nline2\ttab ü 😀', vc: 'ü', bp: 'abcde', nm: 'ü', u: 'FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF',
    by: String.raw`\x00ff`, d: 'infinity', tm: '23:59:59.999999', ttz: '24:00:00+14',
    ts: 'infinity', tstz: '0001-01-01 00:00:00+00 BC', iv: '0', j: '  {"a" : 1,  "a": 2}  ',
    jb: '"just a string"', e: 'meh, "quoted"', dom: '2147483647', i4a: '{NULL}',
    f8a: '{1e+20,1e-07,0.1}', m2: '{{NULL}}',
  },
  {},
]

const stack = await startStack(`
  CREATE TYPE mood AS ENUM ('sad', 'happy', 'meh, "quoted"');
  CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
  CREATE TABLE typed (id int PRIMARY KEY, ${COLUMNS.map(([c, type]) => `${c} ${type}`).join(', ')});
`)

/** Inserts ROWS with ids `first`, `first + 1`, … */
async function insertRows(first) {
  for (const [i, row] of ROWS.entries()) {
    const values = COLUMNS.map(([c]) => row[c] ?? null)
    const placeholders = COLUMNS.map(([, type], k) => `$${k + 2}::${type}`).join(', ')
    await stack.sql(`INSERT INTO typed VALUES ($1, ${placeholders})`, [first + i, ...values])
  }
}

/** The rows as Postgres prints them under Electric's settings: {id, column: text | null}. */
async function texts() {
  const client = new pg.Client({
    connectionString: stack.cluster.url,
    types: { getTypeParser: () => (text) => text },
  })
  await client.connect()
  try {
    await client.query(`SET DateStyle = 'ISO, DMY'; SET TimeZone = 'UTC'; SET extra_float_digits = 1;
      SET IntervalStyle = 'iso_8601'; SET bytea_output = 'hex'`)
    const { rows } = await client.query(`SELECT * FROM typed ORDER BY id`)
    return rows.map((row) => ({ ...row, id: Number(row.id) }))
  } finally {
    await client.end()
  }
}

/** A value as the client must parse it from its Postgres text. */
function clientValue(text, type, dims) {
  if (text === null) return null
  return dims > 0 ? parseArray(text, (t) => parseScalar(t, type)) : parseScalar(text, type)
}

function parseScalar(text, type) {
  switch (type) {
    case 'int2':
    case 'int4':
    case 'float4':
    case 'float8':
      return Number(text)
    case 'int8':
      return BigInt(text)
    case 'bool':
      return text === 'true' || text === 't'
    case 'json':
    case 'jsonb':
      return JSON.parse(text)
    default:
      return text
  }
}

/** A Postgres array literal (`{…}`, nested, quoted, NULL) as nested arrays. */
function parseArray(text, parseElement) {
  let i = 0
  const parse = () => {
    assert.equal(text[i++], '{', `array literal ${text}`)
    const out = []
    if (text[i] === '}') {
      i++
      return out
    }
    for (;;) {
      if (text[i] === '{') {
        out.push(parse())
      } else if (text[i] === '"') {
        let s = ''
        for (i++; text[i] !== '"'; i++) s += text[i] === '\\' ? text[++i] : text[i]
        i++
        out.push(parseElement(s))
      } else {
        const start = i
        while (text[i] !== ',' && text[i] !== '}') i++
        const raw = text.slice(start, i)
        out.push(raw === 'NULL' ? null : parseElement(raw))
      }
      if (text[i++] === '}') return out
    }
  }
  return parse()
}

/** The client rows the Postgres texts imply. */
function expectedRows(textRows) {
  return textRows.map((row) => {
    const out = { id: row.id }
    for (const [c, , type, dims] of COLUMNS) out[c] = clientValue(row[c], type, dims)
    return out
  })
}

/** The wire text of a value: Postgres's text output, except bool in snapshots (true/false). */
function wireText(text, type, dims, inLog) {
  if (!inLog && type === 'bool' && dims === 0 && text !== null) return text === 't' ? 'true' : 'false'
  return text
}

function assertWire(messages, textRows, inLog) {
  const values = new Map(messages.filter((m) => m.key).map((m) => [Number(m.value.id), m.value]))
  for (const row of textRows) {
    const value = values.get(row.id)
    assert.ok(value, `row ${row.id} is missing from the wire`)
    for (const [c, , type, dims] of COLUMNS) {
      assert.strictEqual(value[c], wireText(row[c], type, dims, inLog), `wire text of ${c} in row ${row.id}`)
    }
  }
}

test('every column type: the schema header names the types the client parses with', async () => {
  await stack.sql('TRUNCATE typed')
  const res = await fetch(`${stack.shapeUrl}?table=typed&offset=-1`)
  assert.equal(res.status, 200)
  const schema = JSON.parse(res.headers.get('electric-schema'))
  const typeOf = ([c, , type, dims]) => [c, { type, dims }]
  const sent = COLUMNS.map(([c]) => [c, { type: schema[c]?.type, dims: schema[c]?.dims ?? 0 }])
  assert.deepEqual(Object.fromEntries(sent), Object.fromEntries(COLUMNS.map(typeOf)))
  assert.deepEqual(schema.id, { type: 'int4', pk_index: 0, not_null: true })
})

test('every column type round-trips, in the snapshot and live', async () => {
  await stack.sql('TRUNCATE typed')
  await insertRows(1)
  const shape = stack.shape({ params: { table: 'typed' } })
  const snapshotTexts = await texts()
  assertSameRows(await rowsOf(shape), expectedRows(snapshotTexts))
  const raw = await rawFollow(stack.shapeUrl, 'table=typed')
  assertWire(raw.messages, snapshotTexts, false)

  await insertRows(101)
  const allTexts = await texts()
  const liveTexts = allTexts.filter((r) => r.id > 100)
  await eventually(() => assertSameRows(shape.currentRows, expectedRows(allTexts)))
  const live = await rawFollow(stack.shapeUrl, 'table=typed', {
    handle: raw.handle,
    offset: raw.offset,
    live: true,
    until: (ms) => ms.filter((m) => m.key).length === ROWS.length,
  })
  assertWire(live.messages, liveTexts, true)

  // A live update that changes every column of row 1 to row 2's values, and row 2 to NULLs.
  const assignments = COLUMNS.map(([c]) => `${c} = src.${c}`).join(', ')
  await stack.sql(`UPDATE typed SET ${assignments} FROM typed src WHERE typed.id = 1 AND src.id = 2`)
  await stack.sql(`UPDATE typed SET ${assignments} FROM typed src WHERE typed.id = 2 AND src.id = 4`)
  const updated = await texts()
  await eventually(() => assertSameRows(shape.currentRows, expectedRows(updated)))
})

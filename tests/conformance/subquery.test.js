// Subquery shapes (`where=parent_id IN (SELECT id FROM parent WHERE active)`), as specified in
// shared/design/electric-subqueries.md: the raw messages (tags, active_conditions, move-in and
// move-out events, is_move_in rows, snapshot-end), the rows of a client that applies them like
// Electric's clients do (subquery.js's Materializer over a ShapeStream) and of a TanStack DB
// collection (@tanstack/electric-db-collection), each compared with SELECT after every step;
// the 400s for unsupported sublinks; and a seeded random differential run.
//
// Each test has its own tables, `<prefix>_org`, `<prefix>_parent`, `<prefix>_child` (see
// schemaSql), so tests never see each other's changes.

import assert from 'node:assert/strict'
import { randomInt } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'

import { addContext, eventually, startStack, test } from './harness.js'
import { kinds, openShape, random, schemaSql, transaction } from './subquery.js'

const PREFIXES = [
  'snap',
  'moves',
  'both',
  'together',
  'del',
  'switch',
  'notin',
  'or2',
  'orurg',
  'nest',
  'par',
  'rowf',
  'rej',
  'rnd',
]

const stack = await startStack(`
  ${PREFIXES.map(schemaSql).join('\n')}
  CREATE TABLE rowf_item (id int PRIMARY KEY, org_id int, parent_id int, title text);
`)

/** The only `tags` entry of the change message for row `id` among `messages`. */
function tagOf(messages, id) {
  const m = messages.findLast((m) => 'key' in m && m.value.id === id && m.headers.tags)
  assert.ok(m, `no tagged message for row ${id}`)
  assert.equal(m.headers.tags.length, 1, `row ${id}: one disjunct, one tag: ${JSON.stringify(m.headers.tags)}`)
  return m.headers.tags[0]
}

/** The last change message for row `id` among `messages`. */
function messageFor(messages, id) {
  const m = messages.findLast((m) => 'key' in m && m.value.id === id)
  assert.ok(m, `no change message for row ${id}`)
  return m
}

/**
 * Waits until the raw messages after `mark` (up-to-date left out) are `expected`, compared as
 * kinds() strings; rows of a move-in may come in any order, so inserts marked `(move-in)` are
 * compared sorted.
 */
async function untilMessages(shape, mark, expected, label) {
  const norm = (ks) => {
    const moveIns = ks.filter((k) => k.endsWith('(move-in)')).sort()
    let i = 0
    return ks.map((k) => (k.endsWith('(move-in)') ? moveIns[i++] : k))
  }
  await eventually(() => assert.deepEqual(norm(kinds(shape.since(mark))), norm(expected), label), 10_000)
  return shape.since(mark)
}

/** Asserts that nothing but up-to-date arrives after `mark` for a while. */
async function assertQuiet(shape, mark, label) {
  await sleep(500)
  assert.deepEqual(kinds(shape.since(mark)), [], `${label}: no message expected`)
}

test('initial snapshot of a subquery shape, then live changes', async (t) => {
  await stack.sql(`
    INSERT INTO snap_parent VALUES (1, true, 1, 1), (2, false, 1, 2), (3, true, 2, 3);
    INSERT INTO snap_child VALUES (10, 1, false, 'a'), (11, 1, true, 'b'), (12, 2, false, 'c'),
      (13, 3, false, 'd'), (14, NULL, false, 'no parent'), (15, 99, false, 'unknown parent')`)
  const shape = openShape(stack, t, {
    table: 'snap_child',
    where: 'parent_id IN (SELECT id FROM snap_parent WHERE active)',
  })
  await shape.check('initial snapshot')

  // One bare subquery: one disjunct with one position, so one tag without `/`.
  const snapshot = shape.raw.messages.filter((m) => 'key' in m)
  assert.deepEqual(snapshot.map((m) => m.value.id).sort(), [10, 11, 13])
  for (const m of snapshot) {
    assert.equal(m.headers.operation, 'insert')
    assert.equal(typeof m.headers.tags?.[0], 'string', `row ${m.value.id} has a tag`)
    assert.ok(m.headers.tags[0] !== '' && !m.headers.tags[0].includes('/'), `one slot: ${m.headers.tags[0]}`)
    assert.deepEqual(m.headers.active_conditions, [true], `row ${m.value.id}: active_conditions`)
  }
  assert.equal(tagOf(snapshot, 10), tagOf(snapshot, 11), 'children of one parent share its tag')
  assert.notEqual(tagOf(snapshot, 10), tagOf(snapshot, 13), 'children of different parents do not')

  let mark = shape.raw.messages.length
  await stack.sql(`INSERT INTO snap_child VALUES (16, 1, false, 'live'), (17, 2, false, 'inactive parent'),
    (18, NULL, true, 'no parent'), (19, 3, true, 'live too')`)
  await shape.check('after live inserts')
  const live = await untilMessages(shape, mark, ['insert 16', 'insert 19'], 'live inserts')
  assert.equal(tagOf(live, 16), tagOf(snapshot, 10), 'a log row hashes its value like the snapshot did')
  assert.equal(tagOf(live, 19), tagOf(snapshot, 13))
  assert.deepEqual(messageFor(live, 16).headers.active_conditions, [true])

  mark = shape.raw.messages.length
  await stack.sql(`BEGIN; UPDATE snap_child SET title = 'changed' WHERE id = 13;
    DELETE FROM snap_child WHERE id = 11; UPDATE snap_child SET title = 'still out' WHERE id = 12; COMMIT`)
  await shape.check('after an update and a delete')
  const changes = await untilMessages(shape, mark, ['update 13', 'delete 11'], 'update and delete')
  assert.equal(tagOf(changes, 13), tagOf(snapshot, 13), 'an update keeps its tag')
  await shape.settle()
})

test('a parent becomes active: move-in with its children; inactive again: move-out, no deletes', async (t) => {
  await stack.sql(`
    INSERT INTO moves_parent VALUES (1, true, 1, 1), (2, false, 1, 2);
    INSERT INTO moves_child VALUES (10, 1, false, 'a'), (20, 2, false, 'b'), (21, 2, true, 'c'),
      (22, 2, false, 'd'), (30, 3, false, 'no such parent')`)
  const shape = openShape(stack, t, {
    table: 'moves_child',
    where: 'parent_id IN (SELECT id FROM moves_parent WHERE active)',
  })
  await shape.check('initial snapshot')
  const parent1Tag = tagOf(shape.raw.messages, 10)

  let mark = shape.raw.messages.length
  const activated = await transaction(stack, `UPDATE moves_parent SET active = true WHERE id = 2`)
  await shape.check('after parent 2 became active')
  const moveIn = await untilMessages(
    shape,
    mark,
    ['move-in', 'insert 20 (move-in)', 'insert 21 (move-in)', 'insert 22 (move-in)', 'snapshot-end'],
    'a move-in event, the rows with is_move_in, then snapshot-end',
  )
  const event = moveIn[0].headers
  assert.deepEqual(event.txids, [activated], 'move-in txids: the transaction that activated parent 2')
  assert.equal(event.patterns?.length, 1, `one pattern: ${JSON.stringify(event.patterns)}`)
  const [{ pos, value: parent2Tag }] = event.patterns
  assert.equal(pos, 0)
  assert.equal(typeof parent2Tag, 'string')
  assert.notEqual(parent2Tag, parent1Tag)
  for (const row of moveIn.slice(1, -1)) {
    assert.equal(row.headers.operation, 'insert')
    assert.equal(row.headers.is_move_in, true, `row ${row.value.id}: headers.is_move_in`)
    assert.deepEqual(row.headers.tags, [parent2Tag], `row ${row.value.id}: the pattern's tag`)
    assert.deepEqual(row.headers.active_conditions, [true])
  }

  mark = shape.raw.messages.length
  const deactivated = await transaction(stack, `UPDATE moves_parent SET active = false WHERE id = 2`)
  await shape.check('after parent 2 became inactive')
  const [moveOut] = await untilMessages(shape, mark, ['move-out'], 'a move-out event and no delete messages')
  assert.deepEqual(moveOut.headers.patterns, [{ pos: 0, value: parent2Tag }])
  assert.deepEqual(moveOut.headers.txids, [deactivated])

  // Out, in, out again; a child deleted while out is not brought back.
  await stack.sql(`DELETE FROM moves_child WHERE id = 21`)
  await shape.check('after deleting an absent child')
  mark = shape.raw.messages.length
  await transaction(stack, `UPDATE moves_parent SET active = true WHERE id = 2`)
  await shape.check('after parent 2 became active again')
  await untilMessages(
    shape,
    mark,
    ['move-in', 'insert 20 (move-in)', 'insert 22 (move-in)', 'snapshot-end'],
    'second move-in',
  )
  mark = shape.raw.messages.length
  await transaction(stack, `UPDATE moves_parent SET active = false WHERE id = 1`)
  await shape.check('after parent 1 became inactive')
  const [again] = await untilMessages(shape, mark, ['move-out'], 'move-out of parent 1')
  assert.deepEqual(again.headers.patterns, [{ pos: 0, value: parent1Tag }])
  await shape.settle()
})

test('a move and changes of the moved rows in one transaction', async (t) => {
  await stack.sql(`
    INSERT INTO both_parent VALUES (1, true, 1, 1), (2, false, 1, 2);
    INSERT INTO both_child VALUES (10, 1, false, 'a'), (20, 2, false, 'b')`)
  const shape = openShape(stack, t, {
    table: 'both_child',
    where: 'parent_id IN (SELECT id FROM both_parent WHERE active)',
  })
  await shape.check('initial snapshot')
  await stack.sql(`BEGIN;
    UPDATE both_parent SET active = true WHERE id = 2;
    INSERT INTO both_child VALUES (21, 2, false, 'new child of the activated parent');
    UPDATE both_child SET title = 'b2' WHERE id = 20;
    COMMIT`)
  await shape.check('parent activated, a child of it inserted and another updated')
  await stack.sql(`BEGIN;
    UPDATE both_parent SET active = false WHERE id = 1;
    UPDATE both_child SET title = 'a2' WHERE id = 10;
    INSERT INTO both_child VALUES (11, 1, true, 'new child of the deactivated parent');
    COMMIT`)
  await shape.check('parent deactivated, its child updated, a child of it inserted')
  await stack.sql(`BEGIN;
    UPDATE both_child SET title = 'a3' WHERE id = 10;
    UPDATE both_parent SET active = true WHERE id = 1;
    UPDATE both_child SET parent_id = 1 WHERE id = 20;
    COMMIT`)
  await shape.check('child updated before its parent is activated; another child moved to it')
  await stack.sql(`BEGIN;
    UPDATE both_parent SET active = false WHERE id = 2;
    UPDATE both_child SET parent_id = 1 WHERE id = 21;
    DELETE FROM both_child WHERE id = 11;
    COMMIT`)
  await shape.check('parent deactivated while its child moves to an active parent')
  await stack.sql(`BEGIN;
    UPDATE both_parent SET active = false WHERE id = 1;
    UPDATE both_parent SET active = true WHERE id = 1;
    UPDATE both_parent SET active = true WHERE id = 2;
    UPDATE both_parent SET active = false WHERE id = 2;
    COMMIT`)
  await shape.check('flips that cancel within one transaction')
  await shape.settle()
})

test('a parent and its children inserted in one transaction', async (t) => {
  await stack.sql(`
    INSERT INTO together_parent VALUES (1, true, 1, 1);
    INSERT INTO together_child VALUES (10, 1, false, 'a')`)
  const shape = openShape(stack, t, {
    table: 'together_child',
    where: 'parent_id IN (SELECT id FROM together_parent WHERE active)',
  })
  await shape.check('initial snapshot')
  await stack.sql(`BEGIN;
    INSERT INTO together_parent VALUES (2, true, 1, 2);
    INSERT INTO together_child VALUES (20, 2, false, 'b'), (21, 2, true, 'c');
    COMMIT`)
  await shape.check('active parent and children inserted together')
  await stack.sql(`BEGIN;
    INSERT INTO together_child VALUES (30, 3, false, 'child first');
    INSERT INTO together_parent VALUES (3, true, 1, 3);
    COMMIT`)
  await shape.check('child inserted before its active parent')
  await stack.sql(`BEGIN;
    INSERT INTO together_parent VALUES (4, false, 1, 4);
    INSERT INTO together_child VALUES (40, 4, false, 'inactive parent');
    COMMIT`)
  await shape.check('inactive parent and child inserted together')
  await stack.sql(`BEGIN;
    INSERT INTO together_parent VALUES (5, true, 1, 5);
    INSERT INTO together_child VALUES (50, 5, false, 'short-lived parent');
    DELETE FROM together_parent WHERE id = 5;
    COMMIT`)
  await shape.check('parent inserted and deleted in the transaction that inserted its child')
  await shape.settle()
})

test('deleting a parent is a move-out', async (t) => {
  await stack.sql(`
    INSERT INTO del_parent VALUES (1, true, 1, 1), (2, true, 1, 2);
    INSERT INTO del_child VALUES (10, 1, false, 'a'), (11, 1, false, 'b'), (20, 2, false, 'c')`)
  const shape = openShape(stack, t, {
    table: 'del_child',
    where: 'parent_id IN (SELECT id FROM del_parent WHERE active)',
  })
  await shape.check('initial snapshot')
  const parent1Tag = tagOf(shape.raw.messages, 10)
  let mark = shape.raw.messages.length
  const deleted = await transaction(stack, `DELETE FROM del_parent WHERE id = 1`)
  await shape.check('after deleting parent 1')
  const [moveOut] = await untilMessages(shape, mark, ['move-out'], 'a move-out and no delete messages')
  assert.deepEqual(moveOut.headers.patterns, [{ pos: 0, value: parent1Tag }])
  assert.deepEqual(moveOut.headers.txids, [deleted])

  mark = shape.raw.messages.length
  await stack.sql(`INSERT INTO del_parent VALUES (1, true, 1, 1)`)
  await shape.check('after inserting parent 1 again')
  const moveIn = await untilMessages(
    shape,
    mark,
    ['move-in', 'insert 10 (move-in)', 'insert 11 (move-in)', 'snapshot-end'],
    'the children move in again',
  )
  assert.deepEqual(moveIn[0].headers.patterns, [{ pos: 0, value: parent1Tag }], 'the same value, the same tag')

  await stack.sql(`BEGIN; DELETE FROM del_child WHERE id = 20; DELETE FROM del_parent WHERE id = 2; COMMIT`)
  await shape.check('child and parent deleted together')
  await stack.sql(`BEGIN; DELETE FROM del_parent WHERE id = 1; DELETE FROM del_child WHERE id = 10; COMMIT`)
  await shape.check('parent and child deleted together')
  await shape.settle()
})

test('a child switching parent: tags follow, the old parent no longer removes it', async (t) => {
  await stack.sql(`
    INSERT INTO switch_parent VALUES (1, true, 1, 1), (2, true, 1, 2), (3, false, 1, 3);
    INSERT INTO switch_child VALUES (10, 1, false, 'a'), (20, 2, false, 'b')`)
  const shape = openShape(stack, t, {
    table: 'switch_child',
    where: 'parent_id IN (SELECT id FROM switch_parent WHERE active)',
  })
  await shape.check('initial snapshot')
  const tag1 = tagOf(shape.raw.messages, 10)
  const tag2 = tagOf(shape.raw.messages, 20)

  let mark = shape.raw.messages.length
  await stack.sql(`UPDATE switch_child SET parent_id = 2 WHERE id = 10`)
  await shape.check('after child 10 moved to parent 2')
  const [update] = await untilMessages(shape, mark, ['update 10'], 'an update')
  assert.deepEqual(update.headers.tags, [tag2], 'the new parent’s tag')
  assert.deepEqual(update.headers.removed_tags, [tag1], 'the old parent’s tag is removed')

  mark = shape.raw.messages.length
  await stack.sql(`UPDATE switch_parent SET active = false WHERE id = 1`)
  await untilMessages(shape, mark, ['move-out'], 'a move-out for parent 1')
  await shape.check('child 10 stays after its old parent became inactive')

  mark = shape.raw.messages.length
  await stack.sql(`UPDATE switch_child SET parent_id = 3 WHERE id = 10`)
  await shape.check('after child 10 moved to inactive parent 3')
  await untilMessages(shape, mark, ['delete 10'], 'leaving the shape is a delete')

  mark = shape.raw.messages.length
  await stack.sql(`UPDATE switch_child SET parent_id = 2 WHERE id = 10`)
  await shape.check('after child 10 moved back to parent 2')
  const [insert] = await untilMessages(shape, mark, ['insert 10'], 'entering the shape is an insert')
  assert.deepEqual(insert.headers.tags, [tag2])

  await stack.sql(`UPDATE switch_child SET parent_id = NULL WHERE id = 10`)
  await shape.check('after child 10 lost its parent')
  await stack.sql(`UPDATE switch_child SET parent_id = 2, id = 11 WHERE id = 20`)
  await shape.check('after a primary-key change')
  mark = shape.raw.messages.length
  await stack.sql(`UPDATE switch_parent SET active = false WHERE id = 2`)
  await shape.check('after parent 2 became inactive')
  await untilMessages(shape, mark, ['move-out'], 'a move-out for parent 2')
  await shape.settle()
})

test('NOT IN: a parent becoming active moves its children out, inactive moves them in', async (t) => {
  await stack.sql(`
    INSERT INTO notin_parent VALUES (1, true, 1, 1), (2, false, 1, 2);
    INSERT INTO notin_child VALUES (10, 1, false, 'a'), (20, 2, false, 'b'), (21, 2, true, 'c'),
      (30, 3, false, 'no such parent'), (40, NULL, false, 'no parent')`)
  const shape = openShape(stack, t, {
    table: 'notin_child',
    where: 'parent_id NOT IN (SELECT id FROM notin_parent WHERE active)',
  })
  await shape.check('initial snapshot')
  for (const m of shape.raw.messages.filter((m) => 'key' in m)) {
    assert.deepEqual(m.headers.active_conditions, [true], `row ${m.value.id}: the negated literal is true`)
  }
  const parent2Tag = tagOf(shape.raw.messages, 20)

  let mark = shape.raw.messages.length
  const activated = await transaction(stack, `UPDATE notin_parent SET active = true WHERE id = 2`)
  await shape.check('after parent 2 became active')
  const [moveOut] = await untilMessages(shape, mark, ['move-out'], 'a move-out')
  assert.deepEqual(moveOut.headers.patterns, [{ pos: 0, value: parent2Tag }])
  assert.deepEqual(moveOut.headers.txids, [activated])

  mark = shape.raw.messages.length
  await stack.sql(`UPDATE notin_parent SET active = false WHERE id = 2`)
  await shape.check('after parent 2 became inactive')
  const moveIn = await untilMessages(
    shape,
    mark,
    ['move-in', 'insert 20 (move-in)', 'insert 21 (move-in)', 'snapshot-end'],
    'a move-in with the rows',
  )
  assert.deepEqual(moveIn[0].headers.patterns, [{ pos: 0, value: parent2Tag }])

  await stack.sql(`INSERT INTO notin_child VALUES (11, 1, false, 'out'), (22, 2, false, 'in')`)
  await shape.check('after live inserts')
  // SQL semantics: NULL NOT IN (a non-empty set) is NULL, so a row without a parent is out,
  // in the log as in the snapshot (Electric's evaluator tests NULL ∉ set, i.e. true, here).
  mark = shape.raw.messages.length
  await stack.sql(`INSERT INTO notin_child VALUES (41, NULL, false, 'no parent, live');
    UPDATE notin_child SET parent_id = NULL WHERE id = 30`)
  await shape.check('after a live insert and an update to a NULL parent_id')
  await untilMessages(shape, mark, ['delete 30'], 'the row that lost its parent leaves')
  await stack.sql(`BEGIN; INSERT INTO notin_parent VALUES (3, true, 1, 3);
    UPDATE notin_child SET parent_id = 1 WHERE id = 22; COMMIT`)
  await shape.check('after a new active parent and a child switching to an active parent')
  mark = shape.raw.messages.length
  await stack.sql(`DELETE FROM notin_parent WHERE id = 1`)
  await shape.check('after deleting active parent 1 (its children move in)')
  await untilMessages(
    shape,
    mark,
    ['move-in', 'insert 10 (move-in)', 'insert 11 (move-in)', 'insert 22 (move-in)', 'snapshot-end'],
    'move-in',
  )
  await shape.settle()
})

test('OR of two subqueries: a row stays while either disjunct holds', async (t) => {
  await stack.sql(`
    INSERT INTO or2_parent VALUES (1, true, 1, 1), (2, false, 1, 9), (3, true, 1, 9), (4, false, 1, 1);
    INSERT INTO or2_child VALUES (10, 1, false, 'a'), (20, 2, false, 'b'), (30, 3, false, 'c'), (40, 4, false, 'd')`)
  const shape = openShape(stack, t, {
    table: 'or2_child',
    where:
      'parent_id IN (SELECT id FROM or2_parent WHERE active) OR parent_id IN (SELECT id FROM or2_parent WHERE value > 5)',
  })
  await shape.check('initial snapshot')
  const snapshot = shape.raw.messages.filter((m) => 'key' in m)
  const slots = {}
  for (const m of snapshot) {
    const { tags, active_conditions: ac } = m.headers
    assert.equal(tags?.length, 2, `row ${m.value.id}: one tag per disjunct: ${JSON.stringify(tags)}`)
    assert.match(tags[0], /^[^/]+\/$/, `row ${m.value.id}: disjunct 0 uses position 0 only`)
    assert.match(tags[1], /^\/[^/]+$/, `row ${m.value.id}: disjunct 1 uses position 1 only`)
    slots[m.value.id] = [tags[0].slice(0, -1), tags[1].slice(1)]
    assert.deepEqual(
      ac,
      { 10: [true, false], 20: [false, true], 30: [true, true] }[m.value.id],
      `row ${m.value.id}: active_conditions`,
    )
  }

  let mark = shape.raw.messages.length
  await stack.sql(`UPDATE or2_parent SET active = false WHERE id = 3`)
  const [out0] = await untilMessages(shape, mark, ['move-out'], 'move-out at position 0')
  assert.deepEqual(out0.headers.patterns, [{ pos: 0, value: slots[30][0] }])
  await shape.check('row 30 stays: its parent’s value still matches')

  mark = shape.raw.messages.length
  await stack.sql(`UPDATE or2_parent SET value = 1 WHERE id = 3`)
  const [out1] = await untilMessages(shape, mark, ['move-out'], 'move-out at position 1')
  assert.deepEqual(out1.headers.patterns, [{ pos: 1, value: slots[30][1] }])
  await shape.check('row 30 leaves: neither disjunct holds')

  mark = shape.raw.messages.length
  await stack.sql(`UPDATE or2_parent SET value = 9 WHERE id = 4`)
  await shape.check('row 40 moves in by position 1')
  await untilMessages(shape, mark, ['move-in', 'insert 40 (move-in)', 'snapshot-end'], 'move-in at position 1')
  assert.deepEqual(messageFor(shape.raw.messages, 40).headers.active_conditions, [false, true])

  mark = shape.raw.messages.length
  await stack.sql(`UPDATE or2_parent SET active = true WHERE id = 4`)
  await untilMessages(shape, mark, ['move-in'], 'move-in at position 0 without rows: no snapshot-end')
  await shape.check('row 40 held by both disjuncts')
  mark = shape.raw.messages.length
  await stack.sql(`UPDATE or2_parent SET value = 1 WHERE id = 4`)
  await untilMessages(shape, mark, ['move-out'], 'move-out at position 1')
  await shape.check('row 40 stays: position 0 was moved in')
  mark = shape.raw.messages.length
  await stack.sql(`UPDATE or2_parent SET active = false WHERE id = 4`)
  await untilMessages(shape, mark, ['move-out'], 'move-out at position 0')
  await shape.check('row 40 leaves')
  await stack.sql(`UPDATE or2_child SET parent_id = 2 WHERE id = 10`)
  await shape.check('row 10 switches to a parent matching the other disjunct')
  await shape.settle()
})

test('subquery OR a column: tags ["<hash>/", "/1"], active_conditions [bool, bool]', async (t) => {
  await stack.sql(`
    INSERT INTO orurg_parent VALUES (1, true, 1, 1), (2, false, 1, 2), (4, false, 1, 4);
    INSERT INTO orurg_child VALUES (10, 1, false, 'a'), (11, 1, true, 'b'), (20, 2, false, 'c'),
      (21, 2, true, 'd'), (41, 4, true, 'e')`)
  const shape = openShape(stack, t, {
    table: 'orurg_child',
    where: 'parent_id IN (SELECT id FROM orurg_parent WHERE active) OR urgent',
  })
  await shape.check('initial snapshot')
  const snapshot = shape.raw.messages.filter((m) => 'key' in m)
  const hash = {}
  for (const m of snapshot) {
    const { tags, active_conditions: ac } = m.headers
    assert.equal(tags?.length, 2, `row ${m.value.id}: ${JSON.stringify(tags)}`)
    assert.match(tags[0], /^[^/]+\/$/)
    assert.equal(tags[1], '/1', 'a plain predicate’s slot is "1"')
    hash[m.value.id] = tags[0].slice(0, -1)
    const expected = { 10: [true, false], 11: [true, true], 21: [false, true], 41: [false, true] }[m.value.id]
    assert.deepEqual(ac, expected, `row ${m.value.id}: active_conditions`)
  }
  assert.equal(hash[10], hash[11])
  assert.notEqual(hash[10], hash[21])

  let mark = shape.raw.messages.length
  await stack.sql(`UPDATE orurg_parent SET active = true WHERE id = 2`)
  await shape.check('after parent 2 became active')
  const moveIn = await untilMessages(
    shape,
    mark,
    ['move-in', 'insert 20 (move-in)', 'snapshot-end'],
    'only the row not yet in moves in',
  )
  assert.deepEqual(moveIn[0].headers.patterns, [{ pos: 0, value: hash[21] }])
  assert.deepEqual(moveIn[1].headers.tags, [`${hash[21]}/`, '/1'])
  assert.deepEqual(moveIn[1].headers.active_conditions, [true, false])

  mark = shape.raw.messages.length
  await stack.sql(`UPDATE orurg_parent SET active = false WHERE id = 2`)
  await untilMessages(shape, mark, ['move-out'], 'move-out')
  await shape.check('row 20 leaves, urgent row 21 stays')
  await stack.sql(`UPDATE orurg_parent SET active = false WHERE id = 1`)
  await shape.check('row 10 leaves, urgent row 11 stays')

  mark = shape.raw.messages.length
  await stack.sql(`UPDATE orurg_child SET urgent = false WHERE id = 11`)
  await shape.check('row 11 no longer urgent')
  await untilMessages(shape, mark, ['delete 11'], 'a delete')
  mark = shape.raw.messages.length
  await stack.sql(`UPDATE orurg_child SET urgent = true WHERE id = 10`)
  await shape.check('row 10 urgent')
  const [insert] = await untilMessages(shape, mark, ['insert 10'], 'an insert')
  assert.deepEqual(insert.headers.tags, [`${hash[10]}/`, '/1'])
  assert.deepEqual(insert.headers.active_conditions, [false, true])

  // Parent 4 has only an urgent child: moves change conditions, not rows.
  mark = shape.raw.messages.length
  await stack.sql(`UPDATE orurg_parent SET active = true WHERE id = 4`)
  await untilMessages(shape, mark, ['move-in'], 'move-in without rows (and without snapshot-end)')
  mark = shape.raw.messages.length
  await stack.sql(`UPDATE orurg_parent SET active = false WHERE id = 4`)
  await untilMessages(shape, mark, ['move-out'], 'move-out without a row change')
  await shape.check('row 41 stays')
  await stack.sql(
    `UPDATE orurg_parent SET active = true WHERE id = 4; UPDATE orurg_child SET urgent = false WHERE id = 41`,
  )
  await shape.check('row 41 held by its parent only')
  await stack.sql(`UPDATE orurg_parent SET active = false WHERE id = 4`)
  await shape.check('row 41 leaves with its parent')
  await shape.settle()
})

test('nested subqueries: an org flipping premium moves its parents’ children', async (t) => {
  await stack.sql(`
    INSERT INTO nest_org VALUES (1, true), (2, false), (3, true), (4, false);
    INSERT INTO nest_parent VALUES (1, true, 1, 1), (2, true, 2, 2), (3, false, 1, 3);
    INSERT INTO nest_child VALUES (10, 1, false, 'a'), (20, 2, false, 'b'), (30, 3, false, 'c')`)
  const shape = openShape(stack, t, {
    table: 'nest_child',
    where: 'parent_id IN (SELECT id FROM nest_parent WHERE org_id IN (SELECT id FROM nest_org WHERE premium))',
  })
  await shape.check('initial snapshot')
  const tags = { 10: tagOf(shape.raw.messages, 10), 30: tagOf(shape.raw.messages, 30) }

  let mark = shape.raw.messages.length
  await stack.sql(`UPDATE nest_org SET premium = true WHERE id = 2`)
  await shape.check('after org 2 became premium')
  await untilMessages(shape, mark, ['move-in', 'insert 20 (move-in)', 'snapshot-end'], 'child of parent 2 moves in')

  mark = shape.raw.messages.length
  await stack.sql(`UPDATE nest_org SET premium = false WHERE id = 1`)
  await shape.check('after org 1 stopped being premium')
  await eventually(() => {
    const ms = shape.since(mark)
    assert.ok(ms.length > 0 && ms.every((m) => m.headers.event === 'move-out'), `only move-outs: ${kinds(ms)}`)
    const values = ms.flatMap((m) => m.headers.patterns.map((p) => `${p.pos}:${p.value}`)).sort()
    assert.deepEqual(values, [`0:${tags[10]}`, `0:${tags[30]}`].sort())
  }, 10_000)

  mark = shape.raw.messages.length
  await stack.sql(`UPDATE nest_parent SET org_id = 3 WHERE id = 2`)
  await assertQuiet(shape, mark, 'parent 2 moved between premium orgs')
  await shape.check('child 20 stays')
  await stack.sql(`UPDATE nest_org SET premium = true WHERE id = 4`)
  await assertQuiet(shape, mark, 'an org without parents became premium')

  await stack.sql(`UPDATE nest_parent SET org_id = 2 WHERE id = 1`)
  await shape.check('parent 1 moved to premium org 2')
  await stack.sql(`UPDATE nest_org SET premium = false WHERE id = 3`)
  await shape.check('org 3 stopped being premium')
  await stack.sql(
    `BEGIN; UPDATE nest_org SET premium = true WHERE id = 1; INSERT INTO nest_child VALUES (31, 3, true, 'd'); COMMIT`,
  )
  await shape.check('org 1 premium again, with a new child of parent 3')
  await stack.sql(`DELETE FROM nest_org WHERE id = 2`)
  await shape.check('org 2 deleted')
  await shape.settle()
})

test('params: $1 inside the subquery', async (t) => {
  await stack.sql(`
    INSERT INTO par_parent VALUES (1, true, 1, 7), (2, true, 1, 3);
    INSERT INTO par_child VALUES (10, 1, false, 'a'), (20, 2, false, 'b')`)
  const where = 'parent_id IN (SELECT id FROM par_parent WHERE value = $1)'
  const seven = openShape(stack, t, { table: 'par_child', where, params: { 1: '7' } })
  const eight = openShape(stack, t, { table: 'par_child', where, params: { 1: '8' } })
  const both = async (label) => {
    await seven.check(`${label} (value 7)`)
    await eight.check(`${label} (value 8)`)
  }
  await both('initial snapshot')
  assert.deepEqual(
    seven.raw.currentRows.map((r) => r.id),
    [10],
  )
  await stack.sql(`UPDATE par_parent SET value = 7 WHERE id = 2`)
  await both('parent 2 value 7')
  await stack.sql(`UPDATE par_parent SET value = 8 WHERE id = 1`)
  await both('parent 1 value 8')
  await stack.sql(`INSERT INTO par_child VALUES (21, 2, false, 'c'), (11, 1, false, 'd')`)
  await both('live inserts')
  await seven.settle()
  await eight.settle()
})

test('row form: (org_id, parent_id) IN (SELECT org_id, id FROM …)', async (t) => {
  await stack.sql(`
    INSERT INTO rowf_parent VALUES (1, true, 1, 1), (2, false, 1, 2), (3, true, 2, 3);
    INSERT INTO rowf_item VALUES (10, 1, 1, 'a'), (11, 2, 1, 'org mismatch'), (20, 1, 2, 'b'),
      (30, 2, 3, 'c'), (31, NULL, 3, 'no org')`)
  const shape = openShape(stack, t, {
    table: 'rowf_item',
    where: '(org_id, parent_id) IN (SELECT org_id, id FROM rowf_parent WHERE active)',
  })
  await shape.check('initial snapshot')
  const tag10 = tagOf(shape.raw.messages, 10)
  let mark = shape.raw.messages.length
  await stack.sql(`UPDATE rowf_parent SET active = true WHERE id = 2`)
  await shape.check('parent 2 active')
  await untilMessages(shape, mark, ['move-in', 'insert 20 (move-in)', 'snapshot-end'], 'move-in')
  mark = shape.raw.messages.length
  await stack.sql(`UPDATE rowf_parent SET org_id = 2 WHERE id = 1`)
  await shape.check('parent 1 moved to org 2: (1, 1) out, (2, 1) in')
  await eventually(() => {
    const events = shape.since(mark).filter((m) => m.headers.event)
    assert.ok(events.some((m) => m.headers.event === 'move-out' && m.headers.patterns.some((p) => p.value === tag10)))
  }, 10_000)
  const tag11 = tagOf(shape.raw.messages, 11)
  assert.notEqual(tag11, tag10)
  mark = shape.raw.messages.length
  await stack.sql(`UPDATE rowf_item SET org_id = 2 WHERE id = 10`)
  await shape.check('item 10 follows to org 2')
  const [insert] = await untilMessages(shape, mark, ['insert 10'], 'an insert')
  assert.deepEqual(insert.headers.tags, [tag11], 'the same pair, the same tag')
  await stack.sql(`DELETE FROM rowf_parent WHERE id = 3`)
  await shape.check('parent 3 deleted')
  await shape.settle()
})

/** GET /v1/shape with `query`; resolves to {status, body}. */
async function get(query) {
  const res = await fetch(`${stack.shapeUrl}?${new URLSearchParams(query)}`)
  const text = await res.text()
  let body
  try {
    body = JSON.parse(text)
  } catch {
    body = text
  }
  return { status: res.status, body, headers: res.headers }
}

test('rejected: EXISTS is not an `IN (SELECT …)` sublink', async () => {
  // (A select list that is not a plain column is refused first, as Electric's parser does.)
  const where = 'id > 0 AND EXISTS (SELECT id FROM rej_parent)'
  const { status, body } = await get({ table: 'rej_child', offset: '-1', where })
  assert.equal(status, 400, JSON.stringify(body))
  assert.deepEqual(body, {
    message: 'Invalid request',
    errors: {
      where: [
        `At location ${where.indexOf('EXISTS')}: only \`value IN (SELECT ...)\` sublinks are supported right now`,
      ],
    },
  })
})

test('rejected: an unknown table in the subquery (under `table`)', async () => {
  const { status, body } = await get({
    table: 'rej_child',
    offset: '-1',
    where: 'parent_id IN (SELECT id FROM rej_nope WHERE active)',
  })
  assert.equal(status, 400, JSON.stringify(body))
  assert.deepEqual(body, {
    message: 'Invalid request',
    errors: {
      table: [
        'Table "public"."rej_nope" does not exist. If the table name contains capitals or special characters you must quote it.',
      ],
    },
  })
})

test('rejected: a subquery in a subset where', async () => {
  const first = await get({ table: 'rej_child', offset: '-1' })
  assert.equal(first.status, 200, JSON.stringify(first.body))
  const { status, body } = await get({
    table: 'rej_child',
    handle: first.headers.get('electric-handle'),
    offset: first.headers.get('electric-offset'),
    subset__where: 'parent_id IN (SELECT id FROM rej_parent WHERE active)',
  })
  assert.equal(status, 400, JSON.stringify(body))
  assert.deepEqual(body, {
    message: 'Invalid request',
    errors: { subset: { where: ['Subqueries are not allowed in subsets'] } },
  })
})

test('rejected: the other unsupported subqueries of the design note', async () => {
  const p = 'rej_parent'
  // [where, error key, expected text (a RegExp where the location is not pinned down)]
  const cases = [
    [
      `parent_id = ANY (SELECT id FROM ${p})`,
      'where',
      /^At location \d+: only `value IN \(SELECT \.\.\.\)` sublinks are supported right now$/,
    ],
    [
      `parent_id = (SELECT id FROM ${p})`,
      'where',
      /^At location \d+: only `value IN \(SELECT \.\.\.\)` sublinks are supported right now$/,
    ],
    [
      `(parent_id + 1) IN (SELECT id FROM ${p})`,
      'where',
      /^At location \d+: currently, left side of `IN \(SELECT \.\.\.\)` can only be a column reference or a list of column references$/,
    ],
    [
      `title IN (SELECT id FROM ${p})`,
      'where',
      /^At location \d+: left side of `IN \(SELECT \.\.\.\)` has type text but subquery returns int4\[\]$/,
    ],
    [`parent_id IN (SELECT DISTINCT id FROM ${p})`, 'where', 'SELECT statement must not contain any clauses'],
    [`parent_id IN (SELECT id FROM ${p} ORDER BY id)`, 'where', 'SELECT statement must not contain any clauses'],
    [`parent_id IN (SELECT id FROM ${p} JOIN rej_org USING (id))`, 'where', 'Expected a single table reference'],
    [`parent_id IN (SELECT nope FROM ${p})`, 'columns', 'The following columns are not found on the table: nope'],
    [
      `parent_id IN (SELECT id FROM ${p} WHERE active) AND NOT parent_id IN (SELECT id FROM ${p} WHERE active)`,
      'where',
      'a subquery dependency cannot be used with both positive and negative polarity in the same filter',
    ],
  ]
  const failures = []
  for (const [where, key, text] of cases) {
    const { status, body } = await get({ table: 'rej_child', offset: '-1', where })
    const got = body?.errors?.[key]
    const ok =
      status === 400 &&
      body?.message === 'Invalid request' &&
      Array.isArray(got) &&
      got.length === 1 &&
      (typeof text === 'string' ? got[0] === text : text.test(got[0]))
    if (!ok)
      failures.push(
        `where ${where}\n    expected 400 errors.${key} = [${text}]\n    got ${status} ${JSON.stringify(body)}`,
      )
  }
  if (failures.length) assert.fail(`${failures.length} of ${cases.length} cases differ:\n  ${failures.join('\n  ')}`)
})

// ---------------------------------------------------------------------------------------------
// Random differential test.

/** Transactions run; SYNCLINE_SUBQUERY_TRANSACTIONS overrides. */
const RANDOM_TRANSACTIONS = Number(process.env.SYNCLINE_SUBQUERY_TRANSACTIONS ?? 1000)
/**
 * The clients are compared with SELECT after every transaction for the first COMPARE_ALL, then
 * after every COMPARE_EVERY-th (SYNCLINE_SUBQUERY_COMPARE_EVERY; default 1: after each).
 */
const COMPARE_ALL = 200
const COMPARE_EVERY = Number(process.env.SYNCLINE_SUBQUERY_COMPARE_EVERY ?? 1)
/**
 * Share of transactions committed with synchronous_commit=on. The test cluster runs with it off,
 * so a commit reaches the replication stream only when the WAL writer flushes (up to 200 ms
 * later), which would make 1,000 compared transactions take minutes; the rest stay asynchronous
 * because then pg_current_wal_lsn() (which a move-in's splice may wait for) can trail the
 * commit of a transaction the move-in query already sees.
 */
const SYNCHRONOUS_SHARE = 0.9

/**
 * Random transactions over rnd_org/rnd_parent/rnd_child (a model of the ids keeps every
 * statement valid): inserts, updates and deletes of parents and children, active and premium
 * flips, parent_id changes (to parents that exist, do not exist or NULL), primary-key changes,
 * bulk updates, in→out→in oscillations; one to four statements per transaction.
 */
function generator(rng) {
  const parents = new Set()
  const children = new Set()
  let nextParent = 1
  let nextChild = 1000
  const ORGS = [1, 2, 3, 4]
  const pick = (set) => rng.pick([...set])
  const bool = () => (rng.bool() ? 'true' : 'false')
  const parentRef = () => {
    const r = rng.next()
    if (r < 0.04 || parents.size === 0) return 'NULL'
    if (r < 0.1) return String(nextParent + rng.int(0, 3)) // not there (yet)
    return String(pick(parents))
  }
  const insertParent = () => {
    const id = nextParent++
    parents.add(id)
    return `INSERT INTO rnd_parent VALUES (${id}, ${bool()}, ${rng.pick(ORGS)}, ${rng.int(0, 9)})`
  }
  const insertChild = (parent = parentRef()) => {
    const id = nextChild++
    children.add(id)
    return `INSERT INTO rnd_child VALUES (${id}, ${parent}, ${rng.bool(0.3)}, 't${id}')`
  }
  const ops = {
    flipParent: 20,
    setParentActive: 6,
    reparentChild: 14,
    insertChild: 12,
    deleteChild: 7,
    flipUrgent: 7,
    retitleChild: 5,
    insertParent: 4,
    insertParentWithChildren: 3,
    deleteParent: 3,
    parentValue: 4,
    parentOrg: 4,
    flipPremium: 4,
    parentKey: 1,
    childKey: 1,
    bulkFlip: 1,
    bulkReparent: 1,
    oscillate: 2,
  }
  const statement = () => {
    let op = rng.weighted(ops)
    if (parents.size < 5 && ['deleteParent', 'parentKey'].includes(op)) op = 'insertParent'
    if (parents.size > 40 && op.startsWith('insertParent')) op = 'deleteParent'
    if (children.size < 10 && ['deleteChild', 'childKey'].includes(op)) op = 'insertChild'
    if (children.size > 150 && op === 'insertChild') op = 'deleteChild'
    if (parents.size === 0) op = 'insertParent'
    if (
      children.size === 0 &&
      ['reparentChild', 'deleteChild', 'flipUrgent', 'retitleChild', 'childKey'].includes(op)
    ) {
      op = 'insertChild'
    }
    switch (op) {
      case 'flipParent':
        return [`UPDATE rnd_parent SET active = NOT active WHERE id = ${pick(parents)}`]
      case 'setParentActive':
        return [`UPDATE rnd_parent SET active = ${bool()} WHERE id = ${pick(parents)}`]
      case 'reparentChild':
        return [`UPDATE rnd_child SET parent_id = ${parentRef()} WHERE id = ${pick(children)}`]
      case 'insertChild':
        return [insertChild()]
      case 'deleteChild': {
        const id = pick(children)
        children.delete(id)
        return [`DELETE FROM rnd_child WHERE id = ${id}`]
      }
      case 'flipUrgent':
        return [`UPDATE rnd_child SET urgent = NOT urgent WHERE id = ${pick(children)}`]
      case 'retitleChild':
        return [`UPDATE rnd_child SET title = 'r${rng.int(0, 999)}' WHERE id = ${pick(children)}`]
      case 'insertParent':
        return [insertParent()]
      case 'insertParentWithChildren': {
        const s = [insertParent()]
        const id = nextParent - 1
        for (let i = rng.int(1, 3); i > 0; i--) s.push(insertChild(String(id)))
        return s
      }
      case 'deleteParent': {
        const id = pick(parents)
        parents.delete(id)
        return [`DELETE FROM rnd_parent WHERE id = ${id}`]
      }
      case 'parentValue':
        return [`UPDATE rnd_parent SET value = ${rng.int(0, 9)} WHERE id = ${pick(parents)}`]
      case 'parentOrg':
        return [`UPDATE rnd_parent SET org_id = ${rng.pick(ORGS)} WHERE id = ${pick(parents)}`]
      case 'flipPremium':
        return [`UPDATE rnd_org SET premium = NOT premium WHERE id = ${rng.pick(ORGS)}`]
      case 'parentKey': {
        const id = pick(parents)
        const to = nextParent++
        parents.delete(id)
        parents.add(to)
        return [`UPDATE rnd_parent SET id = ${to} WHERE id = ${id}`]
      }
      case 'childKey': {
        const id = pick(children)
        const to = nextChild++
        children.delete(id)
        children.add(to)
        return [`UPDATE rnd_child SET id = ${to} WHERE id = ${id}`]
      }
      case 'bulkFlip':
        return [`UPDATE rnd_parent SET active = NOT active WHERE id % 5 = ${rng.int(0, 4)}`]
      case 'bulkReparent':
        return [`UPDATE rnd_child SET parent_id = ${parentRef()} WHERE parent_id = ${pick(parents)}`]
      case 'oscillate': {
        const id = pick(parents)
        const flip = `UPDATE rnd_parent SET active = NOT active WHERE id = ${id}`
        return rng.bool() ? [flip, flip] : [flip, insertChild(String(id)), flip]
      }
    }
    throw new Error(`unknown op ${op}`)
  }
  return {
    /** Statements that fill the tables first. */
    initial() {
      const s = [`INSERT INTO rnd_org VALUES ${ORGS.map((id) => `(${id}, ${bool()})`).join(', ')}`]
      for (let i = 0; i < 20; i++) s.push(insertParent())
      for (let i = 0; i < 60; i++) s.push(insertChild())
      return s
    },
    /** The statements of one transaction. */
    transaction() {
      const n = rng.bool(0.55) ? 1 : rng.int(2, 4)
      const statements = Array.from({ length: n }, statement).flat()
      if (rng.bool(SYNCHRONOUS_SHARE)) statements.unshift('SET LOCAL synchronous_commit = on')
      return statements
    },
  }
}

test(
  'random differential: clients equal SELECT after random transactions',
  async (t) => {
    const seed = process.env.SYNCLINE_TEST_SEED ? Number(process.env.SYNCLINE_TEST_SEED) : randomInt(2 ** 31)
    const replay = `seed ${seed} (SYNCLINE_TEST_SEED=${seed} replays it)`
    t.diagnostic(replay)
    console.log(`subquery random differential: ${replay}`)
    const gen = generator(random(seed))
    await stack.sql(`BEGIN; ${gen.initial().join(';\n')}; COMMIT`)

    const active = 'SELECT id FROM rnd_parent WHERE active'
    const definitions = [
      { where: `parent_id IN (${active})`, tanstack: true },
      { where: `parent_id NOT IN (${active})` },
      { where: `parent_id IN (${active}) OR urgent`, tanstack: true },
      { where: `parent_id IN (SELECT id FROM rnd_parent WHERE org_id IN (SELECT id FROM rnd_org WHERE premium))` },
      {
        where: `(parent_id IN (SELECT id FROM rnd_parent WHERE value >= $1) AND NOT urgent) OR parent_id IN (SELECT id FROM rnd_parent WHERE active AND value < $1)`,
        params: { 1: '5' },
      },
    ]
    const shapes = definitions.map(({ where, params, tanstack = false }) =>
      openShape(stack, t, { table: 'rnd_child', where, params }, { tanstack }),
    )

    const history = []
    const context = () =>
      `\n${replay}\nlast transactions:\n${history
        .slice(-8)
        .map(({ n, statements }) => `  #${n}: ${statements.join('; ')}`)
        .join('\n')}`
    const checkAll = async (label) => {
      for (const shape of shapes) {
        try {
          await shape.check(label)
        } catch (error) {
          throw addContext(error, context())
        }
      }
    }

    await checkAll('initial snapshot')
    const started = Date.now()
    let compared = 0
    for (let n = 1; n <= RANDOM_TRANSACTIONS; n++) {
      const statements = gen.transaction()
      history.push({ n, statements })
      await stack.sql(`BEGIN; ${statements.join(';\n')}; COMMIT`)
      if (n <= COMPARE_ALL || n % COMPARE_EVERY === 0 || n === RANDOM_TRANSACTIONS) {
        await checkAll(`after transaction #${n}`)
        compared++
      }
    }
    for (const shape of shapes) {
      try {
        await shape.settle('after the last transaction')
      } catch (error) {
        throw addContext(error, context())
      }
    }
    t.diagnostic(
      `${RANDOM_TRANSACTIONS} transactions, ${compared} comparisons of ${shapes.length} shapes in ${Date.now() - started} ms`,
    )
  },
  { timeout: 300_000 },
)

//! One level of the shape index: shapes already matched, per-column indexes leading to deeper
//! levels, and shapes evaluated one by one.

use super::hash::{FxHashMap, FxHashSet};
use super::key::Key;
use super::plan::{branches, Access};
use super::range::RangeIndex;
use super::ShapeId;
use crate::eval::{eval_bool_for_routing, Row};
use crate::expr::Expr;
use crate::value::Datum;

/// Shapes whose `LIKE 'prefix%'` conditions on one column are indexed by prefix.
#[derive(Default)]
struct PrefixIndex {
    by_prefix: FxHashMap<String, Node>,
    longest_bytes: usize,
}

/// An index level. Every shape reachable below a node has all the accesses on the path to it
/// true for the row. Kept small (indexes boxed, created on first use): with 100k equality
/// shapes there are 100k nodes, and their size decides how many cache lines a lookup touches.
#[derive(Default)]
pub(crate) struct Node {
    matched: FxHashSet<ShapeId>,
    indexes: Option<Box<Indexes>>,
    others: Vec<(ShapeId, Expr)>,
}

/// The per-column indexes of a node.
#[derive(Default)]
struct Indexes {
    eq: FxHashMap<usize, FxHashMap<Key, Node>>,
    contains: FxHashMap<usize, FxHashMap<Key, FxHashMap<Vec<Key>, Node>>>,
    ranges: FxHashMap<usize, RangeIndex<Node>>,
    prefixes: FxHashMap<usize, PrefixIndex>,
}

impl Indexes {
    fn is_empty(&self) -> bool {
        self.eq.is_empty()
            && self.contains.is_empty()
            && self.ranges.is_empty()
            && self.prefixes.is_empty()
    }
}

fn conjunction(mut conjuncts: Vec<Expr>) -> Option<Expr> {
    match conjuncts.len() {
        0 => None,
        1 => conjuncts.pop(),
        _ => Some(Expr::And(conjuncts)),
    }
}

impl Node {
    /// Adds a shape that matches when all `conjuncts` are true.
    pub(crate) fn insert(&mut self, shape: ShapeId, conjuncts: Vec<Expr>) {
        let Some(expr) = conjunction(conjuncts) else {
            self.matched.insert(shape);
            return;
        };
        for branch in branches(&expr) {
            match branch.access {
                None => self
                    .others
                    .extend(conjunction(branch.rest).map(|e| (shape, e))),
                Some(access) => self.child(access).insert(shape, branch.rest),
            }
        }
    }

    fn child(&mut self, access: Access) -> &mut Node {
        let ix = self.indexes.get_or_insert_with(Box::default);
        match access {
            Access::Eq(col, key) => ix.eq.entry(col).or_default().entry(key).or_default(),
            Access::Contains(col, keys) => {
                let first = keys[0].clone();
                ix.contains
                    .entry(col)
                    .or_default()
                    .entry(first)
                    .or_default()
                    .entry(keys)
                    .or_default()
            }
            Access::Range(col, lo, hi) => {
                ix.ranges
                    .entry(col)
                    .or_default()
                    .entry(lo, hi, Node::default)
            }
            Access::Prefix(col, prefix) => {
                let index = ix.prefixes.entry(col).or_default();
                index.longest_bytes = index.longest_bytes.max(prefix.len());
                index.by_prefix.entry(prefix).or_default()
            }
        }
    }

    /// Removes a shape added with the same `conjuncts`; prunes levels left empty.
    pub(crate) fn remove(&mut self, shape: ShapeId, conjuncts: Vec<Expr>) {
        let Some(expr) = conjunction(conjuncts) else {
            self.matched.remove(&shape);
            return;
        };
        for branch in branches(&expr) {
            match branch.access {
                None => self.others.retain(|(id, _)| *id != shape),
                Some(access) => self.remove_below(access, shape, branch.rest),
            }
        }
    }

    fn remove_below(&mut self, access: Access, shape: ShapeId, rest: Vec<Expr>) {
        let Some(ix) = self.indexes.as_deref_mut() else {
            return;
        };
        match access {
            Access::Eq(col, key) => {
                let Some(map) = ix.eq.get_mut(&col) else {
                    return;
                };
                prune(map, &key, shape, rest);
                if map.is_empty() {
                    ix.eq.remove(&col);
                }
            }
            Access::Contains(col, keys) => {
                let Some(by_first) = ix.contains.get_mut(&col) else {
                    return;
                };
                if let Some(sets) = by_first.get_mut(&keys[0]) {
                    prune(sets, &keys, shape, rest);
                    if sets.is_empty() {
                        by_first.remove(&keys[0]);
                    }
                }
                if by_first.is_empty() {
                    ix.contains.remove(&col);
                }
            }
            Access::Range(col, lo, hi) => {
                let Some(index) = ix.ranges.get_mut(&col) else {
                    return;
                };
                if let Some(node) = index.get_mut(&lo, &hi) {
                    node.remove(shape, rest);
                    if node.is_empty() {
                        index.remove(&lo, &hi);
                    }
                }
                if index.is_empty() {
                    ix.ranges.remove(&col);
                }
            }
            Access::Prefix(col, prefix) => {
                let Some(index) = ix.prefixes.get_mut(&col) else {
                    return;
                };
                prune(&mut index.by_prefix, &prefix, shape, rest);
                index.longest_bytes = index.by_prefix.keys().map(String::len).max().unwrap_or(0);
                if index.by_prefix.is_empty() {
                    ix.prefixes.remove(&col);
                }
            }
        }
    }

    /// Shapes evaluated one by one at this level.
    pub(crate) fn unindexed(&self) -> usize {
        self.others.len()
    }

    fn is_empty(&self) -> bool {
        self.matched.is_empty()
            && self.indexes.as_ref().is_none_or(|ix| ix.is_empty())
            && self.others.is_empty()
    }

    /// Adds the shapes matching `row` to `out`. A column that cannot be decoded makes every
    /// access on it count as holding (over-inclusion is safe, omission is not); the shapes below
    /// are still matched by their other conditions, so a false one excludes the row, as when
    /// the whole clause is evaluated.
    pub(crate) fn collect(&self, row: &Row, out: &mut FxHashSet<ShapeId>) {
        out.extend(self.matched.iter().copied());
        if let Some(ix) = &self.indexes {
            ix.collect(row, out);
        }
        for (shape, expr) in &self.others {
            if !matches!(eval_bool_for_routing(expr, row), Ok(Some(false) | None)) {
                out.insert(*shape);
            }
        }
    }
}

impl Indexes {
    fn collect(&self, row: &Row, out: &mut FxHashSet<ShapeId>) {
        for (col, map) in &self.eq {
            match row.get(*col) {
                Ok(Some(v)) => {
                    if let Some(node) = Key::of(&v).and_then(|k| map.get(&k)) {
                        node.collect(row, out);
                    }
                }
                Ok(None) => {}
                Err(_) => map.values().for_each(|n| n.collect(row, out)),
            }
        }
        for (col, by_first) in &self.contains {
            match row.get(*col) {
                Ok(Some(Datum::Array(array))) => {
                    let present: FxHashSet<Key> =
                        array.elems.iter().flatten().filter_map(Key::of).collect();
                    for key in &present {
                        for (required, node) in by_first.get(key).into_iter().flatten() {
                            if required.iter().all(|r| present.contains(r)) {
                                node.collect(row, out);
                            }
                        }
                    }
                }
                Ok(_) => {}
                Err(_) => by_first
                    .values()
                    .flat_map(|m| m.values())
                    .for_each(|n| n.collect(row, out)),
            }
        }
        for (col, index) in &self.ranges {
            match row.get(*col) {
                Ok(Some(v)) => index.stab(&v, &mut |node: &Node| node.collect(row, out)),
                Ok(None) => {}
                Err(_) => index.all().for_each(|n| n.collect(row, out)),
            }
        }
        for (col, index) in &self.prefixes {
            match row.get(*col) {
                Ok(Some(Datum::Text(text) | Datum::Bpchar(text))) => {
                    let limit = index.longest_bytes.min(text.len());
                    for end in (0..=limit).filter(|&i| text.is_char_boundary(i)) {
                        if let Some(node) = index.by_prefix.get(&text[..end]) {
                            node.collect(row, out);
                        }
                    }
                }
                Ok(_) => {}
                Err(_) => index.by_prefix.values().for_each(|n| n.collect(row, out)),
            }
        }
    }
}

/// Removes `shape` below `map[key]`, dropping the entry when its node is left empty.
fn prune<K: std::hash::Hash + Eq + Clone>(
    map: &mut FxHashMap<K, Node>,
    key: &K,
    shape: ShapeId,
    rest: Vec<Expr>,
) {
    if let Some(node) = map.get_mut(key) {
        node.remove(shape, rest);
        if node.is_empty() {
            map.remove(key);
        }
    }
}

//! One level of the shape index: shapes already matched, per-column indexes leading to deeper
//! levels, shapes whose value sets hold the row's values, and shapes evaluated one by one.

use super::hash::{FxHashMap, FxHashSet};
use super::key::Key;
use super::plan::{branches, Access};
use super::range::RangeIndex;
use super::shape_set::ShapeSet;
use super::views::{Attachment, ShapeViews, ViewEntry};
use super::ShapeId;
use crate::eval::{eval_bool_for_routing, Cx, Row};
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
    matched: ShapeSet,
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
    /// Left-side columns → normal texts of a tuple → the shape occurrences whose value set
    /// holds that tuple.
    views: FxHashMap<Vec<usize>, FxHashMap<Vec<String>, Vec<ViewEntry>>>,
}

impl Indexes {
    fn is_empty(&self) -> bool {
        self.eq.is_empty()
            && self.contains.is_empty()
            && self.ranges.is_empty()
            && self.prefixes.is_empty()
            && self.views.is_empty()
    }
}

fn conjunction(mut conjuncts: Vec<Expr>) -> Option<Expr> {
    match conjuncts.len() {
        0 => None,
        1 => conjuncts.pop(),
        _ => Some(Expr::And(conjuncts)),
    }
}

/// The shapes collected for a row: those it may match, and among them those whose whole
/// clause certainly holds for it.
#[derive(Default)]
pub(crate) struct Found {
    /// Every shape the row may match (over-inclusive).
    pub(crate) may: FxHashSet<ShapeId>,
    /// Shapes matched through equality lookups of the row's decoded values alone (or without a
    /// clause): a level's `matched` shapes have every access on the path true for the row, and
    /// an equality key is equal exactly when Postgres's `=` is true.
    pub(crate) certain: FxHashSet<ShapeId>,
}

/// What collecting reads besides the row: each shape's value sets.
pub(crate) struct Collect<'a> {
    pub(crate) views: &'a FxHashMap<ShapeId, ShapeViews>,
}

impl Collect<'_> {
    /// Whether `expr` may be true for `shape` on `row` (only a certain false or NULL excludes
    /// it).
    pub(crate) fn may_hold(&self, shape: ShapeId, expr: &Expr, row: &Row) -> bool {
        let views = self.views.get(&shape);
        let cx = Cx {
            row,
            views: views.map(|v| v as _),
        };
        eval_bool_for_routing(expr, &cx).may_be_true()
    }
}

impl Node {
    /// Adds a shape that matches when all `conjuncts` are true. A subquery access is not
    /// indexed here but returned in `attachments` with the path of accesses leading to it:
    /// its entries are added as the shape's value set gains values.
    pub(crate) fn insert(
        &mut self,
        shape: ShapeId,
        conjuncts: Vec<Expr>,
        path: &mut Vec<Access>,
        attachments: &mut Vec<Attachment>,
    ) {
        let Some(expr) = conjunction(conjuncts) else {
            self.matched.insert(shape);
            return;
        };
        for branch in branches(&expr) {
            match branch.access {
                None => self
                    .others
                    .extend(conjunction(branch.rest).map(|e| (shape, e))),
                Some(Access::View { subquery, cols }) => attachments.push(Attachment {
                    subquery,
                    path: path.clone(),
                    cols,
                    rest: conjunction(branch.rest),
                }),
                Some(access) => {
                    path.push(access.clone());
                    self.child(access)
                        .insert(shape, branch.rest, path, attachments);
                    path.pop();
                }
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
            Access::View { .. } => unreachable!("a subquery access has no child level"),
        }
    }

    /// Applies `f` to the existing child below `access`, then prunes it (and the index maps
    /// holding it) if it is left empty.
    fn with_child(&mut self, access: &Access, f: impl FnOnce(&mut Node)) {
        let Some(ix) = self.indexes.as_deref_mut() else {
            return;
        };
        match access {
            Access::Eq(col, key) => {
                let Some(map) = ix.eq.get_mut(col) else {
                    return;
                };
                prune(map, key, f);
                if map.is_empty() {
                    ix.eq.remove(col);
                }
            }
            Access::Contains(col, keys) => {
                let Some(by_first) = ix.contains.get_mut(col) else {
                    return;
                };
                if let Some(sets) = by_first.get_mut(&keys[0]) {
                    prune(sets, keys, f);
                    if sets.is_empty() {
                        by_first.remove(&keys[0]);
                    }
                }
                if by_first.is_empty() {
                    ix.contains.remove(col);
                }
            }
            Access::Range(col, lo, hi) => {
                let Some(index) = ix.ranges.get_mut(col) else {
                    return;
                };
                if let Some(node) = index.get_mut(lo, hi) {
                    f(node);
                    if node.is_empty() {
                        index.remove(lo, hi);
                    }
                }
                if index.is_empty() {
                    ix.ranges.remove(col);
                }
            }
            Access::Prefix(col, prefix) => {
                let Some(index) = ix.prefixes.get_mut(col) else {
                    return;
                };
                prune(&mut index.by_prefix, prefix, f);
                index.longest_bytes = index.by_prefix.keys().map(String::len).max().unwrap_or(0);
                if index.by_prefix.is_empty() {
                    ix.prefixes.remove(col);
                }
            }
            Access::View { .. } => {}
        }
    }

    /// Removes a shape added with the same `conjuncts`; prunes levels left empty. Its subquery
    /// entries must have been removed first ([`Node::view_remove`]).
    pub(crate) fn remove(&mut self, shape: ShapeId, conjuncts: Vec<Expr>) {
        let Some(expr) = conjunction(conjuncts) else {
            self.matched.remove(shape);
            return;
        };
        for branch in branches(&expr) {
            match branch.access {
                None => self.others.retain(|(id, _)| *id != shape),
                Some(Access::View { .. }) => {}
                Some(access) => {
                    let rest = branch.rest;
                    self.with_child(&access, |node| node.remove(shape, rest));
                }
            }
        }
    }

    /// Indexes `entry` under the tuple `key` of columns `cols`, at the end of `path`.
    pub(crate) fn view_insert(
        &mut self,
        path: &[Access],
        cols: &[usize],
        key: Vec<String>,
        entry: ViewEntry,
    ) {
        match path.split_first() {
            Some((first, rest)) => self
                .child(first.clone())
                .view_insert(rest, cols, key, entry),
            None => self
                .indexes
                .get_or_insert_with(Box::default)
                .views
                .entry(cols.to_vec())
                .or_default()
                .entry(key)
                .or_default()
                .push(entry),
        }
    }

    /// Removes what [`Node::view_insert`] added; prunes levels left empty.
    pub(crate) fn view_remove(
        &mut self,
        path: &[Access],
        cols: &[usize],
        key: &[String],
        entry: ViewEntry,
    ) {
        match path.split_first() {
            Some((first, rest)) => {
                self.with_child(first, |node| node.view_remove(rest, cols, key, entry))
            }
            None => {
                let Some(ix) = self.indexes.as_deref_mut() else {
                    return;
                };
                let Some(map) = ix.views.get_mut(cols) else {
                    return;
                };
                if let Some(entries) = map.get_mut(key) {
                    entries.retain(|e| *e != entry);
                    if entries.is_empty() {
                        map.remove(key);
                    }
                }
                if map.is_empty() {
                    ix.views.remove(cols);
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
    /// the whole clause is evaluated. `exact`: every access on the path to this level was an
    /// equality lookup of a decoded value (its `matched` shapes are then certain).
    pub(crate) fn collect(&self, row: &Row, out: &mut Found, exact: bool, cx: &Collect) {
        self.matched.add_to(&mut out.may);
        if exact {
            self.matched.add_to(&mut out.certain);
        }
        if let Some(ix) = &self.indexes {
            ix.collect(row, out, exact, cx);
        }
        for (shape, expr) in &self.others {
            if cx.may_hold(*shape, expr, row) {
                out.may.insert(*shape);
            }
        }
    }
}

impl Indexes {
    /// [`Node::collect`] through each index; only equality lookups keep `exact`.
    fn collect(&self, row: &Row, out: &mut Found, exact: bool, cx: &Collect) {
        for (col, map) in &self.eq {
            match row.get(*col) {
                Ok(Some(v)) => {
                    if let Some(node) = Key::of(&v).and_then(|k| map.get(&k)) {
                        node.collect(row, out, exact, cx);
                    }
                }
                Ok(None) => {}
                Err(_) => map.values().for_each(|n| n.collect(row, out, false, cx)),
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
                                node.collect(row, out, false, cx);
                            }
                        }
                    }
                }
                Ok(_) => {}
                Err(_) => by_first
                    .values()
                    .flat_map(|m| m.values())
                    .for_each(|n| n.collect(row, out, false, cx)),
            }
        }
        for (col, index) in &self.ranges {
            match row.get(*col) {
                Ok(Some(v)) => index.stab(&v, &mut |node: &Node| node.collect(row, out, false, cx)),
                Ok(None) => {}
                Err(_) => index.all().for_each(|n| n.collect(row, out, false, cx)),
            }
        }
        for (col, index) in &self.prefixes {
            match row.get(*col) {
                Ok(Some(Datum::Text(text) | Datum::Bpchar(text))) => {
                    let limit = index.longest_bytes.min(text.len());
                    for end in (0..=limit).filter(|&i| text.is_char_boundary(i)) {
                        if let Some(node) = index.by_prefix.get(&text[..end]) {
                            node.collect(row, out, false, cx);
                        }
                    }
                }
                Ok(_) => {}
                Err(_) => index
                    .by_prefix
                    .values()
                    .for_each(|n| n.collect(row, out, false, cx)),
            }
        }
        for (cols, map) in &self.views {
            // Every column is decoded first: one that does not decode makes the access hold
            // (as evaluating it fails), even beside a NULL.
            let key: Result<Vec<Option<String>>, _> =
                cols.iter().map(|&c| row.normal_text(c)).collect();
            let entries: Box<dyn Iterator<Item = &ViewEntry>> = match key {
                Err(_) => Box::new(map.values().flatten()),
                Ok(key) => match key.into_iter().collect::<Option<Vec<String>>>() {
                    Some(key) => Box::new(map.get(&key).into_iter().flatten()),
                    // `IN` with a NULL on its left side is never true.
                    None => continue,
                },
            };
            for entry in entries {
                let rest = cx
                    .views
                    .get(&entry.shape)
                    .and_then(|v| v.attachments.get(entry.attachment))
                    .map(|a| a.rest.as_ref());
                match rest {
                    Some(Some(rest)) if !cx.may_hold(entry.shape, rest, row) => {}
                    _ => {
                        out.may.insert(entry.shape);
                    }
                }
            }
        }
    }
}

/// Applies `f` to the node below `map[key]`, dropping the entry when its node is left empty.
fn prune<K: std::hash::Hash + Eq + Clone>(
    map: &mut FxHashMap<K, Node>,
    key: &K,
    f: impl FnOnce(&mut Node),
) {
    if let Some(node) = map.get_mut(key) {
        f(node);
        if node.is_empty() {
            map.remove(key);
        }
    }
}

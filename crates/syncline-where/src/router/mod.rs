//! The shape router: which shapes of a table a change affects, found through indexes whose
//! cost does not grow with the number of shapes.
//!
//! Indexed: `col = c` (hash), `col IN (c, ...)`, `arr @> c`, `c <@ arr`, `c = ANY(arr)`
//! (containment), ranges `<`, `<=`, `>`, `>=`, BETWEEN (interval stabbing), `col LIKE 'p%'`
//! (prefix lookups), `cols IN (SELECT ...)` (hash, by the tuples of each shape's own value set,
//! kept up to date by [`Router::view_insert`] and [`Router::view_remove`]), and AND/OR of
//! these: in `a AND b` the best access is indexed and the rest is planned again one level down,
//! an OR is indexed when all its arms are. Everything else is evaluated per shape, subqueries
//! by the shape's value sets (`NOT IN` included; a miss there may be NULL, which the router
//! cannot know, so it may be anything). An update affects a shape when its old or its new row
//! matches; a value that cannot be decoded or an evaluation error counts as a match (safe
//! over-inclusion), unless the clause is certainly not true without it, a conjunct false say
//! (see [`crate::eval::eval_bool_for_routing`]).

mod hash;
mod key;
mod node;
mod plan;
mod range;
mod shape_set;
mod views;

use std::collections::HashMap;

use syncline_core::relation::RelationDesc;
use syncline_core::tuple::Value;

use crate::eval::{Row, RowTypes};
use crate::expr::Expr;
use crate::subquery::normal_text;
use crate::Where;
use hash::{FxHashMap, FxHashSet};
use node::{Collect, Found, Node};
use views::{ShapeViews, ViewEntry};

/// The caller's identifier of a shape.
pub type ShapeId = u64;

/// A row change of the router's table, column values in relation order.
#[derive(Debug, Clone, Copy)]
pub enum Change<'a> {
    /// A new row.
    Insert(&'a [Value]),
    /// A changed row: old (replica identity full) and new values.
    Update {
        /// Values before.
        old: &'a [Value],
        /// Values after (unchanged TOAST filled in from `old` by the caller).
        new: &'a [Value],
    },
    /// A removed row.
    Delete(&'a [Value]),
}

impl<'a> Change<'a> {
    fn rows(&self) -> Vec<&'a [Value]> {
        match *self {
            Change::Insert(new) => vec![new],
            Change::Update { old, new } => vec![old, new],
            Change::Delete(old) => vec![old],
        }
    }
}

/// The shapes of one table, indexed by their where clauses.
pub struct Router {
    types: RowTypes,
    root: Node,
    shapes: HashMap<ShapeId, Option<Where>>,
    /// The value sets of the shapes with subqueries.
    views: FxHashMap<ShapeId, ShapeViews>,
    /// Shapes whose clause has no OR: only these can be certain matches. In `a = 1 OR b`
    /// matched through `a`, `b` still decides whether evaluating the clause fails (a value that
    /// does not decode), which would exclude the row.
    without_or: FxHashSet<ShapeId>,
}

impl Router {
    /// An empty router for `relation`.
    pub fn new(relation: &RelationDesc) -> Router {
        Router {
            types: RowTypes::of(relation),
            root: Node::default(),
            shapes: HashMap::new(),
            views: FxHashMap::default(),
            without_or: FxHashSet::default(),
        }
    }

    /// Adds a shape; `None` is a shape without a where clause (every row). Replaces a shape
    /// already added under `id`. A clause with subqueries starts with empty value sets: fill
    /// them with [`Router::view_insert`].
    pub fn add(&mut self, id: ShapeId, filter: Option<&Where>) {
        self.remove(id);
        let mut attachments = Vec::new();
        self.root.insert(
            id,
            filter.map(|w| w.expr().clone()).into_iter().collect(),
            &mut Vec::new(),
            &mut attachments,
        );
        if let Some(w) = filter {
            if w.has_subqueries() {
                let types = w.subqueries().iter().map(|s| s.types()).collect();
                self.views
                    .insert(id, ShapeViews::new(w.expr(), types, attachments));
            }
        }
        if filter.is_none_or(|w| !has_or(w.expr())) {
            self.without_or.insert(id);
        }
        self.shapes.insert(id, filter.cloned());
    }

    /// Removes a shape (and its value sets); false if it was not there.
    pub fn remove(&mut self, id: ShapeId) -> bool {
        if let Some(views) = self.views.remove(&id) {
            for (attachment, a) in views.attachments.iter().enumerate() {
                let entry = ViewEntry {
                    shape: id,
                    attachment,
                };
                for key in &views.subs[a.subquery].set {
                    self.root.view_remove(&a.path, &a.cols, key, entry);
                }
            }
        }
        self.without_or.remove(&id);
        match self.shapes.remove(&id) {
            Some(filter) => {
                self.root
                    .remove(id, filter.map(|w| w.expr().clone()).into_iter().collect());
                true
            }
            None => false,
        }
    }

    /// The value set of shape `id` for subquery `subquery` (an index into
    /// [`Where::subqueries`]) gained the tuple `values` (Postgres text of each select-list
    /// column, normalized as [`crate::Subquery::normalize`] does). A tuple with a NULL cannot
    /// be given: it never makes `IN` true, and the router takes any `NOT IN` miss as a possible
    /// match. Unknown shapes and subqueries are ignored.
    pub fn view_insert(&mut self, id: ShapeId, subquery: usize, values: &[&str]) {
        let Some(views) = self.views.get_mut(&id) else {
            return;
        };
        let Some(sub) = views.subs.get_mut(subquery) else {
            return;
        };
        let key = normalized(&sub.types, values);
        if !sub.set.insert(key.clone()) {
            return;
        }
        for (attachment, a) in views.attachments.iter().enumerate() {
            if a.subquery == subquery {
                let entry = ViewEntry {
                    shape: id,
                    attachment,
                };
                self.root.view_insert(&a.path, &a.cols, key.clone(), entry);
            }
        }
    }

    /// The value set of shape `id` for subquery `subquery` lost the tuple `values`.
    pub fn view_remove(&mut self, id: ShapeId, subquery: usize, values: &[&str]) {
        let Some(views) = self.views.get_mut(&id) else {
            return;
        };
        let Some(sub) = views.subs.get_mut(subquery) else {
            return;
        };
        let key = normalized(&sub.types, values);
        if !sub.set.remove(&key) {
            return;
        }
        for (attachment, a) in views.attachments.iter().enumerate() {
            if a.subquery == subquery {
                let entry = ViewEntry {
                    shape: id,
                    attachment,
                };
                self.root.view_remove(&a.path, &a.cols, &key, entry);
            }
        }
    }

    /// Number of shapes.
    pub fn len(&self) -> usize {
        self.shapes.len()
    }

    /// Shapes (or OR arms of shapes) that no index covers: evaluated on every change.
    pub fn unindexed(&self) -> usize {
        self.root.unindexed()
    }

    /// Whether there are no shapes.
    pub fn is_empty(&self) -> bool {
        self.shapes.is_empty()
    }

    /// The shapes `change` affects, sorted. Each row is decoded once, whatever the number of
    /// shapes.
    pub fn affected(&self, change: &Change) -> Vec<ShapeId> {
        sorted(self.found(change, false).may)
    }

    /// [`Router::affected`], each shape with whether its clause certainly holds for the
    /// change's row (evaluating it would give true), so that the caller need not evaluate it:
    /// only for an insert or a delete (one row), when the shape has no clause, or a clause
    /// without OR found through equality lookups of the row's decoded values alone (`col = c`,
    /// `col IN (...)`, and ANDs of those).
    pub fn affected_certain(&self, change: &Change) -> Vec<(ShapeId, bool)> {
        let Found { may, certain } = self.found(change, true);
        sorted(may)
            .into_iter()
            .map(|id| (id, certain.contains(&id) && self.without_or.contains(&id)))
            .collect()
    }

    /// The shapes each row of `change` may match; with `certain`, for a change of one row,
    /// also those it certainly matches.
    fn found(&self, change: &Change, certain: bool) -> Found {
        let rows = change.rows();
        let exact = certain && rows.len() == 1;
        let mut out = Found::default();
        let cx = Collect { views: &self.views };
        for values in rows {
            let row = Row::new(&self.types, values);
            self.root.collect(&row, &mut out, exact, &cx);
        }
        out
    }

    /// The same answer as [`Router::affected`], by evaluating every shape's clause: the
    /// baseline the index is tested and measured against.
    pub fn affected_by_scan(&self, change: &Change) -> Vec<ShapeId> {
        let mut out = FxHashSet::default();
        let cx = Collect { views: &self.views };
        for values in change.rows() {
            let row = Row::new(&self.types, values);
            for (id, expr) in &self.shapes {
                let hit = match expr {
                    None => true,
                    Some(e) => cx.may_hold(*id, e.expr(), &row),
                };
                if hit {
                    out.insert(*id);
                }
            }
        }
        sorted(out)
    }
}

/// Whether `expr` has an OR anywhere.
fn has_or(expr: &Expr) -> bool {
    let mut found = false;
    expr.visit(&mut |e| found |= matches!(e, Expr::Or(_)));
    found
}

/// The normal texts of a tuple given as Postgres text.
fn normalized(types: &[Option<crate::types::Type>], values: &[&str]) -> Vec<String> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| normal_text(types.get(i).and_then(Option::as_ref), v))
        .collect()
}

fn sorted(set: FxHashSet<ShapeId>) -> Vec<ShapeId> {
    let mut v: Vec<ShapeId> = set.into_iter().collect();
    v.sort_unstable();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use syncline_core::relation::{ColumnDesc, PgType, ReplicaIdentity, TypeKind};

    fn relation() -> RelationDesc {
        let column = |name: &str, ty: &str, kind: TypeKind| ColumnDesc {
            name: name.into(),
            pg_type: PgType {
                oid: 0,
                name: ty.into(),
                kind,
            },
            type_mod: -1,
            not_null: false,
            pk_index: None,
            array_dims: 0,
        };
        let int4 = PgType {
            oid: 23,
            name: "int4".into(),
            kind: TypeKind::Base,
        };
        let columns = vec![
            column("id", "int4", TypeKind::Base),
            column("name", "text", TypeKind::Base),
            column("tags", "_int4", TypeKind::Array(Box::new(int4))),
        ];
        RelationDesc {
            oid: 1,
            schema: "public".into(),
            name: "t".into(),
            columns,
            replica_identity: ReplicaIdentity::Full,
        }
    }

    fn row(id: &str, name: &str, tags: &str) -> Vec<Value> {
        [id, name, tags]
            .iter()
            .map(|v| Value::Text(Bytes::from(v.to_string())))
            .collect()
    }

    /// A router of `relation` with shape `i` for `clauses[i]`.
    fn router_of(relation: &RelationDesc, clauses: &[&str]) -> Router {
        let mut router = Router::new(relation);
        for (i, clause) in clauses.iter().enumerate() {
            let w = Where::new(clause, relation, &[]).unwrap();
            router.add(i as ShapeId, Some(&w));
        }
        router
    }

    #[test]
    fn indexes_the_indexable_forms() {
        let relation = relation();
        let clauses = [
            "id = 1",
            "2 = id",
            "id IN (3, 4)",
            "5 = ANY(tags)",
            "tags @> '{6,7}'",
            "id BETWEEN 10 AND 20",
            "id > 100 AND id <= 200",
            "name LIKE 'ab%'",
            "(id = 1 OR name LIKE 'x%') AND name <> 'y'",
            "id = 1 AND (name = 'a' OR name = 'b')",
        ];
        let mut router = router_of(&relation, &clauses);
        assert_eq!(router.unindexed(), 0);
        let new = row("1", "abc", "{5,6,7}");
        assert_eq!(router.affected(&Change::Insert(&new)), vec![0, 3, 4, 7, 8]);
        let old = row("150", "xyz", "{}");
        assert_eq!(
            router.affected(&Change::Update {
                old: &old,
                new: &new
            }),
            vec![0, 3, 4, 6, 7, 8]
        );
        router.add(99, Some(&Where::new("id <> 5", &relation, &[]).unwrap()));
        assert_eq!(router.unindexed(), 1);
        assert!(router.remove(99) && router.remove(0) && !router.remove(0));
        assert_eq!(router.affected(&Change::Delete(&new)), vec![3, 4, 7, 8]);
    }

    #[test]
    fn only_equality_lookups_without_or_are_certain() {
        let relation = relation();
        let clauses = [
            "name = 'a'",
            "name = 'a' AND id IN (1, 2)",
            "name = 'a' AND id > 0",
            "name = 'a' OR id = 7",
            "name LIKE 'a%'",
        ];
        let mut router = router_of(&relation, &clauses);
        router.add(9, None);
        let new = row("1", "a", "{}");
        let want = vec![
            (0, true),
            (1, true),
            (2, false),
            (3, false),
            (4, false),
            (9, true),
        ];
        assert_eq!(router.affected_certain(&Change::Insert(&new)), want);
        assert_eq!(router.affected_certain(&Change::Delete(&new)), want);
        let undecodable = row("not a number", "a", "{}");
        assert_eq!(
            router.affected_certain(&Change::Insert(&undecodable)),
            vec![
                (0, true),
                (1, false),
                (2, false),
                (3, false),
                (4, false),
                (9, true)
            ]
        );
        let update = router.affected_certain(&Change::Update {
            old: &new,
            new: &new,
        });
        assert!(update.iter().all(|&(_, certain)| !certain), "{update:?}");
    }
}

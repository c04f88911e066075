//! Subquery shapes in the pipeline.
//!
//! A [`Dep`] is one distinct subquery (`SELECT c FROM t WHERE w`), kept from the replication
//! stream and shared by every shape that uses it: the multiset of select-list tuples of the rows
//! of `t` that satisfy `w`. After each transaction it reports the tuples that appeared or
//! disappeared. When `w` has subqueries of its own (nesting), the dependency keeps every row of
//! `t` and the value sets of its own dependencies, and judges its rows again when those change.
//!
//! A [`Subq`] is one subquery shape's own state: per subquery, the set of tuples its log
//! reflects ([`ViewSet`]), and the transactions and moves waiting while it cannot apply them (its
//! snapshot runs, a move-in query runs, or it was restored and waits for its subqueries).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet, VecDeque};

use syncline_core::{PgSnapshot, Value};
use syncline_where::{Router, Row, RowTypes, ShapeId, Subquery, Views, Where};

use crate::shapes::{MoveInRows, ViewTuple};

/// A queued subquery shape drops its transactions past this many while a move-in runs (Electric's
/// `ELECTRIC_SUBQUERY_BUFFER_MAX_TRANSACTIONS`): the shape is removed and clients start again.
pub const QUEUED_TXNS_MAX: usize = 1000;

/// Where a dependency is: its table's OID and its id in that table's dependency router.
pub type DepKey = (u32, ShapeId);

/// The text of a value as a tuple element (`None`: NULL).
fn text(value: &Value) -> Option<String> {
    value
        .as_text()
        .map(|t| String::from_utf8_lossy(t).into_owned())
}

/// A tuple in the form value sets compare (each value's normal text: `true` for `t`, `1.5` for
/// `1.50`, …).
pub fn normalized(subquery: &Subquery, tuple: &ViewTuple) -> ViewTuple {
    let values: Vec<Option<&str>> = tuple.iter().map(Option::as_deref).collect();
    subquery.normalize(&values)
}

/// The key a non-null tuple is found by: the text itself for one column (so a lookup by `&str`
/// allocates nothing), each text length-prefixed for several.
fn tuple_key<S: AsRef<str>>(values: &[S]) -> Cow<'_, str> {
    match values {
        [one] => Cow::Borrowed(one.as_ref()),
        many => Cow::Owned(
            many.iter()
                .map(|v| format!("{}:{}", v.as_ref().len(), v.as_ref()))
                .collect(),
        ),
    }
}

/// One distinct subquery's tuples, kept from the stream; see the module documentation.
#[derive(Debug)]
pub struct Dep {
    /// The subquery's canonical SQL (its identity).
    pub sql: String,
    subquery: Subquery,
    counts: HashMap<ViewTuple, u32>,
    phase: DepPhase,
    /// Tuples whose count changed in the open transaction, with whether they were present
    /// before it.
    touched: HashMap<ViewTuple, bool>,
    /// Count changes of the open transaction, undone if the stream loses it.
    undo: Vec<(ViewTuple, i64)>,
    /// The subquery shapes that use it, by table OID and slot id.
    pub dependents: HashSet<(u32, ShapeId)>,
    /// The nested dependencies that use it, with the index of the subquery it is in theirs.
    pub dep_dependents: HashSet<(DepKey, usize)>,
    /// With nesting: its own dependencies' value sets and every row of its table.
    nested: Option<Nested>,
}

/// What a dependency whose where clause has subqueries keeps.
#[derive(Debug, Default)]
struct Nested {
    /// Its dependencies, by the index of their subquery in its where clause.
    deps: Vec<DepKey>,
    /// Their value sets, as of the last commit.
    views: Vec<ViewSet>,
    /// Every row of the table (by key): its values in the table's layout, and the tuple it
    /// contributes when it satisfies the where clause.
    rows: HashMap<ViewTuple, (Vec<Value>, Option<ViewTuple>)>,
    /// Positions of the table's key columns.
    key: Vec<usize>,
}

/// Whether a dependency knows its tuples yet.
#[derive(Debug)]
enum DepPhase {
    /// Its first rows are being read; changes wait, with their transaction.
    Seeding(Vec<WaitingChange>),
    /// Kept from the stream; transactions the seeding snapshot saw are skipped.
    Live(Option<PgSnapshot>),
}

#[derive(Debug)]
struct WaitingChange {
    xid: u32,
    lsn: u64,
    old: Option<Vec<Value>>,
    new: Option<Vec<Value>>,
}

/// A tuple that appeared (`true`) in or disappeared (`false`) from a dependency.
pub type Delta = (ViewTuple, bool);

impl Dep {
    /// A dependency keeping `subquery`'s tuples, waiting to be seeded; `deps` are the
    /// dependencies of its own subqueries (nesting), if it has any.
    pub fn new(subquery: Subquery, deps: Vec<DepKey>) -> Dep {
        let nested = (!deps.is_empty()).then(|| {
            let relation = &subquery.relation;
            Nested {
                views: vec![ViewSet::default(); deps.len()],
                deps,
                rows: HashMap::new(),
                key: relation
                    .primary_key()
                    .iter()
                    .filter_map(|c| relation.column(&c.name).map(|(i, _)| i))
                    .collect(),
            }
        });
        Dep {
            sql: subquery.sql.clone(),
            nested,
            dep_dependents: HashSet::new(),
            subquery,
            counts: HashMap::new(),
            phase: DepPhase::Seeding(Vec::new()),
            touched: HashMap::new(),
            undo: Vec::new(),
            dependents: HashSet::new(),
        }
    }

    /// Its where clause (what routes its table's changes to it).
    pub fn filter(&self) -> Option<&Where> {
        self.subquery.filter.as_ref()
    }

    /// Whether its where clause has subqueries: it is then seeded with every row of its table
    /// ([`Dep::seed_sql`]) and needs every change of it.
    pub fn is_nested(&self) -> bool {
        self.nested.is_some()
    }

    /// What seeds it: its own SQL, or with nesting every row of its table.
    pub fn seed_sql(&self) -> String {
        crate::subquery::seed_sql(&self.subquery, self.is_nested())
    }

    /// The columns of its table it reads, by name (every column with nesting: it keeps rows).
    pub fn needed_columns(&self) -> Vec<String> {
        let relation = &self.subquery.relation;
        if self.is_nested() {
            return relation.columns.iter().map(|c| c.name.clone()).collect();
        }
        let filter_columns = self.subquery.filter.iter().flat_map(|f| f.columns());
        self.subquery
            .columns
            .iter()
            .copied()
            .chain(filter_columns)
            .map(|i| relation.columns[i].name.clone())
            .collect()
    }

    /// Its nested dependencies (empty without nesting).
    pub fn nested_deps(&self) -> &[DepKey] {
        self.nested.as_ref().map_or(&[], |n| &n.deps)
    }

    /// Whether it knows its tuples.
    pub fn is_live(&self) -> bool {
        matches!(self.phase, DepPhase::Live(_))
    }

    /// Its tuples (each once).
    pub fn tuples(&self) -> impl Iterator<Item = &ViewTuple> {
        self.counts.keys()
    }

    /// A change of its table in transaction `xid` (committing at `lsn`); rows in the table's
    /// layout.
    pub fn apply(
        &mut self,
        types: &RowTypes,
        xid: u32,
        lsn: u64,
        old: Option<&[Value]>,
        new: Option<&[Value]>,
    ) {
        match &mut self.phase {
            DepPhase::Seeding(waiting) => {
                waiting.push(WaitingChange {
                    xid,
                    lsn,
                    old: old.map(<[Value]>::to_vec),
                    new: new.map(<[Value]>::to_vec),
                });
                return;
            }
            DepPhase::Live(seen) if seen.as_ref().is_some_and(|s| s.is_visible(xid)) => return,
            DepPhase::Live(_) => {}
        }
        if self.nested.is_some() {
            self.apply_nested(types, old, new);
            return;
        }
        let tuple = |row: Option<&[Value]>| row.and_then(|v| self.contribution(types, v));
        let (was, is) = (tuple(old), tuple(new));
        if was == is {
            return;
        }
        if let Some(t) = was {
            self.count(t, -1);
        }
        if let Some(t) = is {
            self.count(t, 1);
        }
    }

    /// The tuple a row contributes, if it satisfies the where clause (with nesting, judged
    /// against the nested value sets).
    fn contribution(&self, types: &RowTypes, values: &[Value]) -> Option<ViewTuple> {
        let row = Row::new(types, values);
        let included = match (&self.subquery.filter, &self.nested) {
            (None, _) => true,
            (Some(f), Some(n)) => f.includes_in(&row, &SetViews(&n.views)),
            (Some(f), None) => f.includes(&row),
        };
        included.then(|| {
            let texts: ViewTuple = self
                .subquery
                .columns
                .iter()
                .map(|&i| text(&values[i]))
                .collect();
            normalized(&self.subquery, &texts)
        })
    }

    fn row_key(nested: &Nested, values: &[Value]) -> ViewTuple {
        nested.key.iter().map(|&i| text(&values[i])).collect()
    }

    fn apply_nested(&mut self, types: &RowTypes, old: Option<&[Value]>, new: Option<&[Value]>) {
        let nested = self.nested.as_mut().expect("nested");
        if let Some(old) = old {
            let key = Self::row_key(nested, old);
            if let Some((_, Some(t))) = nested.rows.remove(&key) {
                self.count(t, -1);
            }
        }
        if let Some(new) = new {
            let contribution = self.contribution(types, new);
            let nested = self.nested.as_mut().expect("nested");
            let key = Self::row_key(nested, new);
            nested
                .rows
                .insert(key, (new.to_vec(), contribution.clone()));
            if let Some(t) = contribution {
                self.count(t, 1);
            }
        }
    }

    /// One of its nested dependencies (subquery `sub` of its where clause) changed: its rows
    /// are judged again against the new set.
    pub fn nested_changed(&mut self, types: &RowTypes, sub: usize, deltas: &[Delta]) {
        let Some(nested) = self.nested.as_mut() else {
            return;
        };
        for (tuple, present) in deltas {
            if *present {
                nested.views[sub].insert(tuple.clone());
            } else {
                nested.views[sub].remove(tuple);
            }
        }
        let keys: Vec<ViewTuple> = nested.rows.keys().cloned().collect();
        for key in keys {
            let (values, before) = self.nested.as_ref().expect("nested").rows[&key].clone();
            let after = self.contribution(types, &values);
            if after == before {
                continue;
            }
            if let Some(t) = before {
                self.count(t, -1);
            }
            if let Some(t) = after.clone() {
                self.count(t, 1);
            }
            if let Some(row) = self.nested.as_mut().expect("nested").rows.get_mut(&key) {
                row.1 = after;
            }
        }
    }

    fn count(&mut self, tuple: ViewTuple, by: i64) {
        let before = self.counts.get(&tuple).copied().unwrap_or(0);
        self.touched.entry(tuple.clone()).or_insert(before > 0);
        let after = i64::from(before) + by;
        assert!(after >= 0, "a subquery tuple counted below zero");
        match u32::try_from(after) {
            Ok(0) => {
                self.counts.remove(&tuple);
            }
            Ok(n) => {
                self.counts.insert(tuple.clone(), n);
            }
            Err(_) => unreachable!("counts fit in u32"),
        }
        self.undo.push((tuple, by));
    }

    /// The open transaction committed: the tuples it made appear or disappear.
    pub fn commit(&mut self) -> Vec<Delta> {
        self.undo.clear();
        self.touched
            .drain()
            .filter_map(|(tuple, before)| {
                let now = self.counts.contains_key(&tuple);
                (now != before).then_some((tuple, now))
            })
            .collect()
    }

    /// The stream lost the open transaction `xid`: its changes are undone (it comes again).
    pub fn interrupted(&mut self, xid: u32) {
        if let DepPhase::Seeding(waiting) = &mut self.phase {
            waiting.retain(|c| c.xid != xid);
        }
        for (tuple, by) in std::mem::take(&mut self.undo).into_iter().rev() {
            let count = self.counts.entry(tuple.clone()).or_insert(0);
            let restored = i64::from(*count) - by;
            *count = u32::try_from(restored).expect("undo restores a count");
            if *count == 0 {
                self.counts.remove(&tuple);
            }
        }
        self.touched.clear();
    }

    /// Its rows as of `seen` (each row's tuple, duplicates counted): the changes that waited
    /// are applied unless `seen` saw them. Returns, per waiting transaction the snapshot did
    /// not see (in commit order), its xid, commit LSN and the tuples it made appear or
    /// disappear. `open` is the transaction in progress, whose changes stay pending.
    ///
    /// With nesting, `rows` are every row of the table (all columns, as [`Dep::seed_sql`]
    /// selects them) and `views` its nested dependencies' sets.
    pub fn seed(
        &mut self,
        types: &RowTypes,
        rows: Vec<ViewTuple>,
        views: Vec<ViewSet>,
        seen: PgSnapshot,
        open: Option<u32>,
    ) -> Vec<(u32, u64, Vec<Delta>)> {
        let DepPhase::Seeding(waiting) =
            std::mem::replace(&mut self.phase, DepPhase::Live(Some(seen)))
        else {
            return Vec::new();
        };
        if let Some(nested) = self.nested.as_mut() {
            nested.views = views;
            for row in rows {
                let values: Vec<Value> = row
                    .into_iter()
                    .map(|t| t.map_or(Value::Null, |t| Value::Text(t.into())))
                    .collect();
                let contribution = self.contribution(types, &values);
                let nested = self.nested.as_mut().expect("nested");
                let key = Self::row_key(nested, &values);
                nested.rows.insert(key, (values, contribution.clone()));
                if let Some(t) = contribution {
                    *self.counts.entry(t).or_insert(0) += 1;
                }
            }
        } else {
            for row in rows {
                *self
                    .counts
                    .entry(normalized(&self.subquery, &row))
                    .or_insert(0) += 1;
            }
        }
        let mut out: Vec<(u32, u64, Vec<Delta>)> = Vec::new();
        let mut current: Option<(u32, u64)> = None;
        for change in waiting {
            if current.is_some_and(|(xid, _)| xid != change.xid) {
                let (xid, lsn) = current.take().expect("checked");
                out.push((xid, lsn, self.commit()));
            }
            current = Some((change.xid, change.lsn));
            self.apply(
                types,
                change.xid,
                change.lsn,
                change.old.as_deref(),
                change.new.as_deref(),
            );
        }
        if let Some((xid, lsn)) = current {
            if Some(xid) != open {
                out.push((xid, lsn, self.commit()));
            }
        }
        out.retain(|(_, _, deltas)| !deltas.is_empty());
        out
    }
}

/// The tuples of one subquery a shape's log reflects.
#[derive(Debug, Clone, Default)]
pub struct ViewSet {
    /// Non-null tuples by their key.
    tuples: HashMap<String, ViewTuple>,
    /// Tuples with a NULL in them (they never equal anything, but make `NOT IN` NULL).
    with_null: HashSet<ViewTuple>,
}

impl ViewSet {
    /// A set holding `tuples`.
    pub fn of(tuples: impl IntoIterator<Item = ViewTuple>) -> ViewSet {
        let mut set = ViewSet::default();
        for t in tuples {
            set.insert(t);
        }
        set
    }

    /// Whether it holds `tuple`.
    pub fn contains(&self, tuple: &ViewTuple) -> bool {
        match tuple
            .iter()
            .map(Option::as_deref)
            .collect::<Option<Vec<&str>>>()
        {
            Some(values) => self.tuples.contains_key(tuple_key(&values).as_ref()),
            None => self.with_null.contains(tuple),
        }
    }

    /// Adds `tuple`; whether it was new.
    pub fn insert(&mut self, tuple: ViewTuple) -> bool {
        match tuple
            .iter()
            .map(Option::as_deref)
            .collect::<Option<Vec<&str>>>()
        {
            Some(values) => {
                let key = tuple_key(&values).into_owned();
                self.tuples.insert(key, tuple).is_none()
            }
            None => self.with_null.insert(tuple),
        }
    }

    /// Removes `tuple`; whether it was there.
    pub fn remove(&mut self, tuple: &ViewTuple) -> bool {
        match tuple
            .iter()
            .map(Option::as_deref)
            .collect::<Option<Vec<&str>>>()
        {
            Some(values) => self.tuples.remove(tuple_key(&values).as_ref()).is_some(),
            None => self.with_null.remove(tuple),
        }
    }

    /// Every tuple.
    pub fn iter(&self) -> impl Iterator<Item = &ViewTuple> {
        self.tuples.values().chain(self.with_null.iter())
    }

    /// How many tuples it holds.
    pub fn len(&self) -> usize {
        self.tuples.len() + self.with_null.len()
    }
}

/// A shape's value sets, as the where clause's evaluation sees them.
pub struct SetViews<'a>(pub &'a [ViewSet]);

impl Views for SetViews<'_> {
    fn contains(&self, subquery: usize, values: &[&str]) -> bool {
        self.0[subquery]
            .tuples
            .contains_key(tuple_key(values).as_ref())
    }

    fn contains_null(&self, subquery: usize) -> bool {
        !self.0[subquery].with_null.is_empty()
    }

    fn is_empty(&self, subquery: usize) -> bool {
        self.0[subquery].len() == 0
    }
}

/// A committed transaction's changes to a subquery shape's table, waiting.
#[derive(Debug)]
pub struct QueuedTxn {
    /// Its xid.
    pub xid: u32,
    /// Its commit LSN.
    pub lsn: u64,
    /// Its changes, in order.
    pub changes: Vec<QueuedChange>,
}

/// A change waiting: its OP offset, the old and new row (table layout).
pub type QueuedChange = (u64, Option<Vec<Value>>, Option<Vec<Value>>);

/// What waits in a subquery shape's queue, in commit order.
#[derive(Debug)]
pub enum Event {
    /// A transaction on the shape's table.
    Txn(QueuedTxn),
    /// Tuples of its subqueries that appeared or disappeared in transaction `xid`
    /// (committed at `lsn`): (subquery index, tuple, present now).
    Deltas {
        /// The transaction.
        xid: u32,
        /// Its commit LSN.
        lsn: u64,
        /// The changes.
        deltas: Vec<(usize, ViewTuple, bool)>,
    },
}

impl Event {
    /// The commit LSN of the transaction behind it.
    pub fn lsn(&self) -> u64 {
        match self {
            Event::Txn(t) => t.lsn,
            Event::Deltas { lsn, .. } => *lsn,
        }
    }
}

/// What a subquery shape can do with what arrives.
#[derive(Debug)]
pub enum Mode {
    /// Its value sets are not known yet (its snapshot runs, or it was restored and its
    /// subqueries are being read): everything waits.
    Waiting,
    /// Changes are applied as they arrive.
    Steady,
    /// A move-in query runs: transactions wait for its rows to be spliced in.
    MovingIn(MoveIn),
}

/// A move-in in flight.
#[derive(Debug)]
pub struct MoveIn {
    /// Which move-in of the shape.
    pub id: u64,
    /// The value-set changes it makes: (subquery, tuple, present after).
    pub changes: Vec<(usize, ViewTuple, bool)>,
    /// The dependency transactions behind it.
    pub txids: Vec<u32>,
    /// The commit LSN of the last of them (0 for a restored shape catching up).
    pub lsn: u64,
    /// The query's result, once it came.
    pub rows: Option<MoveInRows>,
}

/// A tuple's texts, if none is NULL.
pub(super) fn texts(tuple: &ViewTuple) -> Option<Vec<&str>> {
    tuple.iter().map(Option::as_deref).collect()
}

/// A subquery shape's state in the pipeline; see the module documentation.
#[derive(Debug)]
pub struct Subq {
    /// Per subquery (index into `Where::subqueries`), its dependency.
    pub deps: Vec<DepKey>,
    /// Per subquery, whether the where clause uses it under NOT (a tuple joining it takes rows
    /// out of the shape).
    pub negated: Vec<bool>,
    /// Per subquery, the tuples the log reflects.
    pub views: Vec<ViewSet>,
    /// What it can do now.
    pub mode: Mode,
    /// Transactions and moves waiting, in commit order.
    pub queue: VecDeque<Event>,
    /// The transaction in progress while the shape queues: its changes so far.
    pub open: Option<QueuedTxn>,
    /// The next move-in's id.
    pub next_move_in: u64,
    /// What its slot hashes start with.
    pub prefix: String,
    /// Restored from disk: its value sets are from its view file, and it catches up with its
    /// dependencies once they are read.
    pub restored: bool,
}

impl Subq {
    /// The state of a shape whose value sets are not known yet.
    pub fn waiting(deps: Vec<DepKey>, negated: Vec<bool>, prefix: String) -> Subq {
        let views = vec![ViewSet::default(); deps.len()];
        Subq {
            deps,
            negated,
            views,
            mode: Mode::Waiting,
            queue: VecDeque::new(),
            open: None,
            next_move_in: 1,
            prefix,
            restored: false,
        }
    }

    /// Gives `router`, which holds shape `id`, the shape's value sets: every subquery's but
    /// those under NOT (their tuples take rows out of the shape, so they route none in).
    pub fn route_views(&self, router: &mut Router, id: ShapeId) {
        for (i, view) in self.views.iter().enumerate() {
            if self.negated[i] {
                continue;
            }
            for t in view.iter() {
                if let Some(values) = texts(t) {
                    router.view_insert(id, i, &values);
                }
            }
        }
    }

    /// Whether what arrives must wait rather than be applied now.
    pub fn queues(&self) -> bool {
        !matches!(self.mode, Mode::Steady) || !self.queue.is_empty() || self.open.is_some()
    }

    /// Queues a change of transaction `xid` (committing at `lsn`).
    pub fn queue_change(
        &mut self,
        xid: u32,
        lsn: u64,
        op: u64,
        old: Option<&[Value]>,
        new: Option<&[Value]>,
    ) {
        let open = self.open.get_or_insert_with(|| QueuedTxn {
            xid,
            lsn,
            changes: Vec::new(),
        });
        assert_eq!(open.xid, xid, "changes of one transaction at a time");
        open.changes
            .push((op, old.map(<[Value]>::to_vec), new.map(<[Value]>::to_vec)));
    }

    /// How many transactions wait.
    pub fn queued_txns(&self) -> usize {
        self.queue
            .iter()
            .filter(|e| matches!(e, Event::Txn(_)))
            .count()
    }

    /// Queues deltas of transaction `xid` in commit order, after the transaction's own changes
    /// (as a shape applying them at once does: the changes as they come, the moves at commit).
    pub fn queue_deltas(&mut self, xid: u32, lsn: u64, deltas: Vec<(usize, ViewTuple, bool)>) {
        let at = self
            .queue
            .iter()
            .position(|e| e.lsn() > lsn)
            .unwrap_or(self.queue.len());
        self.queue.insert(at, Event::Deltas { xid, lsn, deltas });
    }
}

#[cfg(test)]
mod tests {
    use syncline_core::relation::{ColumnDesc, PgType, RelationDesc, ReplicaIdentity, TypeKind};
    use syncline_where::TableRef;

    use super::*;

    fn relation(name: &str, oid: u32, columns: &[(&str, &str)]) -> RelationDesc {
        RelationDesc {
            oid,
            schema: "public".into(),
            name: name.into(),
            columns: columns
                .iter()
                .enumerate()
                .map(|(i, (column, ty))| ColumnDesc {
                    name: (*column).into(),
                    pg_type: PgType {
                        oid: 0,
                        name: (*ty).into(),
                        kind: TypeKind::Base,
                    },
                    type_mod: -1,
                    not_null: false,
                    pk_index: (i == 0).then_some(0),
                    array_dims: 0,
                })
                .collect(),
            replica_identity: ReplicaIdentity::Full,
        }
    }

    fn parent() -> RelationDesc {
        relation(
            "parent",
            1,
            &[("id", "int4"), ("active", "bool"), ("org_id", "int4")],
        )
    }

    fn org() -> RelationDesc {
        relation("org", 2, &[("id", "int4"), ("premium", "bool")])
    }

    /// The subqueries of `text` on a child table reading `parent` and `org`.
    fn subquery(text: &str) -> Subquery {
        let child = relation("child", 3, &[("id", "int4"), ("parent_id", "int4")]);
        let tables = |t: &TableRef| match t.name.as_str() {
            "parent" => Some(parent()),
            "org" => Some(org()),
            _ => None,
        };
        let w = Where::with_tables(text, &child, &[], &tables).expect(text);
        w.subqueries()[0].clone()
    }

    fn row(values: &[Option<&str>]) -> Vec<Value> {
        values
            .iter()
            .map(|v| v.map_or(Value::Null, |t| Value::Text(t.to_owned().into())))
            .collect()
    }

    fn tuple(v: &str) -> ViewTuple {
        vec![Some(v.to_owned())]
    }

    fn seen_nothing() -> PgSnapshot {
        "100:100:".parse().unwrap()
    }

    fn live(text: &str) -> (Dep, RowTypes) {
        let mut dep = Dep::new(subquery(text), Vec::new());
        let types = RowTypes::of(&parent());
        dep.seed(&types, Vec::new(), Vec::new(), seen_nothing(), None);
        (dep, types)
    }

    #[test]
    fn a_tuple_appears_and_disappears_when_its_count_crosses_zero() {
        let (mut dep, types) = live("parent_id IN (SELECT org_id FROM parent WHERE active)");
        let a = row(&[Some("1"), Some("t"), Some("7")]);
        let b = row(&[Some("2"), Some("t"), Some("7")]);
        dep.apply(&types, 200, 10, None, Some(&a));
        dep.apply(&types, 200, 10, None, Some(&b));
        assert_eq!(dep.commit(), vec![(tuple("7"), true)]);
        dep.apply(&types, 201, 20, Some(&a), None);
        assert_eq!(dep.commit(), vec![], "another row still gives 7");
        let b_off = row(&[Some("2"), Some("f"), Some("7")]);
        dep.apply(&types, 202, 30, Some(&b), Some(&b_off));
        assert_eq!(dep.commit(), vec![(tuple("7"), false)]);
    }

    #[test]
    fn an_in_and_out_in_one_transaction_cancel() {
        let (mut dep, types) = live("parent_id IN (SELECT id FROM parent WHERE active)");
        let on = row(&[Some("1"), Some("t"), None]);
        let off = row(&[Some("1"), Some("f"), None]);
        dep.apply(&types, 200, 10, None, Some(&on));
        dep.apply(&types, 200, 10, Some(&on), Some(&off));
        assert_eq!(dep.commit(), vec![]);
        // A primary-key change moves the tuple: the old one goes, the new one comes.
        dep.apply(&types, 201, 20, None, Some(&on));
        dep.commit();
        let moved = row(&[Some("2"), Some("t"), None]);
        dep.apply(&types, 202, 30, Some(&on), Some(&moved));
        let mut deltas = dep.commit();
        deltas.sort();
        assert_eq!(deltas, vec![(tuple("1"), false), (tuple("2"), true)]);
    }

    #[test]
    fn a_lost_transaction_is_undone_and_a_seed_skips_what_it_saw() {
        let (mut dep, types) = live("parent_id IN (SELECT id FROM parent WHERE active)");
        let on = row(&[Some("1"), Some("t"), None]);
        dep.apply(&types, 200, 10, None, Some(&on));
        dep.interrupted(200);
        assert_eq!(dep.commit(), vec![]);
        assert_eq!(dep.tuples().count(), 0);

        let mut seeding = Dep::new(
            subquery("parent_id IN (SELECT id FROM parent WHERE active)"),
            Vec::new(),
        );
        // Transaction 90 was seen by the seed (its row is in the seed's rows); 150 was not.
        seeding.apply(&types, 90, 5, None, Some(&on));
        let two = row(&[Some("2"), Some("t"), None]);
        seeding.apply(&types, 150, 6, None, Some(&two));
        let after = seeding.seed(
            &types,
            vec![tuple("1")],
            Vec::new(),
            "100:100:".parse().unwrap(),
            None,
        );
        assert_eq!(after, vec![(150, 6, vec![(tuple("2"), true)])]);
        let mut all: Vec<&ViewTuple> = seeding.tuples().collect();
        all.sort();
        assert_eq!(all, vec![&tuple("1"), &tuple("2")]);
    }

    #[test]
    fn a_nested_dependency_judges_its_rows_again_when_its_own_changes() {
        let sub = subquery(
            "parent_id IN (SELECT id FROM parent WHERE org_id IN (SELECT id FROM org WHERE premium))",
        );
        let mut dep = Dep::new(sub, vec![(2, 99)]);
        let types = RowTypes::of(&parent());
        let rows = vec![
            vec![
                Some("1".to_owned()),
                Some("t".to_owned()),
                Some("7".to_owned()),
            ],
            vec![
                Some("2".to_owned()),
                Some("t".to_owned()),
                Some("8".to_owned()),
            ],
        ];
        dep.seed(
            &types,
            rows,
            vec![ViewSet::of([tuple("7")])],
            seen_nothing(),
            None,
        );
        assert_eq!(dep.tuples().collect::<Vec<_>>(), vec![&tuple("1")]);
        dep.nested_changed(&types, 0, &[(tuple("8"), true), (tuple("7"), false)]);
        let mut deltas = dep.commit();
        deltas.sort();
        assert_eq!(deltas, vec![(tuple("1"), false), (tuple("2"), true)]);
        // A row moving to another org is judged against the sets as they are.
        let old = row(&[Some("2"), Some("t"), Some("8")]);
        let new = row(&[Some("2"), Some("t"), Some("7")]);
        dep.apply(&types, 300, 40, Some(&old), Some(&new));
        assert_eq!(dep.commit(), vec![(tuple("2"), false)]);
    }

    #[test]
    fn value_sets_compare_normal_texts_and_keep_nulls_apart() {
        let mut set = ViewSet::default();
        assert!(set.insert(vec![Some("1".into()), Some("a".into())]));
        assert!(!set.insert(vec![Some("1".into()), Some("a".into())]));
        assert!(set.insert(vec![None, Some("a".into())]));
        let views = SetViews(std::slice::from_ref(&set));
        assert!(views.contains(0, &["1", "a"]));
        assert!(
            !views.contains(0, &["1a", ""]),
            "tuples are not confused by joining"
        );
        assert!(views.contains_null(0));
        assert!(set.remove(&vec![None, Some("a".into())]));
        assert_eq!(set.len(), 1);
    }
}

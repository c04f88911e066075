//! The subqueries the pipeline keeps for subquery shapes: made when a shape needs one,
//! seeded by the shape's snapshot (or, after a restart, by a query of their own, innermost
//! first), kept from the stream, their changes handed to the shapes and nested subqueries
//! using them, and dropped with the last of those.

use std::sync::Arc;

use syncline_core::PgSnapshot;
use syncline_pg::PgError;
use syncline_where::{PositionKind, ShapeId};

use super::moves::{filter_of, last_offset};
use super::subquery::{normalized, Dep, DepKey, Mode, Subq, ViewSet};
use super::table::Table;
use super::{Pipeline, WriterLog};
use crate::shapes::{Command, RestoredViews, Shape, Shapes, ViewTuple};
use crate::subquery::tag_prefix;

/// A slot: its table's OID and its id there.
type SlotKey = (u32, ShapeId);

impl Pipeline {
    /// Sets up a subquery shape just added: its dependencies (created if new, seeded by its
    /// snapshot or, restored, by a query of their own), and its value sets: unknown until its
    /// snapshot starts, or as its view file says for a restored shape.
    pub(super) fn attach_subquery(&mut self, key: SlotKey, restored: bool) {
        let (oid, id) = key;
        let Some(filter) = self
            .tables
            .get(&oid)
            .and_then(|t| filter_of(t, id))
            .cloned()
        else {
            return;
        };
        if !filter.has_subqueries() {
            return;
        }
        let mut deps = Vec::new();
        for sub in filter.subqueries() {
            let dep = self.ensure_dep(sub);
            if let Some(d) = self.dep_mut(dep) {
                d.dependents.insert(key);
            }
            deps.push(dep);
        }
        let mut negated = vec![false; deps.len()];
        for position in &filter.dnf().positions {
            if let PositionKind::Subquery { subquery, .. } = position.kind {
                negated[subquery] = position.negated;
            }
        }
        let shape = self.tables[&oid].slots[&id].shape.clone();
        let mut sq = Subq::waiting(deps, negated, tag_prefix(&shape.handle));
        if restored {
            // Its value sets are read with its subqueries' rows, off the start-up path.
            sq.restored = true;
            self.seeding_wanted = true;
        }
        let table = self.tables.get_mut(&oid).expect("the slot's table");
        let slot = table.slots.get_mut(&id).expect("the slot");
        slot.subquery = Some(Box::new(sq));
        table.unrouted.insert(id);
    }

    /// How deep a dependency's nesting goes (0: its where clause has no subqueries).
    pub(super) fn dep_depth(&self, (oid, id): DepKey) -> usize {
        self.tables
            .get(&oid)
            .and_then(|t| t.deps.get(&id))
            .map_or(0, |d| {
                d.nested_deps()
                    .iter()
                    .map(|&inner| 1 + self.dep_depth(inner))
                    .max()
                    .unwrap_or(0)
            })
    }

    pub(super) fn dep_mut(&mut self, (oid, id): DepKey) -> Option<&mut Dep> {
        self.tables.get_mut(&oid)?.deps.get_mut(&id)
    }

    /// The dependency for subquery `sub`, made (seeding) if no shape uses it yet.
    pub(super) fn ensure_dep(&mut self, sub: &syncline_where::Subquery) -> DepKey {
        if let Some(&key) = self.dep_by_sql.get(&sub.sql) {
            return key;
        }
        // Nesting: its own subqueries' dependencies first.
        let nested: Vec<DepKey> = sub
            .filter
            .iter()
            .flat_map(|f| f.subqueries())
            .map(|inner| self.ensure_dep(inner))
            .collect();
        let oid = sub.relation.oid;
        let id = self.next_id;
        self.next_id += 1;
        let table = self
            .tables
            .entry(oid)
            .or_insert_with(|| Table::new(sub.relation.clone()));
        if table.layout.is_none() {
            if let Some(message) = self.relations.get(&oid) {
                table.describe(message);
            }
        }
        if nested.is_empty() {
            table.dep_router.add(id, sub.filter.as_ref());
        } else {
            // It keeps every row of its table.
            table.unrouted_deps.insert(id);
        }
        table.deps.insert(id, Dep::new(sub.clone(), nested.clone()));
        self.dep_by_sql.insert(sub.sql.clone(), (oid, id));
        for (i, inner) in nested.into_iter().enumerate() {
            if let Some(d) = self.dep_mut(inner) {
                d.dep_dependents.insert(((oid, id), i));
            }
        }
        (oid, id)
    }

    /// Removes every shape that uses a dependency, directly or through nesting (it can no
    /// longer tell which rows moved); the dependency goes with the last of them.
    pub(super) fn remove_dep_users(&mut self, key: DepKey, why: &str) {
        let mut shapes = Vec::new();
        let mut pending = vec![key];
        while let Some(dep) = pending.pop() {
            if let Some(d) = self.dep_mut(dep) {
                shapes.extend(d.dependents.iter().copied());
                pending.extend(d.dep_dependents.iter().map(|(parent, _)| *parent));
            }
        }
        shapes.sort_unstable();
        shapes.dedup();
        for (oid, id) in shapes {
            self.remove_invalid(oid, id, why);
        }
    }

    /// Removes a dependency nothing uses any more, and then its own unused dependencies.
    pub(super) fn drop_dep_if_unused(&mut self, (oid, dep): DepKey) {
        let Some(table) = self.tables.get_mut(&oid) else {
            return;
        };
        if table
            .deps
            .get(&dep)
            .is_none_or(|d| !d.dependents.is_empty() || !d.dep_dependents.is_empty())
        {
            return;
        }
        let removed = table.deps.remove(&dep).expect("checked above");
        self.dep_by_sql.remove(&removed.sql);
        table.dep_router.remove(dep);
        table.unrouted_deps.remove(&dep);
        if table.is_unused() {
            self.tables.remove(&oid);
        }
        for (i, &inner) in removed.nested_deps().iter().enumerate() {
            if let Some(d) = self.dep_mut(inner) {
                d.dep_dependents.remove(&((oid, dep), i));
            }
            self.drop_dep_if_unused(inner);
        }
    }

    /// A subquery shape is gone: its dependencies forget it, and go when no shape uses them.
    pub(super) fn detach_subquery(&mut self, key: SlotKey, sq: &Subq) {
        for &dep in &sq.deps {
            if let Some(d) = self.dep_mut(dep) {
                d.dependents.remove(&key);
            }
            self.drop_dep_if_unused(dep);
        }
        self.holds.remove(&key);
        self.splicing.remove(&key);
    }

    /// A subquery shape's snapshot started: its value sets are those rows, and a dependency
    /// still seeding is seeded by them.
    pub(super) fn subquery_snapshot_started(
        &mut self,
        key: SlotKey,
        visibility: &PgSnapshot,
        views: Vec<Vec<ViewTuple>>,
        seeds: Vec<(String, Vec<ViewTuple>)>,
    ) {
        for (sql, rows) in seeds {
            if let Some(&dep) = self.dep_by_sql.get(&sql) {
                self.seed_dep(dep, rows, visibility.clone());
            }
        }
        let (oid, id) = key;
        let Some(slot) = self.tables.get(&oid).and_then(|t| t.slots.get(&id)) else {
            return;
        };
        let (Some(sq), Some(filter)) = (slot.subquery.as_ref(), slot.filter.as_ref()) else {
            return;
        };
        let deps = sq.deps.clone();
        let subqueries = filter.subqueries().to_vec();
        assert_eq!(deps.len(), views.len(), "a set of rows per subquery");
        for (i, (dep, rows)) in deps.iter().zip(views).enumerate() {
            let set = ViewSet::of(rows.iter().map(|t| normalized(&subqueries[i], t)));
            if let Some(sq) = self.subq_mut(key) {
                sq.views[i] = set;
            }
            self.seed_dep(*dep, rows, visibility.clone());
        }
    }

    /// Seeds a dependency still seeding with `rows` as of `visibility`, and hands its shapes
    /// what the changes that waited made appear or disappear.
    pub(super) fn seed_dep(&mut self, key: DepKey, rows: Vec<ViewTuple>, visibility: PgSnapshot) {
        let open = self.txn.as_ref().map(|t| t.xid);
        let Some(table) = self.tables.get_mut(&key.0) else {
            return;
        };
        let types = table.types.clone();
        let Some(dep) = table.deps.get_mut(&key.1) else {
            return;
        };
        if dep.is_live() {
            return;
        }
        let inner = dep.nested_deps().to_vec();
        let views: Vec<ViewSet> = inner
            .iter()
            .map(|&d| {
                self.tables
                    .get(&d.0)
                    .and_then(|t| t.deps.get(&d.1))
                    .map_or_else(ViewSet::default, |d| ViewSet::of(d.tuples().cloned()))
            })
            .collect();
        let table = self.tables.get_mut(&key.0).expect("checked above");
        let dep = table.deps.get_mut(&key.1).expect("checked above");
        let txns = dep.seed(&types, rows, views, visibility, open);
        for (xid, lsn, deltas) in txns {
            self.propagate(key, xid, lsn, deltas);
        }
    }

    /// Hands what a dependency's transaction `xid` changed to the shapes and the nested
    /// dependencies that use it (whose own changes are handed on in turn).
    pub(super) fn propagate(
        &mut self,
        key: DepKey,
        xid: u32,
        lsn: u64,
        deltas: Vec<(ViewTuple, bool)>,
    ) {
        let Some(dep) = self.dep_mut(key) else {
            return;
        };
        let shapes: Vec<SlotKey> = dep.dependents.iter().copied().collect();
        let parents: Vec<(DepKey, usize)> = dep.dep_dependents.iter().copied().collect();
        for shape in shapes {
            self.deliver_deltas(shape, key, xid, lsn, &deltas);
        }
        for ((oid, id), sub) in parents {
            let Some(table) = self.tables.get_mut(&oid) else {
                continue;
            };
            let types = table.types.clone();
            let Some(parent) = table.deps.get_mut(&id) else {
                continue;
            };
            if !parent.is_live() {
                continue;
            }
            parent.nested_changed(&types, sub, &deltas);
            let changed = parent.commit();
            if !changed.is_empty() {
                self.propagate((oid, id), xid, lsn, changed);
            }
        }
    }

    /// Subqueries of restored shapes were read: they are seeded, and the restored shapes whose
    /// dependencies are all live catch up with them.
    pub(super) fn dependencies_seeded(
        &mut self,
        visibility: PgSnapshot,
        rows: Vec<(String, Vec<ViewTuple>)>,
        views: Vec<RestoredViews>,
    ) {
        for (handle, sets) in views {
            let Some(&(oid, id)) = self.by_handle.get(&handle) else {
                continue;
            };
            match sets {
                Ok(reflected) => {
                    let Some(slot) = self.tables.get_mut(&oid).and_then(|t| t.slots.get_mut(&id))
                    else {
                        continue;
                    };
                    let Some(sq) = slot.subquery.as_mut().filter(|sq| sq.restored) else {
                        continue;
                    };
                    sq.views = reflected.views.into_iter().map(ViewSet::of).collect();
                    let shape = slot.shape.clone();
                    let skipped = crate::blocking::in_place(|| {
                        slot.feed.reflects(
                            reflected.through,
                            reflected.seen,
                            &mut WriterLog(&shape),
                        )
                    });
                    if let Err(e) = skipped {
                        self.storage_failed(oid, id, e);
                    }
                }
                Err(e) => {
                    self.remove_invalid(oid, id, &format!("subquery state unreadable: {e}"));
                }
            }
        }
        for (sql, rows) in rows {
            if let Some(&key) = self.dep_by_sql.get(&sql) {
                self.seed_dep(key, rows, visibility.clone());
            }
        }
        let restored: Vec<SlotKey> = self
            .tables
            .iter()
            .flat_map(|(&oid, t)| {
                t.slots.iter().filter_map(move |(&id, s)| {
                    s.subquery
                        .as_ref()
                        .is_some_and(|sq| sq.restored && matches!(sq.mode, Mode::Waiting))
                        .then_some((oid, id))
                })
            })
            .collect();
        for key in restored {
            self.resume_restored(key);
        }
    }

    /// Starts reading the subqueries of restored shapes, in one snapshot.
    pub(super) fn seed_restored(&mut self) {
        if !std::mem::take(&mut self.seeding_wanted) {
            return;
        }
        // Nested dependencies after their own: each is seeded once those it reads are live.
        let mut waiting: Vec<(usize, String, String)> = self
            .tables
            .iter()
            .flat_map(|(&oid, t)| t.deps.iter().map(move |(&id, d)| ((oid, id), d)))
            .filter(|(_, d)| !d.is_live())
            .map(|(key, d)| (self.dep_depth(key), d.sql.clone(), d.seed_sql()))
            .collect();
        if waiting.is_empty() {
            return;
        }
        waiting.sort();
        let sqls: Vec<(String, String)> = waiting.into_iter().map(|(_, k, q)| (k, q)).collect();
        let restored: Vec<(Arc<Shape>, usize)> = self
            .tables
            .values()
            .flat_map(|t| t.slots.values())
            .filter_map(|slot| {
                let sq = slot.subquery.as_ref().filter(|sq| sq.restored)?;
                Some((slot.shape.clone(), sq.deps.len()))
            })
            .collect();
        let shapes = self.shapes.clone();
        self.shapes.spawn(async move {
            let views = {
                let shapes = shapes.clone();
                tokio::task::spawn_blocking(move || restored_views(&shapes, restored))
                    .await
                    .unwrap_or_default()
            };
            loop {
                match read_dependencies(&shapes, &sqls).await {
                    Ok((visibility, rows)) => {
                        let seeded = Command::DependenciesSeeded {
                            visibility,
                            rows,
                            views,
                        };
                        let _ = shapes.commands().send(seeded).await;
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the subqueries of restored shapes failed; retrying");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    }
                }
            }
        });
    }
}

/// The value sets each restored subquery shape's log reflects, from its view file and where its
/// log ends (or why they could not be read).
fn restored_views(shapes: &Shapes, restored: Vec<(Arc<Shape>, usize)>) -> Vec<RestoredViews> {
    restored
        .into_iter()
        .map(|(shape, subqueries)| {
            let views = last_offset(&shape)
                .map_err(|e| e.to_string())
                .and_then(|end| {
                    shapes
                        .load_views(&shape, subqueries, end)
                        .map_err(|e| e.to_string())
                });
            (shape.handle.clone(), views)
        })
        .collect()
}

/// Reads each subquery's rows, all in one `REPEATABLE READ` snapshot.
async fn read_dependencies(
    shapes: &Arc<Shapes>,
    sqls: &[(String, String)],
) -> Result<(PgSnapshot, Vec<(String, Vec<ViewTuple>)>), PgError> {
    let postgres = shapes.postgres();
    let mut conn = postgres.new_query_connection("syncline-subqueries").await?;
    let rows = conn
        .simple_query(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT pg_current_snapshot()::text",
        )
        .await?;
    let visibility: PgSnapshot = rows
        .first()
        .and_then(|r| r.first().cloned().flatten())
        .ok_or_else(|| PgError::Protocol("no snapshot row".into()))?
        .parse()
        .map_err(|e| PgError::Protocol(format!("{e}")))?;
    let mut out = Vec::with_capacity(sqls.len());
    for (key, sql) in sqls {
        out.push((key.clone(), conn.simple_query(sql).await?));
    }
    conn.simple_query("COMMIT").await?;
    Ok((visibility, out))
}

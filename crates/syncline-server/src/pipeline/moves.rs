//! How the pipeline runs subquery shapes: the moves their dependencies' changes cause (see
//! `deps.rs` for the dependencies), and move-ins spliced into the log.
//!
//! A tuple leaving a subquery a shape uses positively (or joining one it uses under NOT) is a
//! **move-out**: one control message, no rows; clients drop the rows that no longer match.
//! A tuple joining (or leaving, under NOT) is a **move-in**: the rows that now enter are read
//! by a query in a fresh `REPEATABLE READ` snapshot S while the shape's transactions wait; then
//! the waiting transactions S saw are applied with the old value sets (their effect is in the
//! rows), the move-in event, the rows and `snapshot-end` are appended, and the rest follow
//! with the new sets. Value-set changes are recorded in the shape's view file before its log
//! holds them, so a restart resumes from exactly the sets its log reflects, and brings them up
//! to date with moves.

use std::sync::Arc;

use syncline_core::{wire, LogOffset, PgSnapshot};
use syncline_pg::snapshot::{RowEncoder, Snapshot, SnapshotQuery};
use syncline_pg::PgError;
use syncline_storage::{Message, Operation};
use syncline_where::{PositionKind, ShapeId, Where};

use super::encode::ChangeContext;
use super::subquery::{
    texts, DepKey, Event, Mode, MoveIn, QueuedTxn, Subq, ViewSet, QUEUED_TXNS_MAX,
};
use super::table::Table;
use super::{Pipeline, WriterLog};
use crate::shapes::{Command, MoveInRows, Shape, Shapes, ViewRecord, ViewTuple};
use crate::subquery::headers_sql;

/// A slot: its table's OID and its id there.
type SlotKey = (u32, ShapeId);

/// The subquery shape's where clause (it has one).
pub(super) fn filter_of(table: &Table, id: ShapeId) -> Option<&Where> {
    table.slots.get(&id)?.filter.as_ref()
}

/// The offset of the log's last commit (`0_0` for an empty log).
pub(super) fn last_offset(shape: &Shape) -> syncline_storage::Result<LogOffset> {
    let last = crate::blocking::in_place(|| shape.writer.lock().get().map(|w| w.last_committed()))?;
    Ok(last.unwrap_or(LogOffset::new(0, 0)))
}

/// The next offset after the log's last commit: where a move's messages go (`1_0` after the
/// snapshot, as Electric's `0_inf` + 1).
pub(super) fn next_offset(shape: &Shape) -> syncline_storage::Result<LogOffset> {
    let last = last_offset(shape)?;
    Ok(if last.tx > 0 {
        LogOffset::new(last.tx, last.op + 1)
    } else {
        LogOffset::new(1, 0)
    })
}

impl Pipeline {
    /// A restored shape whose dependencies are live: its value sets are brought to theirs with
    /// moves (no transaction ids: the changes behind them are not known), then what waited is
    /// applied.
    pub(super) fn resume_restored(&mut self, key: SlotKey) {
        let (oid, id) = key;
        let Some(deps) = self.subq_mut(key).map(|sq| sq.deps.clone()) else {
            return;
        };
        let mut current = Vec::with_capacity(deps.len());
        for &dep_key in &deps {
            match self.dep_mut(dep_key) {
                Some(dep) if dep.is_live() => current.push(ViewSet::of(dep.tuples().cloned())),
                _ => return,
            }
        }
        let table = self.tables.get_mut(&oid).expect("the slot's table");
        table.unrouted.remove(&id);
        let slot = table.slots.get_mut(&id).expect("the slot");
        let sq = slot.subquery.as_mut().expect("a subquery shape");
        let mut changes = Vec::new();
        for (i, (view, now)) in sq.views.iter().zip(&current).enumerate() {
            changes.extend(
                now.iter()
                    .filter(|t| !view.contains(t))
                    .map(|t| (i, t.clone(), true)),
            );
            changes.extend(
                view.iter()
                    .filter(|t| !now.contains(t))
                    .map(|t| (i, t.clone(), false)),
            );
        }
        sq.mode = Mode::Steady;
        sq.restored = false;
        sq.queue.retain(|e| matches!(e, Event::Txn(_)));
        sq.route_views(&mut table.router, id);
        self.apply_moves(key, Vec::new(), 0, changes);
        self.drain(key);
    }

    /// The snapshot of a subquery shape is live: its initial value sets are recorded, and
    /// what waited is applied.
    pub(super) fn subquery_live(&mut self, key: SlotKey) {
        let (oid, id) = key;
        let Some(table) = self.tables.get_mut(&oid) else {
            return;
        };
        let Some(slot) = table.slots.get_mut(&id) else {
            return;
        };
        let Some(sq) = slot.subquery.as_mut() else {
            return;
        };
        let shape = slot.shape.clone();
        let at = last_offset(&shape).map(|o| (o.tx, o.op));
        let records: Vec<ViewRecord> = sq
            .views
            .iter()
            .enumerate()
            .map(|(sub, view)| ViewRecord {
                at: at.as_ref().map_or((0, 0), |a| *a),
                sub,
                add: view.iter().cloned().collect(),
                remove: Vec::new(),
                through: 0,
                seen: None,
            })
            .collect();
        let written = at.map_err(|e| e.to_string()).and_then(|_| {
            crate::blocking::in_place(|| self.shapes.append_views(&shape, &records))
                .map_err(|e| e.to_string())
        });
        if let Err(e) = written {
            self.remove_invalid(oid, id, &format!("subquery state not written: {e}"));
            return;
        }
        sq.mode = Mode::Steady;
        table.unrouted.remove(&id);
        sq.route_views(&mut table.router, id);
        self.drain(key);
    }

    pub(super) fn subq_mut(&mut self, (oid, id): SlotKey) -> Option<&mut Subq> {
        self.tables
            .get_mut(&oid)?
            .slots
            .get_mut(&id)?
            .subquery
            .as_deref_mut()
    }

    /// Tuples of dependency `dep` appeared or disappeared in transaction `xid`: the shape
    /// applies the moves now, or queues them behind what waits.
    pub(super) fn deliver_deltas(
        &mut self,
        shape: SlotKey,
        dep: DepKey,
        xid: u32,
        lsn: u64,
        deltas: &[(ViewTuple, bool)],
    ) {
        let Some(sq) = self.subq_mut(shape) else {
            return;
        };
        let changes: Vec<(usize, ViewTuple, bool)> = sq
            .deps
            .iter()
            .enumerate()
            .filter(|(_, &d)| d == dep)
            .flat_map(|(i, _)| deltas.iter().map(move |(t, now)| (i, t.clone(), *now)))
            .collect();
        if changes.is_empty() {
            return;
        }
        if sq.queues() {
            sq.queue_deltas(xid, lsn, changes);
        } else {
            self.apply_moves(shape, vec![xid], lsn, changes);
        }
    }

    /// Applies value-set changes (subquery, tuple, present now) caused by transactions
    /// `txids`, the last committed at `lsn` (0 for a restored shape catching up, whose log
    /// holds every transaction before the changes): move-outs at once, move-ins by a query
    /// (the shape then queues until its rows are spliced in).
    pub(super) fn apply_moves(
        &mut self,
        key: SlotKey,
        txids: Vec<u32>,
        lsn: u64,
        changes: Vec<(usize, ViewTuple, bool)>,
    ) {
        let Some(sq) = self.subq_mut(key) else {
            return;
        };
        let (mut outs, mut ins) = (Vec::new(), Vec::new());
        for (i, tuple, present) in changes {
            if sq.views[i].contains(&tuple) == present {
                continue;
            }
            // Joining a subquery used positively brings rows in; under NOT it takes them out.
            if present != sq.negated[i] {
                ins.push((i, tuple, present));
            } else {
                outs.push((i, tuple, present));
            }
        }
        if !outs.is_empty() {
            if let Err(e) = self.move_out(key, &txids, lsn, outs) {
                self.storage_failed(key.0, key.1, e);
                return;
            }
        }
        if !ins.is_empty() {
            self.start_move_in(key, txids, lsn, ins);
        }
    }

    /// The move patterns for value-set changes: one per position of the subquery and tuple.
    pub(super) fn patterns(
        filter: &Where,
        prefix: &str,
        changes: &[(usize, ViewTuple, bool)],
    ) -> Vec<(usize, String)> {
        let mut patterns = Vec::new();
        for (p, position) in filter.dnf().positions.iter().enumerate() {
            if let PositionKind::Subquery { subquery, .. } = &position.kind {
                for (i, tuple, _) in changes {
                    if i == subquery {
                        let values: Vec<Option<&str>> =
                            tuple.iter().map(Option::as_deref).collect();
                        patterns.push((p, filter.slot_hash(p, &values, prefix)));
                    }
                }
            }
        }
        patterns
    }

    /// Records value-set changes, with what the log then reflects (every transaction at or
    /// before `through`, every one `seen` saw), and updates the shape's sets (and its routing).
    pub(super) fn adopt(
        &mut self,
        key: SlotKey,
        at: LogOffset,
        (through, seen): (u64, Option<&PgSnapshot>),
        changes: &[(usize, ViewTuple, bool)],
    ) -> syncline_storage::Result<()> {
        let (oid, id) = key;
        let table = self.tables.get_mut(&oid).expect("the slot's table");
        let slot = table.slots.get_mut(&id).expect("the slot");
        let sq = slot.subquery.as_mut().expect("a subquery shape");
        let records: Vec<ViewRecord> = changes
            .iter()
            .map(|(sub, tuple, present)| ViewRecord {
                at: (at.tx, at.op),
                sub: *sub,
                add: if *present {
                    vec![tuple.clone()]
                } else {
                    Vec::new()
                },
                remove: if *present {
                    Vec::new()
                } else {
                    vec![tuple.clone()]
                },
                through,
                seen: seen.map(PgSnapshot::to_string),
            })
            .collect();
        crate::blocking::in_place(|| self.shapes.append_views(&slot.shape, &records)).map_err(
            |e| syncline_storage::StorageError::Io {
                path: slot.shape.handle.clone().into(),
                source: e,
            },
        )?;
        for (i, tuple, present) in changes {
            if *present {
                sq.views[*i].insert(tuple.clone());
            } else {
                sq.views[*i].remove(tuple);
                if !sq.negated[*i] {
                    if let Some(values) = texts(tuple) {
                        table.router.view_remove(id, *i, &values);
                    }
                }
            }
        }
        Ok(())
    }

    /// What writing a move needs: the shape, its where clause, its slot hashes' prefix.
    fn move_context(&self, (oid, id): SlotKey) -> (Arc<Shape>, Where, String) {
        let slot = &self.tables[&oid].slots[&id];
        let filter = slot
            .filter
            .clone()
            .expect("a subquery shape has a where clause");
        let prefix = slot
            .subquery
            .as_ref()
            .expect("a subquery shape")
            .prefix
            .clone();
        (slot.shape.clone(), filter, prefix)
    }

    /// Appends a move-out: one control message; every transaction up to `lsn` came before it.
    pub(super) fn move_out(
        &mut self,
        key: SlotKey,
        txids: &[u32],
        lsn: u64,
        changes: Vec<(usize, ViewTuple, bool)>,
    ) -> syncline_storage::Result<()> {
        let (shape, filter, prefix) = self.move_context(key);
        let at = next_offset(&shape)?;
        self.adopt(key, at, (lsn, None), &changes)?;
        let mut txids = txids.to_vec();
        txids.sort_unstable();
        let mut json = vec![wire::STORED_SEPARATOR];
        json.extend_from_slice(&wire::move_event(
            wire::MoveKind::Out,
            &Self::patterns(&filter, &prefix, &changes),
            &txids,
        ));
        crate::blocking::in_place(|| -> syncline_storage::Result<()> {
            let mut guard = shape.writer.lock();
            let writer = guard.get()?;
            writer.append(&[Message {
                offset: at,
                key: b"",
                op: Operation::Insert,
                json: &json,
            }])?;
            writer.commit()
        })?;
        self.dirty.insert(key);
        self.first_unflushed
            .get_or_insert_with(std::time::Instant::now);
        self.metrics.shape_messages.inc();
        Ok(())
    }

    /// Starts the query for the rows value-set `changes` bring into the shape; the shape
    /// queues until they are spliced in.
    pub(super) fn start_move_in(
        &mut self,
        key: SlotKey,
        txids: Vec<u32>,
        lsn: u64,
        changes: Vec<(usize, ViewTuple, bool)>,
    ) {
        let (oid, id) = key;
        let table = self.tables.get_mut(&oid).expect("the slot's table");
        let slot = table.slots.get_mut(&id).expect("the slot");
        let filter = slot
            .filter
            .clone()
            .expect("a subquery shape has a where clause");
        let shape = slot.shape.clone();
        let sq = slot.subquery.as_mut().expect("a subquery shape");
        let mut after = sq.views.clone();
        for (i, tuple, present) in &changes {
            if *present {
                after[*i].insert(tuple.clone());
                // Rows with the tuple are routed here from now on: those of transactions the
                // query does not see come after its rows.
                if !sq.negated[*i] {
                    if let Some(values) = texts(tuple) {
                        table.router.view_insert(id, *i, &values);
                    }
                }
            } else {
                after[*i].remove(tuple);
            }
        }
        let rendered =
            |views: &[ViewSet]| filter.sql_with_views(&|i| views[i].iter().cloned().collect());
        let where_sql = format!(
            "({}) AND NOT COALESCE(({}), false)",
            rendered(&after),
            rendered(&sq.views)
        );
        let id_of_move = sq.next_move_in;
        sq.next_move_in += 1;
        sq.mode = Mode::MovingIn(MoveIn {
            id: id_of_move,
            changes,
            txids,
            lsn,
            rows: None,
        });
        let query = SnapshotQuery::new(
            &shape.relation,
            Some(&shape.definition.columns),
            Some(where_sql),
        )
        .map(|q| q.with_headers(Some(headers_sql(&filter, &sq.prefix, true))));
        self.metrics.move_ins.inc();
        let shapes = self.shapes.clone();
        let must_see = self.recent_commits.must_see();
        self.shapes.spawn(async move {
            let result = match query {
                Ok(query) => read_move_in(&shapes, &query, &must_see)
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let done = Command::MoveInDone {
                handle: shape.handle.clone(),
                id: id_of_move,
                result,
            };
            let _ = shapes.commands().send(done).await;
        });
    }

    /// A move-in query finished: its rows are spliced in when the splice point is known.
    pub(super) fn move_in_done(
        &mut self,
        handle: &str,
        id: u64,
        result: Result<MoveInRows, String>,
    ) {
        if let Ok(rows) = &result {
            self.recent_commits.forget_seen_by(&rows.visibility);
        }
        let Some(&key) = self.by_handle.get(handle) else {
            return;
        };
        let Some(sq) = self.subq_mut(key) else {
            return;
        };
        let Mode::MovingIn(move_in) = &mut sq.mode else {
            return;
        };
        if move_in.id != id {
            return;
        }
        match result {
            Ok(rows) => {
                move_in.rows = Some(rows);
                self.splicing.insert(key);
                self.splice_ready();
            }
            Err(e) => {
                tracing::warn!(%handle, error = %e, "move-in query failed; the shape is removed");
                self.remove_invalid(key.0, key.1, &format!("move-in query failed: {e}"));
            }
        }
    }

    /// Whether every transaction committed before `wal_lsn` has been processed.
    pub(super) fn processed_through(&self, wal_lsn: u64) -> bool {
        self.last_end.0 >= wal_lsn
            || self.txn.as_ref().is_some_and(|t| t.lsn >= wal_lsn)
            || (self.txn.is_none() && self.stream.server_wal_end().0 >= wal_lsn)
    }

    /// Splices every finished move-in whose splice point is known.
    pub(super) fn splice_ready(&mut self) {
        let waiting: Vec<SlotKey> = self.splicing.iter().copied().collect();
        for key in waiting {
            if self.try_splice(key) {
                self.splicing.remove(&key);
            }
        }
    }

    /// Splices a finished move-in if its point is known: the waiting transactions its query
    /// saw (every one before the first it did not see), then its rows; returns whether it did
    /// (or the shape is gone). Moves queued among the transactions it saw wait past the splice:
    /// its rows hold those transactions' effect, so applying them after a move would repeat it.
    pub(super) fn try_splice(&mut self, key: SlotKey) -> bool {
        let Some(sq) = self.subq_mut(key) else {
            return true;
        };
        let Mode::MovingIn(MoveIn {
            rows: Some(rows), ..
        }) = &sq.mode
        else {
            return !matches!(sq.mode, Mode::MovingIn(_));
        };
        let (seen, wal_lsn) = (rows.visibility.clone(), rows.wal_lsn);
        let processed = self.processed_through(wal_lsn);
        let sq = self.subq_mut(key).expect("checked above");
        let point = sq
            .queue
            .iter()
            .position(|e| matches!(e, Event::Txn(t) if !seen.is_visible(t.xid)));
        let point = match point {
            Some(point) => point,
            None if processed => sq.queue.len(),
            None => {
                // Postgres tells how far its decoder is only in keepalives.
                self.keepalive_wanted = true;
                return false;
            }
        };
        let mut moves = std::collections::VecDeque::new();
        let mut saw = Vec::new();
        for event in sq.queue.drain(..point) {
            match event {
                Event::Txn(txn) => saw.push(txn),
                deltas @ Event::Deltas { .. } => moves.push_back(deltas),
            }
        }
        moves.append(&mut sq.queue);
        sq.queue = moves;
        for txn in saw {
            self.apply_queued(key, txn);
        }
        let Some(sq) = self.subq_mut(key) else {
            return true;
        };
        let Mode::MovingIn(move_in) = std::mem::replace(&mut sq.mode, Mode::Steady) else {
            unreachable!("checked above");
        };
        if let Err(e) = self.append_move_in(key, move_in) {
            self.storage_failed(key.0, key.1, e);
            return true;
        }
        self.drain(key);
        true
    }

    /// Appends a move-in: its event, its rows and `snapshot-end`, one commit.
    pub(super) fn append_move_in(
        &mut self,
        key: SlotKey,
        move_in: MoveIn,
    ) -> syncline_storage::Result<()> {
        let (shape, filter, prefix) = self.move_context(key);
        let rows = move_in.rows.expect("spliced with its rows");
        let at = next_offset(&shape)?;
        self.adopt(
            key,
            at,
            (move_in.lsn, Some(&rows.visibility)),
            &move_in.changes,
        )?;
        let mut txids = move_in.txids;
        txids.sort_unstable();
        txids.dedup();
        let mut event = vec![wire::STORED_SEPARATOR];
        event.extend_from_slice(&wire::move_event(
            wire::MoveKind::In,
            &Self::patterns(&filter, &prefix, &move_in.changes),
            &txids,
        ));
        let mut stored: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(rows.rows.len());
        for (row_key, json) in rows.rows {
            let mut line = Vec::with_capacity(json.len() + 1);
            line.push(wire::STORED_SEPARATOR);
            line.extend_from_slice(&json);
            stored.push((row_key, line));
        }
        let mut end = vec![wire::STORED_SEPARATOR];
        end.extend_from_slice(&wire::snapshot_end(&rows.visibility));
        let mut messages = vec![Message {
            offset: at,
            key: b"",
            op: Operation::Insert,
            json: &event,
        }];
        let mut op = at.op;
        for (row_key, line) in &stored {
            op += 1;
            messages.push(Message {
                offset: LogOffset::new(at.tx, op),
                key: row_key,
                op: Operation::Insert,
                json: line,
            });
        }
        if !stored.is_empty() {
            messages.push(Message {
                offset: LogOffset::new(at.tx, op + 1),
                key: b"",
                op: Operation::Insert,
                json: &end,
            });
        }
        crate::blocking::in_place(|| -> syncline_storage::Result<()> {
            let mut guard = shape.writer.lock();
            let writer = guard.get()?;
            writer.append(&messages)?;
            writer.commit()
        })?;
        self.dirty.insert(key);
        self.first_unflushed
            .get_or_insert_with(std::time::Instant::now);
        Ok(())
    }

    /// Applies what waits while the shape can (stops at a move-in); releases its hold on the
    /// acknowledged position once nothing waits.
    pub(super) fn drain(&mut self, key: SlotKey) {
        loop {
            let Some(sq) = self.subq_mut(key) else {
                return;
            };
            if !matches!(sq.mode, Mode::Steady) {
                return;
            }
            let Some(event) = sq.queue.pop_front() else {
                break;
            };
            match event {
                Event::Txn(txn) => self.apply_queued(key, txn),
                Event::Deltas { xid, lsn, deltas } => {
                    let seen = self.tables[&key.0].slots[&key.1].shape.visibility();
                    if seen.is_some_and(|s| s.is_visible(xid)) {
                        continue;
                    }
                    self.apply_moves(key, vec![xid], lsn, deltas);
                }
            }
        }
        if self.subq_mut(key).is_some_and(|sq| !sq.queues()) {
            self.holds.remove(&key);
        }
    }

    /// A queued transaction of the shape's table, applied with the value sets as they are.
    pub(super) fn apply_queued(&mut self, key: SlotKey, txn: QueuedTxn) {
        let (oid, id) = key;
        let Some(table) = self.tables.get_mut(&oid) else {
            return;
        };
        let types = table.types.clone();
        let Some(slot) = table.slots.get_mut(&id) else {
            return;
        };
        let shape = slot.shape.clone();
        let mut log = WriterLog(&shape);
        let result = (|| -> syncline_storage::Result<bool> {
            if !slot.feed.wants(txn.xid, txn.lsn, &mut log)? {
                return Ok(false);
            }
            for (op, old, new) in &txn.changes {
                let ctx = ChangeContext {
                    xid: txn.xid,
                    lsn: txn.lsn,
                    op: *op,
                };
                for message in slot.messages(&types, old.as_deref(), new.as_deref(), ctx, false) {
                    slot.feed.push(txn.xid, message, &mut log)?;
                }
            }
            slot.feed.commit(txn.xid, &mut log)
        })();
        match result {
            Ok(true) => {
                self.dirty.insert(key);
                self.first_unflushed
                    .get_or_insert_with(std::time::Instant::now);
            }
            Ok(false) => {}
            Err(e) => self.storage_failed(oid, id, e),
        }
    }

    /// The transaction `xid` committed: the subquery shapes that queued its changes queue it
    /// whole (removed if too many wait), and its changes to dependencies become moves.
    pub(super) fn commit_subqueries(&mut self, xid: u32, lsn: u64, deps: Vec<DepKey>) {
        let queued: Vec<SlotKey> = self.queueing.drain().collect();
        for key in queued {
            let Some(sq) = self.subq_mut(key) else {
                continue;
            };
            let Some(txn) = sq.open.take().filter(|t| t.xid == xid) else {
                continue;
            };
            sq.queue.push_back(Event::Txn(txn));
            if matches!(sq.mode, Mode::MovingIn(_)) && sq.queued_txns() > QUEUED_TXNS_MAX {
                self.remove_invalid(
                    key.0,
                    key.1,
                    "too many transactions waited for a subquery move-in",
                );
                continue;
            }
            self.drain(key);
        }
        for dep_key in deps {
            let Some(dep) = self.dep_mut(dep_key) else {
                continue;
            };
            let deltas = dep.commit();
            if deltas.is_empty() {
                continue;
            }
            self.propagate(dep_key, xid, lsn, deltas);
        }
        self.splice_ready();
    }
}

/// Runs a move-in query, in a snapshot that sees every transaction of `must_see`: its snapshot
/// and its rows' messages.
async fn read_move_in(
    shapes: &Arc<Shapes>,
    query: &SnapshotQuery,
    must_see: &[u32],
) -> Result<MoveInRows, PgError> {
    let postgres = shapes.postgres();
    let _permit = postgres
        .query_permit()
        .await
        .map_err(|_| PgError::Protocol("the query pool closed".into()))?;
    let mut conn = postgres.new_query_connection("syncline-move-in").await?;
    let (mut snapshot, _) = Snapshot::begin_after(&mut conn, query, &[], must_see).await?;
    let info = snapshot.info().clone();
    let mut encoder = RowEncoder::for_query(query);
    let mut rows = Vec::new();
    while snapshot
        .next_chunk(&mut |row| {
            let mut json = Vec::new();
            let key = encoder.encode(&row, &mut json)?.to_vec();
            rows.push((key, json));
            Ok(())
        })
        .await?
    {}
    // The splice waits until the stream is known to be past `wal_lsn`; Postgres decodes, and
    // its keepalives report, only WAL it flushed, and WAL of no commit (vacuum, an unpublished
    // table's asynchronous commit) can wait long for a flush. A commit of our own, synchronous,
    // flushes it all; it changes nothing, so the stream carries nothing of it.
    conn.simple_query(
        "BEGIN READ WRITE; SET LOCAL synchronous_commit = on; SELECT txid_current(); COMMIT",
    )
    .await?;
    Ok(MoveInRows {
        visibility: info.pg_snapshot,
        wal_lsn: info.wal_lsn.0,
        rows,
    })
}

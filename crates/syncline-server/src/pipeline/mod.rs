//! The pipeline: one replication stream, decoded, routed to the shapes each change affects, and
//! appended to their logs; Postgres is told a position is flushed only once every shape log
//! holding data up to it is durable.

pub mod encode;
mod table;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::FutureExt;
use syncline_core::{Lsn, PgSnapshot, RelationDesc, Tuple};
use syncline_pg::replication::{OldRow, PgOutput, RelationMessage, ResumingStream, StreamEvent};
use syncline_pg::PgResult;
use syncline_storage::Message;
use syncline_where::router::{Change, ShapeId};
use syncline_where::Row;
use tokio::sync::{mpsc, oneshot};

use crate::metrics::lsn_gauge;
use crate::shape::Shape;
use crate::state::AppState;
use encode::{ChangeContext, PendingMessage, ShapeChange};
use table::{slot_for, PendingTxn, Phase, Slot, Table};

/// Longest time commits wait for a batched flush while more data keeps arriving.
const FLUSH_DELAY_MAX: Duration = Duration::from_millis(10);
/// How often an idle pipeline acknowledges the WAL Postgres has decoded past (so WAL written
/// only to tables without shapes is not retained) and refreshes its gauges.
const IDLE_TICK_INTERVAL: Duration = Duration::from_secs(1);
/// Unix time of the replication protocol's epoch, 2000-01-01, in seconds.
const PG_EPOCH_UNIX_S: u64 = 946_684_800;

/// What the rest of the server asks of the pipeline.
pub enum Command {
    /// Start routing changes to a new shape; they wait in memory until
    /// [`Command::SnapshotDone`].
    AddShape {
        /// The shape.
        shape: Arc<Shape>,
        /// Answered once changes are routed to the shape.
        reply: oneshot::Sender<()>,
    },
    /// The shape's snapshot has recorded its visibility.
    SnapshotStarted {
        /// The shape's handle.
        handle: String,
        /// `pg_current_snapshot()` of the snapshot.
        visibility: PgSnapshot,
    },
    /// The shape's snapshot is complete and durable: append what waited, go live.
    SnapshotDone {
        /// The shape's handle.
        handle: String,
    },
    /// Stop routing to a shape (it is being deleted).
    RemoveShape {
        /// The shape's handle.
        handle: String,
        /// Answered once no change will be appended to it any more.
        reply: oneshot::Sender<()>,
    },
}

/// The transaction being decoded.
struct Txn {
    xid: u32,
    lsn: u64,
    changes: u64,
    touched: HashSet<(u32, ShapeId)>,
}

/// The pipeline task's state.
pub struct Pipeline {
    state: Arc<AppState>,
    stream: ResumingStream,
    commands: mpsc::Receiver<Command>,
    tables: HashMap<u32, Table>,
    by_handle: HashMap<String, (u32, ShapeId)>,
    relations: HashMap<u32, RelationMessage>,
    next_id: ShapeId,
    txn: Option<Txn>,
    dirty: HashSet<(u32, ShapeId)>,
    /// End LSN of the last commit processed; acknowledged once everything before is durable.
    last_end: Lsn,
    first_unflushed: Option<Instant>,
    /// Shapes whose snapshot is running and that hold replicated transactions in memory, with
    /// the position processed before the first of them: the acknowledgement stays at or below
    /// it until their log has them, so a crash meanwhile has Postgres send them again.
    holds: HashMap<(u32, ShapeId), Lsn>,
}

impl Pipeline {
    /// A pipeline over `stream`, taking commands from `commands`.
    pub fn new(
        state: Arc<AppState>,
        stream: ResumingStream,
        commands: mpsc::Receiver<Command>,
    ) -> Pipeline {
        Pipeline {
            state,
            stream,
            commands,
            tables: HashMap::new(),
            by_handle: HashMap::new(),
            relations: HashMap::new(),
            next_id: 1,
            txn: None,
            dirty: HashSet::new(),
            last_end: Lsn::ZERO,
            first_unflushed: None,
            holds: HashMap::new(),
        }
    }

    /// Runs until the stream fails for good (a non-transient error) or the command channel
    /// closes.
    pub async fn run(mut self) -> PgResult<()> {
        let mut tick = tokio::time::interval(IDLE_TICK_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                command = self.commands.recv() => match command {
                    Some(command) => self.command(command),
                    None => return Ok(()),
                },
                _ = tick.tick() => {
                    if self.idle_tick() {
                        if let Err(e) = self.stream.send_status(true).await {
                            tracing::debug!(error = %e, "status update failed; the stream reconnects");
                        }
                    }
                }
                event = self.stream.next() => {
                    self.event(event?);
                    self.drain_ready()?;
                }
            }
        }
    }

    /// Processes every event already available, then flushes; flushes early when commits have
    /// waited [`FLUSH_DELAY_MAX`].
    fn drain_ready(&mut self) -> PgResult<()> {
        loop {
            if self
                .first_unflushed
                .is_some_and(|t| t.elapsed() >= FLUSH_DELAY_MAX)
            {
                self.flush();
            }
            match self.stream.next().now_or_never() {
                Some(event) => self.event(event?),
                None => break,
            }
        }
        if self.txn.is_none() {
            self.flush();
        }
        Ok(())
    }

    /// With no transaction open and nothing waiting for a flush, everything Postgres has
    /// decoded so far is handled: acknowledge the position its last message reported (a
    /// keepalive carries the decoder's position, past every transaction it has sent). Returns
    /// whether the pipeline is idle, so the caller asks for a fresh keepalive.
    fn idle_tick(&mut self) -> bool {
        let metrics = &self.state.metrics;
        let server_end = self.stream.server_wal_end();
        let idle = self.txn.is_none()
            && self.dirty.is_empty()
            && self.first_unflushed.is_none()
            && self.holds.is_empty();
        if idle {
            let idle_end = server_end.max(self.last_end);
            self.stream.set_flushed(idle_end);
            self.state.observe_flushed(idle_end);
            metrics.flushed_lsn.set(lsn_gauge(idle_end.0));
        }
        let flushed = self.state.flushed_lsn();
        metrics
            .unacknowledged_wal_bytes
            .set(lsn_gauge(server_end.0.saturating_sub(flushed)));
        idle
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::AddShape { shape, reply } => {
                self.add_shape(shape, None, false);
                let _ = reply.send(());
            }
            Command::SnapshotStarted { handle, visibility } => {
                if let Some(slot) = self.slot_mut(&handle) {
                    slot.visibility = Some(visibility);
                }
            }
            Command::SnapshotDone { handle } => self.go_live(&handle),
            Command::RemoveShape { handle, reply } => {
                if let Some((oid, id)) = self.by_handle.remove(&handle) {
                    if let Some(table) = self.tables.get_mut(&oid) {
                        table.remove(id);
                        if table.slots.is_empty() {
                            self.tables.remove(&oid);
                        }
                    }
                    self.dirty.remove(&(oid, id));
                    self.holds.remove(&(oid, id));
                    if let Some(txn) = self.txn.as_mut() {
                        txn.touched.remove(&(oid, id));
                    }
                }
                let _ = reply.send(());
            }
        }
    }

    fn slot_mut(&mut self, handle: &str) -> Option<&mut Slot> {
        let (oid, id) = *self.by_handle.get(handle)?;
        self.tables.get_mut(&oid)?.slots.get_mut(&id)
    }

    /// Adds a shape restored from disk (its snapshot is in its log), before [`Pipeline::run`].
    pub fn add_restored(&mut self, shape: Arc<Shape>, visibility: Option<PgSnapshot>) {
        self.add_shape(shape, visibility, true);
    }

    fn add_shape(
        &mut self,
        shape: Arc<Shape>,
        visibility: Option<PgSnapshot>,
        snapshot_done: bool,
    ) {
        let oid = shape.definition.relation_oid;
        let relation = shape.relation.clone();
        if self
            .tables
            .get(&oid)
            .is_some_and(|t| t.relation != relation)
        {
            self.rebuild_table(oid, relation.clone());
        }
        let table = self
            .tables
            .entry(oid)
            .or_insert_with(|| Table::new(relation.clone()));
        if table.layout.is_none() {
            if let Some(message) = self.relations.get(&oid) {
                table.describe(message);
            }
        }
        // A new shape's log holds nothing from replication yet; a restored one's resume point
        // is read when a change first reaches it.
        let (phase, skip_through) = if snapshot_done {
            (Phase::Live, None)
        } else {
            let phase = Phase::Snapshotting {
                done: Vec::new(),
                open: Vec::new(),
            };
            (phase, Some(0))
        };
        let handle = shape.handle.clone();
        let Some(slot) = slot_for(
            shape.clone(),
            &table.relation,
            phase,
            visibility,
            skip_through,
        ) else {
            self.invalidate(&shape, "the table changed under the shape");
            return;
        };
        let id = self.next_id;
        self.next_id += 1;
        table.add(id, slot);
        self.by_handle.insert(handle, (oid, id));
    }

    /// Re-checks every shape of a table against a newer layout; those that no longer fit are
    /// invalidated.
    fn rebuild_table(&mut self, oid: u32, relation: RelationDesc) {
        let Some(old) = self.tables.remove(&oid) else {
            return;
        };
        let mut table = Table::new(relation);
        if let Some(message) = self.relations.get(&oid) {
            table.describe(message);
        }
        for (id, slot) in old.slots {
            let Slot {
                shape,
                phase,
                visibility,
                skip_through,
                held,
                in_txn,
                ..
            } = slot;
            match slot_for(
                shape.clone(),
                &table.relation,
                phase,
                visibility,
                skip_through,
            ) {
                Some(mut slot) => {
                    slot.held = held;
                    slot.in_txn = in_txn;
                    table.add(id, slot);
                }
                None => {
                    self.by_handle.remove(&shape.handle);
                    self.invalidate(&shape, "the table changed under the shape");
                }
            }
        }
        self.tables.insert(oid, table);
    }

    fn event(&mut self, event: StreamEvent) {
        let message = match event {
            StreamEvent::Message(m) => m.message,
            StreamEvent::Interrupted { xid } => {
                self.interrupted(xid);
                return;
            }
        };
        match message {
            PgOutput::Begin { final_lsn, xid, .. } => {
                self.txn = Some(Txn {
                    xid,
                    lsn: final_lsn.0,
                    changes: 0,
                    touched: HashSet::new(),
                });
            }
            PgOutput::Commit {
                commit_lsn,
                end_lsn,
                commit_time,
            } => {
                self.observe_commit_time(commit_time);
                self.commit(commit_lsn, end_lsn);
            }
            PgOutput::Relation(message) => {
                let oid = message.oid;
                if let Some(table) = self.tables.get_mut(&oid) {
                    let broken = table.describe(&message);
                    for id in broken {
                        self.remove_invalid(oid, id, "the table's columns changed");
                    }
                }
                self.relations.insert(oid, message);
            }
            PgOutput::Insert { relation, new } => self.change(relation, None, Some(new)),
            PgOutput::Update { relation, old, new } => {
                let old = old.map(|o| match o {
                    OldRow::Key(t) | OldRow::Full(t) => t,
                });
                self.change(relation, old, Some(new));
            }
            PgOutput::Delete { relation, old } => {
                let (OldRow::Key(old) | OldRow::Full(old)) = old;
                self.change(relation, Some(old), None);
            }
            PgOutput::Truncate { relations, .. } => {
                for oid in relations {
                    let ids: Vec<ShapeId> = self
                        .tables
                        .get(&oid)
                        .map(|t| t.slots.keys().copied().collect())
                        .unwrap_or_default();
                    for id in ids {
                        self.remove_invalid(oid, id, "the table was truncated");
                    }
                }
            }
            PgOutput::Origin { .. } | PgOutput::Type { .. } | PgOutput::Message { .. } => {}
        }
    }

    /// Sets the replication lag from a commit's time (microseconds since 2000-01-01).
    fn observe_commit_time(&self, commit_time_us: i64) {
        let now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64)
            - (PG_EPOCH_UNIX_S as i64) * 1_000_000;
        let lag_s = (now_us - commit_time_us).max(0) as f64 / 1e6;
        self.state.metrics.replication_lag_seconds.set(lag_s);
    }

    fn change(&mut self, oid: u32, old: Option<Tuple>, new: Option<Tuple>) {
        let Some(txn) = self.txn.as_mut() else {
            return;
        };
        self.state.metrics.changes.inc();
        let op = txn.changes * 2;
        txn.changes += 1;
        let ctx = ChangeContext {
            xid: txn.xid,
            lsn: txn.lsn,
            op,
        };
        let Some(table) = self.tables.get_mut(&oid) else {
            return;
        };
        let old = old.map(|t| table.project(t.0));
        let new = new.map(|t| {
            let mut new = Tuple(table.project(t.0));
            if let Some(old) = &old {
                new.fill_unchanged_from(&Tuple(old.clone()));
            }
            new.0
        });
        let change = match (&old, &new) {
            (None, Some(new)) => Change::Insert(new),
            (Some(old), Some(new)) => Change::Update { old, new },
            (Some(old), None) => Change::Delete(old),
            (None, None) => return,
        };
        let candidates = table.router.affected(&change);
        if candidates.is_empty() {
            return;
        }
        let old_row = old.as_deref().map(|v| Row::new(&table.types, v));
        let new_row = new.as_deref().map(|v| Row::new(&table.types, v));
        let mut failed = Vec::new();
        for id in candidates {
            let Some(slot) = table.slots.get_mut(&id) else {
                continue;
            };
            let skip_through = match slot.skip_through {
                Some(lsn) => lsn,
                None => match resume_point(&self.state, &slot.shape) {
                    Ok(lsn) => *slot.skip_through.insert(lsn),
                    Err(e) => {
                        failed.push((id, e));
                        continue;
                    }
                },
            };
            if ctx.lsn <= skip_through
                || slot
                    .visibility
                    .as_ref()
                    .is_some_and(|v| v.is_visible(ctx.xid))
            {
                continue;
            }
            let includes = |row: &Option<Row>| {
                row.as_ref()
                    .is_some_and(|r| slot.filter.as_ref().is_none_or(|f| f.includes(r)))
            };
            let (was_in, is_in) = (includes(&old_row), includes(&new_row));
            let shape_change = match (&old, &new, was_in, is_in) {
                (_, Some(new), false, true) => ShapeChange::Insert(new),
                (Some(old), _, true, false) => ShapeChange::Delete(old),
                (Some(old), Some(new), true, true) => {
                    if !slot.encoder.touches(old, new) {
                        continue;
                    }
                    ShapeChange::Update { old, new }
                }
                _ => continue,
            };
            txn.touched.insert((oid, id));
            if matches!(slot.phase, Phase::Snapshotting { .. }) {
                self.holds.entry((oid, id)).or_insert(self.last_end);
            }
            for message in slot.encoder.encode(shape_change, ctx) {
                self.state.metrics.shape_messages.inc();
                if let Some(previous) = slot.held.replace(message) {
                    if let Err(e) = deliver(&self.state, slot, previous.finish(false)) {
                        failed.push((id, e));
                    }
                }
            }
        }
        for (id, e) in failed {
            self.remove_invalid(oid, id, &format!("storage failed: {e}"));
        }
    }

    fn commit(&mut self, commit_lsn: Lsn, end_lsn: Lsn) {
        let Some(txn) = self.txn.take() else {
            return;
        };
        let mut failed = Vec::new();
        for &(oid, id) in &txn.touched {
            let Some(slot) = self.tables.get_mut(&oid).and_then(|t| t.slots.get_mut(&id)) else {
                continue;
            };
            let result = slot
                .held
                .take()
                .map_or(Ok(()), |last| deliver(&self.state, slot, last.finish(true)))
                .and_then(|()| end_transaction(&self.state, slot, txn.xid));
            match result {
                Ok(()) => {
                    self.dirty.insert((oid, id));
                }
                Err(e) => failed.push((oid, id, e)),
            }
        }
        for (oid, id, e) in failed {
            self.remove_invalid(oid, id, &format!("storage failed: {e}"));
        }
        self.last_end = self.last_end.max(end_lsn);
        self.state.observe_lsn(commit_lsn);
        self.state.metrics.transactions.inc();
        self.state
            .metrics
            .processed_lsn
            .set(lsn_gauge(commit_lsn.0));
        self.first_unflushed.get_or_insert_with(Instant::now);
    }

    /// Makes every committed change durable, publishes the new durable offsets, and tells
    /// Postgres.
    fn flush(&mut self) {
        if self.first_unflushed.take().is_none() {
            return;
        }
        let started = Instant::now();
        let dirty: Vec<(u32, ShapeId)> = self.dirty.drain().collect();
        let mut failed = Vec::new();
        tokio::task::block_in_place(|| {
            for (oid, id) in dirty {
                let Some(slot) = self.tables.get(&oid).and_then(|t| t.slots.get(&id)) else {
                    continue;
                };
                let mut guard = slot.shape.writer.lock();
                let Some(writer) = guard.opened() else {
                    continue;
                };
                match writer.flush() {
                    Ok(durable) => slot.shape.update(|s| s.durable = durable),
                    Err(e) => failed.push((oid, id, e)),
                }
            }
        });
        for (oid, id, e) in failed {
            self.remove_invalid(oid, id, &format!("storage failed: {e}"));
        }
        let ack = self.ack_position();
        self.stream.set_flushed(ack);
        self.state.observe_flushed(ack);
        let metrics = &self.state.metrics;
        metrics.flushed_lsn.set(lsn_gauge(ack.0));
        metrics
            .flush_seconds
            .observe(started.elapsed().as_secs_f64());
    }

    /// How far Postgres may be told everything is durable: all processed commits, unless a
    /// snapshotting shape still holds some in memory.
    fn ack_position(&self) -> Lsn {
        self.holds.values().copied().fold(self.last_end, Lsn::min)
    }

    /// The stream lost a transaction midway; it will be delivered again from its Begin. Logs
    /// that received part of it are cut back to their last commit.
    fn interrupted(&mut self, xid: u32) {
        let Some(txn) = self.txn.take() else {
            return;
        };
        tracing::warn!(
            xid,
            "replication transaction interrupted; it will be replayed"
        );
        self.first_unflushed.get_or_insert_with(Instant::now);
        self.flush();
        for &(oid, id) in &txn.touched {
            let Some(slot) = self.tables.get_mut(&oid).and_then(|t| t.slots.get_mut(&id)) else {
                continue;
            };
            slot.held = None;
            if let Phase::Snapshotting { open, .. } = &mut slot.phase {
                open.clear();
            }
            if std::mem::take(&mut slot.in_txn) {
                slot.shape.writer.lock().close();
            }
        }
    }

    /// The snapshot is durable: append the transactions that waited (those it did not see)
    /// and route live from now on.
    fn go_live(&mut self, handle: &str) {
        let Some(&(oid, id)) = self.by_handle.get(handle) else {
            return;
        };
        let Some(slot) = self.tables.get_mut(&oid).and_then(|t| t.slots.get_mut(&id)) else {
            return;
        };
        let Phase::Snapshotting { done, open } = std::mem::replace(&mut slot.phase, Phase::Live)
        else {
            return;
        };
        let state = &self.state;
        let result = tokio::task::block_in_place(|| -> syncline_storage::Result<()> {
            let mut guard = slot.shape.writer.lock();
            let writer = guard.get(&state.store, &state.writer_options)?;
            let visible = |xid: u32| slot.visibility.as_ref().is_some_and(|v| v.is_visible(xid));
            for txn in done.iter().filter(|t| !visible(t.xid)) {
                writer.append(&as_messages(&txn.messages))?;
                writer.commit()?;
            }
            let current = self.txn.as_ref().map(|t| t.xid);
            if !open.is_empty() && !current.is_some_and(visible) {
                writer.append(&as_messages(&open))?;
                slot.in_txn = true;
            }
            let durable = writer.flush()?;
            slot.shape.update(|s| {
                s.durable = durable;
                s.snapshot_done = true;
            });
            Ok(())
        });
        self.holds.remove(&(oid, id));
        if let Err(e) = result {
            self.remove_invalid(oid, id, &format!("storage failed: {e}"));
        }
    }

    fn remove_invalid(&mut self, oid: u32, id: ShapeId, why: &str) {
        let Some(table) = self.tables.get_mut(&oid) else {
            return;
        };
        let Some(slot) = table.remove(id) else {
            return;
        };
        if table.slots.is_empty() {
            self.tables.remove(&oid);
        }
        self.by_handle.remove(&slot.shape.handle);
        self.dirty.remove(&(oid, id));
        self.holds.remove(&(oid, id));
        self.invalidate(&slot.shape, why);
    }

    /// Marks a shape gone and removes it from the registry, the metadata and the store.
    fn invalidate(&self, shape: &Arc<Shape>, why: &str) {
        tracing::info!(handle = %shape.handle, table = %shape.definition.table, reason = why, "shape invalidated");
        self.state.discard_shape(shape);
    }
}

/// Appends (live) or keeps (snapshot running) one finished message.
fn deliver(
    state: &AppState,
    slot: &mut Slot,
    message: PendingMessage,
) -> syncline_storage::Result<()> {
    match &mut slot.phase {
        Phase::Snapshotting { open, .. } => {
            open.push(message);
            Ok(())
        }
        Phase::Live => {
            slot.in_txn = true;
            let mut guard = slot.shape.writer.lock();
            let writer = guard.get(&state.store, &state.writer_options)?;
            writer.append(&as_messages(std::slice::from_ref(&message)))
        }
    }
}

/// Where a restored shape's log ends: transactions committed up to there are already in it.
fn resume_point(state: &AppState, shape: &Shape) -> syncline_storage::Result<u64> {
    tokio::task::block_in_place(|| {
        let mut guard = shape.writer.lock();
        let writer = guard.get(&state.store, &state.writer_options)?;
        Ok(writer.last_committed().map_or(0, |o| o.tx))
    })
}

/// Ends the transaction `xid` for a slot: a commit in the log, or a finished pending txn.
fn end_transaction(state: &AppState, slot: &mut Slot, xid: u32) -> syncline_storage::Result<()> {
    match &mut slot.phase {
        Phase::Snapshotting { done, open } => {
            done.push(PendingTxn {
                xid,
                messages: std::mem::take(open),
            });
            Ok(())
        }
        Phase::Live => {
            slot.in_txn = false;
            let mut guard = slot.shape.writer.lock();
            guard.get(&state.store, &state.writer_options)?.commit()
        }
    }
}

fn as_messages(messages: &[PendingMessage]) -> Vec<Message<'_>> {
    messages
        .iter()
        .map(|m| Message {
            offset: m.offset,
            key: &m.key,
            op: m.op,
            json: &m.json,
        })
        .collect()
}

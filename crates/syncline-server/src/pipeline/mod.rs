//! The pipeline: one replication stream, decoded, routed to the shapes each change affects, and
//! appended to their logs; Postgres is told a position is flushed only once every shape log
//! holding data up to it is durable.

mod commits;
mod deps;
pub mod encode;
mod feed;
mod moves;
mod subquery;
mod table;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::FutureExt;
use syncline_core::{pg_time, Lsn, PgSnapshot, RelationDesc, Tuple};
use syncline_pg::replication::{OldRow, PgOutput, RelationMessage, ResumingStream, StreamEvent};
use syncline_pg::PgResult;
use syncline_storage::{GroupSync, Message, StorageError};
use syncline_where::{Change, ShapeId};
use tokio::sync::{mpsc, watch};

use crate::metrics::{lsn_gauge, Metrics};
use crate::progress::Progress;
use crate::shapes::{Command, Shape, Shapes};
use commits::RecentCommits;
use encode::{ChangeContext, PendingMessage};
use feed::{Feed, ShapeLog};
use subquery::DepKey;
use table::{Slot, Table};

/// Longest time commits wait for a batched flush while more data keeps arriving.
const FLUSH_DELAY_MAX: Duration = Duration::from_millis(10);
/// How often an idle pipeline acknowledges the WAL Postgres has decoded past (so WAL written
/// only to tables without shapes is not retained) and refreshes its gauges.
const IDLE_TICK_INTERVAL: Duration = Duration::from_secs(1);
/// How often a move-in waiting for its splice point checks the stream's position.
const SPLICE_POLL_INTERVAL: Duration = Duration::from_millis(2);
/// Shortest time between two keepalives asked for while a move-in waits for its splice point.
const KEEPALIVE_REQUEST_INTERVAL: Duration = Duration::from_millis(5);

/// The transaction being decoded.
struct Txn {
    xid: u32,
    lsn: u64,
    changes: u64,
    touched: HashSet<(u32, ShapeId)>,
    /// Subqueries whose tables it changed.
    deps: HashSet<DepKey>,
}

/// The pipeline task's state.
pub struct Pipeline {
    shapes: Arc<Shapes>,
    progress: Arc<Progress>,
    metrics: Arc<Metrics>,
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
    /// What a shape log could not be written for want of, and the error: the pipeline stops.
    stalled: Option<(Shortage, String)>,
    /// Each subquery in use, by its SQL.
    dep_by_sql: HashMap<String, DepKey>,
    /// Subquery shapes whose move-in rows wait for their splice point.
    splicing: HashSet<(u32, ShapeId)>,
    /// Subquery shapes holding changes of the open transaction.
    queueing: HashSet<(u32, ShapeId)>,
    /// Restored subquery shapes wait for their subqueries to be read.
    seeding_wanted: bool,
    /// A move-in waits to learn that every transaction its query saw was processed: Postgres
    /// is asked for a keepalive (its decoder's position), at most every
    /// [`KEEPALIVE_REQUEST_INTERVAL`].
    keepalive_wanted: bool,
    last_keepalive_request: Option<Instant>,
    /// The commits processed last: what a snapshot started now must see.
    recent_commits: RecentCommits,
}

/// Why the pipeline stopped.
pub enum Stop {
    /// The replication stream failed for good.
    Postgres(syncline_pg::PgError),
    /// A shape log could not be written for want of space, or of file descriptors. Nothing
    /// past the last durable position was acknowledged; the pipeline is started again from the
    /// slot once a write succeeds, with the command queue it hands back.
    StoragePaused {
        /// What was short.
        shortage: Shortage,
        /// The storage error.
        why: String,
        /// The command queue, for the next pipeline.
        commands: mpsc::Receiver<Command>,
    },
}

/// A shortage that stops shape logs from being written, and passes without any log being at
/// fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shortage {
    /// The file system is out of space (or quota).
    Space,
    /// The process (or the system) is out of file descriptors.
    Descriptors,
}

impl Shortage {
    /// The shortage `error`, or an I/O error that caused it (a storage error's, say), means,
    /// if it means one.
    pub fn of(error: &(dyn std::error::Error + 'static)) -> Option<Shortage> {
        let mut next = Some(error);
        while let Some(e) = next {
            let raw = e
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::raw_os_error);
            match raw {
                Some(libc::ENOSPC | libc::EDQUOT) => return Some(Shortage::Space),
                Some(libc::EMFILE | libc::ENFILE) => return Some(Shortage::Descriptors),
                _ => next = e.source(),
            }
        }
        None
    }
}

impl Pipeline {
    /// A pipeline over `stream`, taking commands from `commands`.
    pub fn new(
        shapes: Arc<Shapes>,
        progress: Arc<Progress>,
        metrics: Arc<Metrics>,
        stream: ResumingStream,
        commands: mpsc::Receiver<Command>,
    ) -> Pipeline {
        Pipeline {
            shapes,
            progress,
            metrics,
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
            stalled: None,
            dep_by_sql: HashMap::new(),
            splicing: HashSet::new(),
            queueing: HashSet::new(),
            seeding_wanted: false,
            keepalive_wanted: false,
            last_keepalive_request: None,
            recent_commits: RecentCommits::default(),
        }
    }

    /// Runs until the stream fails for good (a non-transient error), a shape log cannot be
    /// written for want of space, the command channel closes, or `stop` says so: then every
    /// commit processed is flushed and acknowledged to Postgres before it returns (a
    /// transaction still open is left to the next writer, which Postgres sends it to again).
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) -> Result<(), Stop> {
        let stopped = tokio::select! {
            result = self.run_until_stopped() => Some(result),
            _ = stop.wait_for(|stop| *stop) => None,
        };
        let result = match stopped {
            Some(result) => result,
            None => self.stop().await,
        };
        match result {
            Ok(()) => Ok(()),
            Err(e) => Err(match self.stalled.take() {
                Some((shortage, why)) => Stop::StoragePaused {
                    shortage,
                    why,
                    commands: self.commands,
                },
                None => Stop::Postgres(e),
            }),
        }
    }

    /// Flushes every commit processed and tells Postgres.
    async fn stop(&mut self) -> PgResult<()> {
        self.first_unflushed.get_or_insert_with(Instant::now);
        self.flush();
        if self.stalled.is_some() {
            return Err(syncline_pg::PgError::Protocol(
                "stopped: shape storage cannot take writes".into(),
            ));
        }
        self.stream.send_status(false).await
    }

    async fn run_until_stopped(&mut self) -> PgResult<()> {
        self.seed_restored();
        let mut tick = tokio::time::interval(IDLE_TICK_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                command = self.commands.recv() => match command {
                    Some(command) => {
                        self.command(command);
                        // A move spliced in by a command is made durable as a commit is.
                        if self.txn.is_none() {
                            self.flush();
                        }
                    }
                    None => return Ok(()),
                },
                _ = tick.tick() => {
                    self.splice_ready();
                    if self.txn.is_none() {
                        self.flush();
                    }
                    if self.idle_tick() || !self.splicing.is_empty() {
                        if let Err(e) = self.stream.send_status(true).await {
                            tracing::debug!(error = %e, "status update failed; the stream reconnects");
                        }
                    }
                }
                // A move-in waiting for its splice point learns of it from a keepalive, which
                // the stream takes in without an event.
                _ = tokio::time::sleep(SPLICE_POLL_INTERVAL), if !self.splicing.is_empty() => {
                    self.splice_ready();
                    if self.txn.is_none() {
                        self.flush();
                    }
                }
                event = self.stream.next() => {
                    self.event(event?);
                    self.splice_ready();
                    self.drain_ready()?;
                }
            }
            if self.stalled.is_some() {
                return Err(syncline_pg::PgError::Protocol(
                    "stopped: shape storage cannot take writes".into(),
                ));
            }
            self.request_keepalive().await;
        }
    }

    /// Asks Postgres for a keepalive if a move-in waits for one (see `keepalive_wanted`).
    async fn request_keepalive(&mut self) {
        if !std::mem::take(&mut self.keepalive_wanted) {
            return;
        }
        if self
            .last_keepalive_request
            .is_some_and(|t| t.elapsed() < KEEPALIVE_REQUEST_INTERVAL)
        {
            // The tick asks again while the move-in waits.
            return;
        }
        self.last_keepalive_request = Some(Instant::now());
        if let Err(e) = self.stream.send_status(true).await {
            tracing::debug!(error = %e, "status update failed; the stream reconnects");
        }
    }

    /// Processes every event already available, then flushes; flushes early when commits have
    /// waited [`FLUSH_DELAY_MAX`].
    fn drain_ready(&mut self) -> PgResult<()> {
        while self.stalled.is_none() {
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
        if self.txn.is_none() && self.stalled.is_none() {
            self.flush();
        }
        Ok(())
    }

    /// With no transaction open and nothing waiting for a flush, everything Postgres has
    /// decoded so far is handled: acknowledge the position its last message reported (a
    /// keepalive carries the decoder's position, past every transaction it has sent). Returns
    /// whether the pipeline is idle, so the caller asks for a fresh keepalive.
    fn idle_tick(&mut self) -> bool {
        let metrics = &self.metrics;
        let server_end = self.stream.server_wal_end();
        let idle = self.txn.is_none()
            && self.dirty.is_empty()
            && self.first_unflushed.is_none()
            && self.holds.is_empty();
        if idle {
            let idle_end = server_end.max(self.last_end);
            self.stream.set_flushed(idle_end);
            self.progress.observe_flushed(idle_end);
            self.publish_progress();
            metrics.flushed_lsn.set(lsn_gauge(idle_end.0));
        }
        let flushed = self.progress.flushed_lsn();
        metrics
            .unacknowledged_wal_bytes
            .set(lsn_gauge(server_end.0.saturating_sub(flushed)));
        idle
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::AddShape { shape, reply } => {
                self.add_shape(shape, Feed::snapshotting(), false);
                let _ = reply.send(self.recent_commits.must_see());
            }
            Command::SnapshotStarted {
                handle,
                visibility,
                views,
                seeds,
            } => {
                self.recent_commits.forget_seen_by(&visibility);
                if let Some(slot) = self.slot_mut(&handle) {
                    slot.feed.snapshot_started(visibility.clone());
                }
                if let Some(&key) = self.by_handle.get(&handle) {
                    if !views.is_empty() {
                        self.subquery_snapshot_started(key, &visibility, views, seeds);
                    }
                }
            }
            Command::SnapshotDone { handle } => self.go_live(&handle),
            Command::MoveInDone { handle, id, result } => self.move_in_done(&handle, id, result),
            Command::DependenciesSeeded {
                visibility,
                rows,
                views,
            } => self.dependencies_seeded(visibility, rows, views),
            Command::RecentCommits { reply } => {
                let _ = reply.send(self.recent_commits.must_see());
            }
            Command::RemoveShape { handle, reply } => {
                if let Some((oid, id)) = self.by_handle.remove(&handle) {
                    let removed = self.tables.get_mut(&oid).and_then(|t| t.remove(id));
                    if let Some(sq) = removed.and_then(|slot| slot.subquery) {
                        self.detach_subquery((oid, id), &sq);
                    }
                    if self.tables.get(&oid).is_some_and(Table::is_unused) {
                        self.tables.remove(&oid);
                    }
                    self.queueing.remove(&(oid, id));
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
        self.tables
            .get_mut(&oid)?
            .slots
            .get_mut(&id)
            .map(|slot| &mut **slot)
    }

    /// Adds a shape restored from disk (its snapshot is in its log), before [`Pipeline::run`].
    pub fn add_restored(&mut self, shape: Arc<Shape>, visibility: Option<PgSnapshot>) {
        self.add_shape(shape, Feed::restored(visibility), true);
    }

    fn add_shape(&mut self, shape: Arc<Shape>, feed: Feed, restored: bool) {
        let oid = shape.definition.relation_oid;
        let relation = &*shape.relation;
        if self
            .tables
            .get(&oid)
            .is_some_and(|t| t.relation != *relation)
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
        let handle = shape.handle.clone();
        let Some(slot) = table.slot_for(shape.clone(), feed) else {
            self.invalidate(&shape, "the table changed under the shape");
            return;
        };
        let id = self.next_id;
        self.next_id += 1;
        table.add(id, slot);
        self.by_handle.insert(handle, (oid, id));
        self.attach_subquery((oid, id), restored);
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
        for (id, dep) in old.deps {
            if dep.is_nested() {
                table.unrouted_deps.insert(id);
            } else {
                table.dep_router.add(id, dep.filter());
            }
            table.deps.insert(id, dep);
        }
        let mut broken = Vec::new();
        for (id, slot) in old.slots {
            let Slot {
                shape,
                feed,
                subquery,
                ..
            } = *slot;
            match table.slot_for(shape.clone(), feed) {
                Some(slot) => {
                    let unrouted = old.unrouted.contains(&id);
                    // Added first: the router keeps value sets only for the shapes it holds, and
                    // adding a shape starts its sets empty.
                    table.add(id, slot);
                    if let Some(sq) = subquery.as_ref().filter(|_| !unrouted) {
                        sq.route_views(&mut table.router, id);
                    }
                    table.slots.get_mut(&id).expect("added above").subquery = subquery;
                    if unrouted {
                        table.unrouted.insert(id);
                    }
                }
                None => {
                    self.by_handle.remove(&shape.handle);
                    if let Some(sq) = subquery {
                        broken.push(((oid, id), sq));
                    }
                    self.invalidate(&shape, "the table changed under the shape");
                }
            }
        }
        self.tables.insert(oid, table);
        for (key, sq) in broken {
            self.detach_subquery(key, &sq);
        }
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
                    deps: HashSet::new(),
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
                if self.tables.contains_key(&oid) {
                    self.shapes.refresh_table(oid);
                }
                if let Some(table) = self.tables.get_mut(&oid) {
                    let renamed = message.schema != table.relation.schema
                        || message.name != table.relation.name;
                    let broken = table.describe(&message);
                    let broken_deps = if renamed {
                        table.deps.keys().copied().collect()
                    } else {
                        table.broken_deps()
                    };
                    for id in broken {
                        self.remove_invalid(oid, id, "the table's columns changed");
                    }
                    for dep in broken_deps {
                        self.remove_dep_users((oid, dep), "a table its subquery reads changed");
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
                    // Shapes whose subqueries read the table cannot tell which rows left.
                    let deps: Vec<ShapeId> = self
                        .tables
                        .get(&oid)
                        .map(|t| t.deps.keys().copied().collect())
                        .unwrap_or_default();
                    for dep in deps {
                        self.remove_dep_users(
                            (oid, dep),
                            "a table its subquery reads was truncated",
                        );
                    }
                }
            }
            PgOutput::Origin { .. } | PgOutput::Type { .. } | PgOutput::Message { .. } => {}
        }
    }

    /// Sets the replication lag from a commit's time (microseconds since 2000-01-01).
    fn observe_commit_time(&self, commit_time_us: i64) {
        let now_us = pg_time::postgres_micros(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
        );
        let lag = Duration::from_micros(u64::try_from(now_us - commit_time_us).unwrap_or(0));
        let lag_s = lag.as_secs_f64();
        self.metrics.replication_lag_seconds.set(lag_s);
    }

    /// Keeps the shape logs within their bounds before a change opens more: with more open
    /// than their bound, holds the least recently used (those of the open transaction too:
    /// one reaching thousands of shapes keeps only their locks, not their files); with more
    /// held or parked than theirs, makes what is committed durable first, so that the least
    /// recently used idle ones park, and the least recently used parked ones close.
    fn make_room(&mut self) {
        if !self.shapes.writers_over_bound() {
            return;
        }
        let resting_over = self.shapes.resting_writers_over_bound();
        if resting_over {
            self.first_unflushed.get_or_insert_with(Instant::now);
            self.flush();
        }
        crate::blocking::in_place(|| {
            self.shapes.hold_writers();
            if resting_over {
                self.shapes.park_held_writers();
                self.shapes.close_parked_writers();
            }
        });
    }

    fn change(&mut self, oid: u32, old: Option<Tuple>, new: Option<Tuple>) {
        self.make_room();
        let Some(txn) = self.txn.as_mut() else {
            return;
        };
        self.metrics.changes.inc();
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
        let mut deps = table.dep_router.affected(&change);
        deps.extend(table.unrouted_deps.iter().copied());
        for dep_id in deps {
            if let Some(dep) = table.deps.get_mut(&dep_id) {
                dep.apply(
                    &table.types,
                    ctx.xid,
                    ctx.lsn,
                    old.as_deref(),
                    new.as_deref(),
                );
                txn.deps.insert((oid, dep_id));
            }
        }
        let mut candidates = table.router.affected_certain(&change);
        if !table.unrouted.is_empty() {
            candidates.extend(table.unrouted.iter().map(|&id| (id, false)));
            // An id routed and unrouted keeps `false` (sorted first): it is evaluated.
            candidates.sort_unstable();
            candidates.dedup_by_key(|(id, _)| *id);
        }
        if candidates.is_empty() {
            return;
        }
        let mut failed = Vec::new();
        for (id, certain) in candidates {
            let Some(slot) = table.slots.get_mut(&id) else {
                continue;
            };
            if let Some(sq) = slot.subquery.as_mut() {
                if sq.queues() {
                    // Its changes wait, whole transactions, until it can apply them; so does
                    // the acknowledgement of what they are part of.
                    if sq.open.is_none() {
                        self.holds.entry((oid, id)).or_insert(self.last_end);
                    }
                    sq.queue_change(ctx.xid, ctx.lsn, ctx.op, old.as_deref(), new.as_deref());
                    self.queueing.insert((oid, id));
                    continue;
                }
            }
            let mut log = WriterLog(&slot.shape);
            match slot.feed.wants(ctx.xid, ctx.lsn, &mut log) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    failed.push((id, e));
                    continue;
                }
            }
            let messages =
                slot.messages(&table.types, old.as_deref(), new.as_deref(), ctx, certain);
            if messages.is_empty() {
                continue;
            }
            txn.touched.insert((oid, id));
            if slot.feed.is_snapshotting() {
                self.holds.entry((oid, id)).or_insert(self.last_end);
            }
            for message in messages {
                self.metrics.shape_messages.inc();
                if let Err(e) = slot.feed.push(ctx.xid, message, &mut log) {
                    failed.push((id, e));
                    break;
                }
            }
        }
        for (id, e) in failed {
            self.storage_failed(oid, id, e);
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
            let mut log = WriterLog(&slot.shape);
            match slot.feed.commit(txn.xid, &mut log) {
                Ok(true) => {
                    self.dirty.insert((oid, id));
                }
                Ok(false) => {}
                Err(e) => failed.push((oid, id, e)),
            }
        }
        for (oid, id, e) in failed {
            self.storage_failed(oid, id, e);
        }
        self.last_end = self.last_end.max(end_lsn);
        self.recent_commits.record(txn.xid);
        self.commit_subqueries(txn.xid, txn.lsn, txn.deps.into_iter().collect());
        self.progress.observe_lsn(commit_lsn);
        self.metrics.transactions.inc();
        self.metrics.processed_lsn.set(lsn_gauge(commit_lsn.0));
        self.first_unflushed.get_or_insert_with(Instant::now);
    }

    /// Makes every committed change durable, publishes the new durable offsets, and tells
    /// Postgres. All of it is one blocking call ([`crate::blocking::in_place`]; the calls
    /// within it are nested and cost nothing more).
    fn flush(&mut self) {
        if self.first_unflushed.is_none() {
            return;
        }
        crate::blocking::in_place(|| self.flush_blocking());
    }

    /// [`Pipeline::flush`], on a thread that may block.
    fn flush_blocking(&mut self) {
        if self.first_unflushed.take().is_none() {
            return;
        }
        let started = Instant::now();
        let dirty: Vec<(u32, ShapeId)> = self.dirty.drain().collect();
        let mut failed = Vec::new();
        {
            // Every dirty log is flushed together: their durability costs one sync when they
            // are many (`syncline_storage::flush_all`).
            let slots: Vec<(u32, ShapeId, &Slot)> = dirty
                .into_iter()
                .filter_map(|(oid, id)| {
                    let slot = self.tables.get(&oid).and_then(|t| t.slots.get(&id))?;
                    Some((oid, id, &**slot))
                })
                .collect();
            let mut guards: Vec<_> = slots.iter().map(|s| s.2.shape.writer.lock()).collect();
            let mut flushed = Vec::with_capacity(slots.len());
            let mut writers = Vec::with_capacity(slots.len());
            // A log nobody waits on keeps its new bytes in memory, durable through the group
            // journal, until a request comes (`Shape::subscribe`); not while another server
            // follows the files, whose requests this one never sees.
            let followed = self.shapes.followed();
            for (slot, guard) in slots.iter().zip(guards.iter_mut()) {
                if let Some(writer) = guard.opened() {
                    writer.set_deferring(!followed && !slot.2.shape.has_waiters());
                    flushed.push(slot);
                    writers.push(writer);
                }
            }
            let results = syncline_storage::flush_all(&mut writers, GroupSync::Auto);
            for ((&(oid, id, slot), writer), result) in
                flushed.into_iter().zip(writers).zip(results)
            {
                match result {
                    Ok(durable) => {
                        // What is acknowledged next must be durable in every log holding it.
                        assert_eq!(
                            durable,
                            writer.last_committed(),
                            "a flush makes every commit of the log durable"
                        );
                        if let Err(e) = slot.shape.flushed(writer) {
                            failed.push((oid, id, e));
                        }
                    }
                    Err(e) => failed.push((oid, id, e)),
                }
            }
            for guard in &mut guards {
                guard.hold_if_over_bound();
            }
        }
        for (oid, id, e) in failed {
            self.storage_failed(oid, id, e);
        }
        if self.stalled.is_some() {
            return;
        }
        let ack = self.ack_position();
        self.stream.set_flushed(ack);
        self.progress.observe_flushed(ack);
        self.publish_progress();
        let metrics = &self.metrics;
        metrics.flushed_lsn.set(lsn_gauge(ack.0));
        metrics
            .flush_seconds
            .observe(started.elapsed().as_secs_f64());
    }

    /// Tells standbys and replicas how far this writer is.
    fn publish_progress(&self) {
        if let Err(e) = crate::blocking::in_place(|| self.progress.publish()) {
            tracing::debug!(error = %e, "could not publish replication progress");
        }
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
            if slot.feed.interrupted() {
                slot.shape.writer.lock().discard();
            }
        }
        for (oid, dep) in txn.deps {
            if let Some(dep) = self.tables.get_mut(&oid).and_then(|t| t.deps.get_mut(&dep)) {
                dep.interrupted(xid);
            }
        }
        for (oid, id) in std::mem::take(&mut self.queueing) {
            let sq = self
                .tables
                .get_mut(&oid)
                .and_then(|t| t.slots.get_mut(&id))
                .and_then(|s| s.subquery.as_mut());
            if let Some(sq) = sq {
                sq.open = None;
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
        if !slot.feed.is_snapshotting() {
            return;
        }
        let current = self.txn.as_ref().map(|t| t.xid);
        let result = crate::blocking::in_place(|| -> syncline_storage::Result<()> {
            slot.feed.go_live(current, &mut WriterLog(&slot.shape))?;
            let durable = slot.shape.writer.lock().get()?.flush()?;
            slot.shape.update(|s| {
                s.durable = durable;
                s.snapshot_done = true;
            });
            Ok(())
        });
        self.holds.remove(&(oid, id));
        if let Err(e) = result {
            self.storage_failed(oid, id, e);
            return;
        }
        self.subquery_live((oid, id));
    }

    /// A shape's log could not be written. Out of space (or quota) or of file descriptors, the
    /// pipeline stops before acknowledging anything more, and is started again once a write
    /// succeeds (Postgres keeps the WAL); any other failure is the shape's own: it is
    /// invalidated.
    fn storage_failed(&mut self, oid: u32, id: ShapeId, error: StorageError) {
        if let Some(shortage) = Shortage::of(&error) {
            if self.stalled.is_none() {
                self.stalled = Some((shortage, error.to_string()));
            }
        } else {
            self.remove_invalid(oid, id, &format!("storage failed: {error}"));
        }
    }

    fn remove_invalid(&mut self, oid: u32, id: ShapeId, why: &str) {
        let Some(table) = self.tables.get_mut(&oid) else {
            return;
        };
        let Some(slot) = table.remove(id) else {
            return;
        };
        if table.is_unused() {
            self.tables.remove(&oid);
        }
        self.by_handle.remove(&slot.shape.handle);
        self.dirty.remove(&(oid, id));
        self.holds.remove(&(oid, id));
        self.queueing.remove(&(oid, id));
        if let Some(sq) = &slot.subquery {
            self.detach_subquery((oid, id), sq);
        }
        self.invalidate(&slot.shape, why);
    }

    /// Hands a shape the pipeline let go of to the shapes service, which removes it.
    fn invalidate(&self, shape: &Arc<Shape>, why: &str) {
        self.shapes.invalidate(shape, why);
    }
}

/// A shape's log writer as a feed's [`ShapeLog`], opened on first use.
struct WriterLog<'a>(&'a Shape);

impl ShapeLog for WriterLog<'_> {
    fn append(&mut self, messages: &[PendingMessage]) -> syncline_storage::Result<()> {
        let mut writer = self.0.writer.lock();
        writer.get()?.append(&as_messages(messages))?;
        writer.hold_if_over_bound();
        Ok(())
    }

    fn commit(&mut self) -> syncline_storage::Result<()> {
        let mut writer = self.0.writer.lock();
        writer.get()?.commit()?;
        writer.hold_if_over_bound();
        Ok(())
    }

    fn last_committed_lsn(&mut self) -> syncline_storage::Result<u64> {
        crate::blocking::in_place(|| {
            let mut guard = self.0.writer.lock();
            Ok(guard.get()?.last_committed().map_or(0, |o| o.tx))
        })
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

#[cfg(test)]
mod tests {
    use super::Shortage;
    use std::io::Error;

    #[test]
    fn a_shortage_is_found_under_a_storage_error_or_alone() {
        let storage = |errno| syncline_storage::StorageError::Io {
            path: "index".into(),
            source: Error::from_raw_os_error(errno),
        };
        assert_eq!(
            Shortage::of(&storage(libc::EMFILE)),
            Some(Shortage::Descriptors)
        );
        assert_eq!(Shortage::of(&storage(libc::ENOSPC)), Some(Shortage::Space));
        assert_eq!(
            Shortage::of(&Error::from_raw_os_error(libc::ENFILE)),
            Some(Shortage::Descriptors)
        );
        assert_eq!(Shortage::of(&storage(libc::EIO)), None);
        assert_eq!(Shortage::of(&Error::other("no descriptor involved")), None);
    }
}

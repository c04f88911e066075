//! A live shape: its definition, the table it was made on, its log, and the state requests
//! wait on.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use syncline_core::{LogOffset, PgSnapshot, RelationDesc};
use syncline_storage::Reader;

use super::definition::ShapeDefinition;
use super::handle;
use super::logs::Logs;
use super::shared_read::{SharedBatch, SharedRead};
use super::state::{ShapeState, StateCell, StateWatch};
use super::writer::SharedWriter;

/// Readers kept per shape for reuse by requests.
const IDLE_READERS_MAX: usize = 8;

/// A live shape.
#[derive(Debug)]
pub struct Shape {
    /// Its handle (and its log's id in the store).
    pub handle: String,
    /// Its definition.
    pub definition: ShapeDefinition,
    /// The table as it was when the shape was made.
    pub relation: Arc<RelationDesc>,
    /// Its log's writer (opened on first use).
    pub writer: SharedWriter,
    /// The table as it is now, as far as it still fits the shape (nullability may have
    /// changed): what `electric-schema` describes.
    current: Mutex<Arc<RelationDesc>>,
    /// What the initial snapshot saw, once it started: replicated transactions it saw are
    /// skipped.
    visibility: OnceLock<PgSnapshot>,
    logs: Arc<Logs>,
    state: StateCell,
    readers: Mutex<Vec<Reader>>,
    /// The read that requests woken together, or arriving at the log's end, share, by the
    /// state they saw and their offset.
    shared_read: SharedRead<(ShapeState, Option<LogOffset>)>,
    /// The batch of server-sent events that streams woken together share, by the state they
    /// saw and their offset.
    shared_batch: SharedBatch<(ShapeState, LogOffset)>,
    last_used_ms: AtomicU64,
    /// The log's last flush left durable bytes unwritten, so readers do not see them yet
    /// ([`syncline_storage::Writer::set_deferring`]); set and cleared under the writer's lock.
    deferred: AtomicBool,
}

impl Shape {
    /// A shape whose log lives in `logs`, in the given state.
    pub(super) fn new(
        handle: String,
        definition: ShapeDefinition,
        relation: Arc<RelationDesc>,
        logs: Arc<Logs>,
        writer: SharedWriter,
        state: ShapeState,
    ) -> Shape {
        Shape {
            handle,
            definition,
            current: Mutex::new(relation.clone()),
            visibility: OnceLock::new(),
            relation,
            writer,
            logs,
            state: StateCell::new(state),
            readers: Mutex::new(Vec::new()),
            shared_read: SharedRead::default(),
            shared_batch: SharedBatch::default(),
            last_used_ms: AtomicU64::new(now_ms()),
            deferred: AtomicBool::new(false),
        }
    }

    /// What the initial snapshot saw, once it started.
    pub fn visibility(&self) -> Option<PgSnapshot> {
        self.visibility.get().cloned()
    }

    /// Records what the initial snapshot saw (once).
    pub(super) fn set_visibility(&self, visibility: PgSnapshot) {
        let _ = self.visibility.set(visibility);
    }

    /// The table as `electric-schema` describes it: as it is now.
    pub fn schema_relation(&self) -> Arc<RelationDesc> {
        self.current.lock().expect("current relation lock").clone()
    }

    /// Follows the table as the catalog describes it `now`, if the shape still fits it (a
    /// change the shape does not survive is handled by invalidating it). A description the
    /// shape already follows costs a comparison: Postgres describes a table again on every
    /// new replication session, and every shape on it hears of it.
    pub fn refresh(&self, now: &Arc<RelationDesc>) {
        let follows = |current: &Arc<RelationDesc>| Arc::ptr_eq(current, now) || **current == **now;
        if now.oid != self.relation.oid || follows(&self.schema_relation()) {
            return;
        }
        if self.definition.fits(&self.relation, now) {
            let mut current = self.current.lock().expect("current relation lock");
            if !follows(&current) {
                *current = now.clone();
            }
        }
    }

    /// Records a request for the shape (eviction drops the least recently used).
    pub fn touch(&self) {
        self.last_used_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// When the shape was made, in microseconds since the Unix epoch (from its handle).
    pub fn made_us(&self) -> u64 {
        handle::minted_us(&self.handle)
    }

    /// When the shape was last requested, in milliseconds since the Unix epoch.
    pub fn last_used(&self) -> u64 {
        self.last_used_ms.load(Ordering::Relaxed)
    }

    /// The current state.
    pub fn state(&self) -> ShapeState {
        self.state.get()
    }

    /// A waiter that wakes on every state change. A log flushed with bytes left unwritten
    /// has them written first, so that the waiter reads every durable change: either this
    /// sees the flag [`Shape::flushed`] set, or that flush sees this waiter (both `SeqCst`, the
    /// waiter counted first) and writes them itself.
    pub fn subscribe(&self) -> StateWatch<'_> {
        let watch = self.state.watch();
        if let Err(e) = self.write_deferred() {
            tracing::warn!(handle = %self.handle, error = %e, "writing a shape log's deferred changes failed");
        }
        watch
    }

    /// Records a flush of the log by the pipeline, which holds its writer locked: publishes the
    /// end readers find, after writing the bytes the flush left in memory if a request waits.
    pub fn flushed(&self, writer: &mut syncline_storage::Writer) -> syncline_storage::Result<()> {
        if writer.has_deferred() {
            self.deferred.store(true, Ordering::SeqCst);
            if self.has_waiters() {
                writer.write_deferred()?;
                self.deferred.store(false, Ordering::SeqCst);
            }
        }
        let readable = writer.readable_offset();
        self.update(|s| s.durable = s.durable.max(readable));
        Ok(())
    }

    /// Writes the bytes the log's last flush left in memory, if it did, and publishes the end
    /// readers now find (blocks on the writer's lock and the writes). A writer closed or
    /// dropped since then opens again: closing wrote the bytes, recovery writes them. A
    /// writer that had to open its files closes them again if more are open than their bound.
    pub fn write_deferred(&self) -> syncline_storage::Result<()> {
        if !self.deferred.load(Ordering::SeqCst) {
            return Ok(());
        }
        crate::blocking::in_place(|| {
            let mut guard = self.writer.lock();
            if !self.deferred.swap(false, Ordering::SeqCst) || self.state().gone {
                return Ok(());
            }
            let writer = guard.get()?;
            writer.write_deferred()?;
            let readable = writer.readable_offset();
            // As after the pipeline's use: a request does not leave more writers open than
            // their bound (each request would open one, and descriptors run out).
            guard.hold_if_over_bound();
            self.update(|s| s.durable = s.durable.max(readable));
            Ok(())
        })
    }

    /// Changes the state and wakes waiters.
    pub fn update(&self, f: impl FnOnce(&mut ShapeState)) {
        self.state.modify(f);
    }

    /// Makes sure the shape knows where its log ends before a request reads from `from`
    /// (`None`: from the start, or `offset=now`). The writer opens a restored shape's log the
    /// first time a request needs that. A server that is not the writer reads the end from the
    /// files when it knows none yet, or an older one than `from` (a client that read from the
    /// writer may be ahead of what the follower has noticed); otherwise the follower keeps it.
    pub fn load_end(&self, from: Option<LogOffset>) -> syncline_storage::Result<()> {
        let st = self.state();
        if !self.logs.is_writable() {
            let behind = match (st.durable, from) {
                (None, _) | (_, None) => true,
                (Some(durable), Some(from)) => from > durable,
            };
            return if behind {
                crate::blocking::in_place(|| self.follow_end())
            } else {
                Ok(())
            };
        }
        self.write_deferred()?;
        if st.durable.is_some() || !st.snapshot_done {
            return Ok(());
        }
        crate::blocking::in_place(|| {
            let durable = self.writer.lock().get()?.readable_offset();
            self.update(|s| s.durable = s.durable.max(durable));
            Ok(())
        })
    }

    /// Reads where the log ends from its files and publishes it (waiting requests wake): how a
    /// server that is not the writer follows the writer. The end is the last commit the writer
    /// has written, which it does just before syncing it. Blocks on file reads.
    pub fn follow_end(&self) -> syncline_storage::Result<()> {
        let end = self.with_reader(Reader::end)?;
        if let Some(last) = end.last_committed {
            self.state.modify_if(|s| {
                let newer = s.durable.is_none_or(|d| d < last);
                if newer {
                    s.durable = Some(last);
                }
                newer
            });
        }
        Ok(())
    }

    /// Whether a request waits on the shape's state now.
    pub fn has_waiters(&self) -> bool {
        self.state.watchers() > 0
    }

    /// Reads the log from `from` for a request that saw the shape's state `seen` (one that a
    /// change woke, or one at the log's end): requests that saw the same state and read from
    /// the same offset share one read, and its body's bytes when they were read for all (see
    /// [`SharedRead`]). The caller holds a watch of the shape's state.
    pub fn read_shared(
        &self,
        seen: ShapeState,
        from: Option<LogOffset>,
    ) -> syncline_storage::Result<(syncline_storage::ReadResult, Option<bytes::Bytes>)> {
        let others_waiting = self.state.watchers().saturating_sub(1);
        self.shared_read.read((seen, from), others_waiting, || {
            self.with_reader(|r| r.read(from))
        })
    }

    /// The batch of server-sent events after `from` for a stream that a change woke, having
    /// seen the shape's state `seen`, and where it ends (`None`: nothing new): streams that
    /// saw the same state and read from the same offset share one batch, `frame`d once (see
    /// [`SharedBatch`]).
    pub fn sse_batch_shared(
        &self,
        seen: ShapeState,
        from: LogOffset,
        frame: impl FnOnce() -> std::io::Result<Option<(Vec<u8>, LogOffset)>>,
    ) -> std::io::Result<Option<(bytes::Bytes, LogOffset)>> {
        self.shared_batch.get((seen, from), frame)
    }

    /// Drops the readers kept for reuse, and the read and batch kept for woken requests and
    /// streams, if no request came since `since_ms` (milliseconds since the Unix epoch): an
    /// idle shape keeps none (a reader holds its log's path and index entries). Returns
    /// whether readers were dropped.
    pub fn release_readers_unused_since(&self, since_ms: u64) -> bool {
        if self.last_used() >= since_ms {
            return false;
        }
        self.shared_read.clear();
        self.shared_batch.clear();
        let mut idle = self.readers.lock().expect("readers lock");
        let had = idle.capacity() > 0;
        *idle = Vec::new();
        had
    }

    /// Runs `f` with a reader of the shape's log, reusing an idle one when possible.
    pub fn with_reader<T>(
        &self,
        f: impl FnOnce(&mut Reader) -> syncline_storage::Result<T>,
    ) -> syncline_storage::Result<T> {
        let idle = self.readers.lock().expect("readers lock").pop();
        let mut reader = match idle {
            Some(r) => r,
            None => self.logs.open_reader(&self.handle)?,
        };
        let result = f(&mut reader);
        if result.is_ok() {
            let mut idle = self.readers.lock().expect("readers lock");
            if idle.len() < IDLE_READERS_MAX {
                idle.push(reader);
            }
        }
        result
    }
}

/// Milliseconds since the Unix epoch, the clock of [`Shape::last_used`].
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

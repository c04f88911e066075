//! The shape logs: the store and the settings every writer is opened with, shared by every
//! shape so each can open its own writer and readers. The store is read-only until this server
//! holds the writer's lock ([`Logs::become_writer`]), and again after it lost it
//! ([`Logs::become_reader`]): a read-only store refuses every write.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use tokio::sync::Notify;

use syncline_storage::{Reader, Store, Writer, WriterOptions};

/// The probe file of [`Logs::probe_writable`] (a dot name: never a shape's).
const PROBE_FILE: &str = ".write-probe";
/// Bytes the probe writes: room for a little more than one transaction's flush.
const PROBE_BYTES: usize = 1 << 20;

/// The store of shape logs, with the writer settings, and the count of writers in each
/// [`WriterState`].
#[derive(Debug)]
pub struct Logs {
    store: RwLock<Store>,
    options: WriterOptions,
    /// Writers in each state now, by [`WriterState::index`].
    counts: [AtomicUsize; 3],
    /// How many writers are kept open and held.
    open_bound: OpenBound,
    /// Writers kept parked before the least recently used are closed.
    parked_bound: usize,
    /// A logical clock for writers' last use.
    clock: AtomicU64,
    /// Woken when a writer enters a state past its bound, or descriptors ran out.
    over_bound: Notify,
    /// The process ran out of descriptors: every idle open or held writer is to be parked.
    shed: AtomicBool,
    /// Another server follows the files ([`Logs::refresh_followed`]): flushes write every
    /// byte, since its requests cannot ask this server to.
    followed: AtomicBool,
}

/// What an existing writer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterState {
    /// In use: its files open as it writes them (up to six descriptors).
    Open,
    /// Its files closed and its lock kept ([`syncline_storage::Writer::close_files`]): one
    /// descriptor; it goes on without opening or checking anything but the files it writes.
    Held,
    /// Its files and lock released ([`syncline_storage::Writer::park`]): no descriptor; it
    /// goes on after taking the lock again and checking the log.
    Parked,
}

impl WriterState {
    fn index(self) -> usize {
        match self {
            WriterState::Open => 0,
            WriterState::Held => 1,
            WriterState::Parked => 2,
        }
    }
}

/// How many writers to keep, open, held and parked.
#[derive(Debug, Clone)]
pub struct WriterBounds {
    /// Writers kept open and held.
    pub open: OpenBound,
    /// Writers kept parked (no descriptor, about a kilobyte of memory each).
    pub parked: usize,
}

/// Descriptors an open writer holds at most.
const OPEN_WRITER_DESCRIPTORS: usize = 6;
/// Open writers kept whatever the descriptors.
const OPEN_WRITERS_MIN: usize = 16;
/// Descriptors a bound leaves to everything but logs and connections, at least.
const RESERVED_DESCRIPTORS_MIN: usize = 256;

/// How many writers are kept open and how many held, from the descriptors: of `open_files`, a
/// quarter (at least 256) is kept for everything else (Postgres connections, readers, a burst
/// of new connections), one goes to each connection open now, and the rest to writers, six to
/// each open one and one to each held one. Open writers take what the held ones leave (at least
/// 16, or `--open-logs-max`); held writers take what the open ones leave at their least. So a
/// few thousand logs all stay open, and past that open writers give way to held ones, which
/// cost a sixth of the descriptors and go on by opening only the files they write: a writer is
/// parked (and its next use checks the log) only when descriptors run short of one for each.
/// Writers past it are held or parked as connections come, and every idle one when accepting
/// a connection finds no descriptor ([`Logs::shed`]).
#[derive(Debug, Clone)]
pub struct OpenBound {
    /// The process's open-files limit.
    pub open_files: usize,
    /// The HTTP connections open now.
    pub connections: Arc<AtomicUsize>,
    /// Writers kept open, if fixed (`--open-logs-max`).
    pub open_max: Option<usize>,
    /// Writers kept held, if fixed (`--held-logs-max`).
    pub held_max: Option<usize>,
}

impl OpenBound {
    /// Descriptors left to writers now.
    fn descriptors(&self) -> usize {
        self.open_files
            .saturating_sub((self.open_files / 4).max(RESERVED_DESCRIPTORS_MIN))
            .saturating_sub(self.connections.load(Ordering::Relaxed))
    }

    /// Writers kept open now, with `held` writers held.
    pub fn open(&self, held: usize) -> usize {
        self.open_max.unwrap_or_else(|| {
            (self.descriptors().saturating_sub(held) / OPEN_WRITER_DESCRIPTORS)
                .max(OPEN_WRITERS_MIN)
        })
    }

    /// Writers kept held now: the descriptors the open ones leave at their least.
    pub fn held(&self) -> usize {
        self.held_max.unwrap_or_else(|| {
            let open_least = self.open_max.unwrap_or(OPEN_WRITERS_MIN);
            self.descriptors()
                .saturating_sub(OPEN_WRITER_DESCRIPTORS * open_least)
        })
    }
}

impl Logs {
    /// The logs in `store` (read-only or not), written with `options`, with about `bounds`
    /// writers open, held and parked at most.
    pub fn new(store: Store, options: WriterOptions, bounds: WriterBounds) -> Logs {
        Logs {
            store: RwLock::new(store),
            options,
            counts: Default::default(),
            open_bound: bounds.open,
            parked_bound: bounds.parked,
            clock: AtomicU64::new(0),
            over_bound: Notify::new(),
            shed: AtomicBool::new(false),
            followed: AtomicBool::new(false),
        }
    }

    fn store(&self) -> Store {
        self.store.read().expect("store lock").clone()
    }

    /// Whether logs may be written (this server holds the writer's lock).
    pub fn is_writable(&self) -> bool {
        !self.store.read().expect("store lock").is_read_only()
    }

    /// Opens the store for writing (finishing deletions a crashed writer left, replaying its
    /// group journal); waits, up to [`syncline_storage::GROUP_JOURNAL_RELEASE_WAIT_MAX`], for a
    /// previous writer that lost the lock but still holds its group journal to let go.
    pub fn become_writer(&self) -> syncline_storage::Result<()> {
        let root = self.store().root().to_owned();
        let store = crate::blocking::in_place(|| Store::open(root))?;
        *self.store.write().expect("store lock") = store;
        Ok(())
    }

    /// Makes the store read-only again (this server stops writing): no writer is opened from
    /// now on; those already open are closed or dropped by their owners.
    pub fn become_reader(&self) {
        let read_only = self.store().to_read_only();
        *self.store.write().expect("store lock") = read_only;
    }

    /// Marks this server as a follower of the logs' writer until the mark is dropped.
    pub fn mark_follower(&self) -> syncline_storage::Result<syncline_storage::FollowerMark> {
        self.store().mark_follower()
    }

    /// Looks again whether another server follows the files; returns whether one does. When
    /// it cannot tell, it assumes one does.
    pub fn refresh_followed(&self) -> bool {
        let followed = self.store().is_followed().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot tell whether another server follows the shape logs; writing every change to them at once");
            true
        });
        self.followed.store(followed, Ordering::Relaxed);
        followed
    }

    /// Whether another server followed the files when last looked ([`Logs::refresh_followed`]).
    pub fn followed(&self) -> bool {
        self.followed.load(Ordering::Relaxed)
    }

    /// The directory of the log `handle` (what a follower watches).
    pub fn dir(&self, handle: &str) -> std::path::PathBuf {
        self.store().root().join(handle)
    }

    /// The next tick of the writers' clock.
    pub fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// A writer went from state `from` to `to` (`None`: not open at all, before or after).
    pub fn writer_moved(&self, from: Option<WriterState>, to: Option<WriterState>) {
        if let Some(from) = from {
            let before = self.counts[from.index()].fetch_sub(1, Ordering::Relaxed);
            assert!(before > 0, "more writers left {from:?} than entered it");
        }
        if let Some(to) = to {
            let now = self.counts[to.index()].fetch_add(1, Ordering::Relaxed) + 1;
            if now > self.bound(to) {
                self.over_bound.notify_one();
            }
        }
    }

    /// The process ran out of file descriptors (accepting a connection failed): every idle
    /// open or held writer is to be parked.
    pub fn shed(&self) {
        self.shed.store(true, Ordering::Relaxed);
        self.over_bound.notify_one();
    }

    /// Whether [`Logs::shed`] was called since the last call of this.
    pub fn take_shed(&self) -> bool {
        self.shed.swap(false, Ordering::Relaxed)
    }

    /// Waits until a writer enters a state past its bound, or descriptors ran out.
    pub async fn past_bound(&self) {
        self.over_bound.notified().await;
    }

    /// How many writers are kept in `state` now.
    pub fn bound(&self, state: WriterState) -> usize {
        match state {
            WriterState::Open => self.open_bound.open(self.count(WriterState::Held)),
            WriterState::Held => self.open_bound.held(),
            WriterState::Parked => self.parked_bound,
        }
    }

    /// Writers in `state` now.
    pub fn count(&self, state: WriterState) -> usize {
        self.counts[state.index()].load(Ordering::Relaxed)
    }

    /// How many writers are in `state` past its bound (0 if none).
    pub fn over(&self, state: WriterState) -> usize {
        self.count(state).saturating_sub(self.bound(state))
    }

    /// Creates the log of a new shape.
    pub fn create(&self, handle: &str) -> syncline_storage::Result<Writer> {
        self.store().create_shape(handle, &self.options)
    }

    /// Whether the shape `handle` has a log, complete or not (`false` for text that is no
    /// shape id: a client's handle never names a path).
    pub fn exists(&self, handle: &str) -> bool {
        self.store().has_shape(handle)
    }

    /// Opens the writer of an existing log (recovering it).
    pub fn open_writer(&self, handle: &str) -> syncline_storage::Result<Writer> {
        self.store().open_writer(handle, &self.options)
    }

    /// Opens a reader of an existing log.
    pub fn open_reader(&self, handle: &str) -> syncline_storage::Result<Reader> {
        self.store().open_reader(handle)
    }

    /// Deletes a log.
    pub fn delete(&self, handle: &str) -> syncline_storage::Result<()> {
        self.store().delete_shape(handle)
    }

    /// Checks that the file system takes writes: writes, syncs and removes a probe file of
    /// [`PROBE_BYTES`] beside the logs.
    pub fn probe_writable(&self) -> std::io::Result<()> {
        let store = self.store();
        assert!(!store.is_read_only(), "probing a read-only store");
        let path = store.root().join(PROBE_FILE);
        let result = (|| {
            let mut file = std::fs::File::create(&path)?;
            file.write_all(&vec![0u8; PROBE_BYTES])?;
            file.sync_all()
        })();
        let removed = std::fs::remove_file(&path);
        result.and(removed)
    }

    /// Every stored log's handle.
    pub fn list(&self) -> syncline_storage::Result<Vec<String>> {
        self.store().list_shapes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers_take_what_connections_leave_of_the_descriptors() {
        let connections = Arc::new(AtomicUsize::new(0));
        let bound = OpenBound {
            open_files: 20_000,
            connections: connections.clone(),
            open_max: None,
            held_max: None,
        };
        assert_eq!(bound.open(0), 2_500, "three quarters of 20,000, six each");
        assert_eq!(bound.open(9_000), 1_000, "what held writers leave");
        assert_eq!(bound.held(), 14_904, "what 16 open writers leave");
        connections.store(3_650, Ordering::Relaxed);
        assert_eq!((bound.open(0), bound.held()), (1_891, 11_254));
        connections.store(15_000, Ordering::Relaxed);
        assert_eq!(bound.open(0), OPEN_WRITERS_MIN, "never below the minimum");
        assert_eq!(bound.held(), 0);
        let small = OpenBound {
            open_files: 1_024,
            connections: Arc::new(AtomicUsize::new(100)),
            open_max: None,
            held_max: None,
        };
        assert_eq!(
            (small.open(0), small.held()),
            (111, 572),
            "256 kept for the rest"
        );
        let fixed = OpenBound {
            open_max: Some(7),
            ..small
        };
        assert_eq!((fixed.open(500), fixed.held()), (7, 626));
        let both = OpenBound {
            held_max: Some(3),
            ..fixed
        };
        assert_eq!(both.held(), 3);
    }
}

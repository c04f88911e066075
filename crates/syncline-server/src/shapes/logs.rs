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

/// The store of shape logs, with the writer settings, and the count of open and parked
/// writers.
#[derive(Debug)]
pub struct Logs {
    store: RwLock<Store>,
    options: WriterOptions,
    /// Writers open now (holding their files).
    open_writers: AtomicUsize,
    /// Writers kept open before the least recently used idle ones are parked.
    open_writers_max: OpenBound,
    /// Writers parked now (no files held; see [`syncline_storage::Writer::park`]).
    parked_writers: AtomicUsize,
    /// Writers kept parked before the least recently used are closed.
    parked_writers_max: usize,
    /// A logical clock for writers' last use.
    clock: AtomicU64,
    /// Woken when a writer opens or parks past a bound, or descriptors ran out.
    over_bound: Notify,
    /// The process ran out of descriptors: every idle open writer is to be parked.
    shed: AtomicBool,
}

/// How many writers to keep, open and parked.
#[derive(Debug, Clone)]
pub struct WriterBounds {
    /// Writers kept open (six descriptors each at most).
    pub open: OpenBound,
    /// Writers kept parked (no descriptor, about a kilobyte of memory each).
    pub parked: usize,
}

/// Descriptors an open writer holds at most.
const OPEN_WRITER_DESCRIPTORS: usize = 6;
/// Open writers kept whatever the descriptors.
const OPEN_WRITERS_MIN: usize = 16;
/// Descriptors a shared bound leaves to everything but logs and connections, at least.
const RESERVED_DESCRIPTORS_MIN: usize = 256;

/// How many writers are kept open.
#[derive(Debug, Clone)]
pub enum OpenBound {
    /// This many.
    Fixed(usize),
    /// As many as the descriptors the connections leave allow: of `open_files`, a quarter (at
    /// least 256) is kept for everything else (Postgres connections, readers, a burst of new
    /// connections),
    /// one goes to each connection open now (`connections`), and six to each writer; at least
    /// 16. Writers past it are parked as connections come, and every idle one when accepting a
    /// connection finds no descriptor ([`Logs::shed`]).
    Shared {
        /// The process's open-files limit.
        open_files: usize,
        /// The HTTP connections open now.
        connections: Arc<AtomicUsize>,
    },
}

impl OpenBound {
    /// The bound now.
    pub fn get(&self) -> usize {
        match self {
            OpenBound::Fixed(n) => *n,
            OpenBound::Shared {
                open_files,
                connections,
            } => {
                let left = open_files
                    .saturating_sub((open_files / 4).max(RESERVED_DESCRIPTORS_MIN))
                    .saturating_sub(connections.load(Ordering::Relaxed));
                (left / OPEN_WRITER_DESCRIPTORS).max(OPEN_WRITERS_MIN)
            }
        }
    }
}

impl Logs {
    /// The logs in `store` (read-only or not), written with `options`, with about `bounds`
    /// writers open and parked at most.
    pub fn new(store: Store, options: WriterOptions, bounds: WriterBounds) -> Logs {
        Logs {
            store: RwLock::new(store),
            options,
            open_writers: AtomicUsize::new(0),
            open_writers_max: bounds.open,
            parked_writers: AtomicUsize::new(0),
            parked_writers_max: bounds.parked,
            clock: AtomicU64::new(0),
            over_bound: Notify::new(),
            shed: AtomicBool::new(false),
        }
    }

    fn store(&self) -> Store {
        self.store.read().expect("store lock").clone()
    }

    /// Whether logs may be written (this server holds the writer's lock).
    pub fn is_writable(&self) -> bool {
        !self.store.read().expect("store lock").is_read_only()
    }

    /// Opens the store for writing (finishing deletions a crashed writer left).
    pub fn become_writer(&self) -> syncline_storage::Result<()> {
        let root = self.store().root().to_owned();
        *self.store.write().expect("store lock") = Store::open(root)?;
        Ok(())
    }

    /// Makes the store read-only again (this server stops writing): no writer is opened from
    /// now on; those already open are closed or dropped by their owners.
    pub fn become_reader(&self) {
        let read_only = self.store().to_read_only();
        *self.store.write().expect("store lock") = read_only;
    }

    /// The directory of the log `handle` (what a follower watches).
    pub fn dir(&self, handle: &str) -> std::path::PathBuf {
        self.store().root().join(handle)
    }

    /// The next tick of the writers' clock.
    pub fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// A writer was opened, or a parked one resumed (`resumed`).
    pub fn writer_opened(&self, resumed: bool) {
        if resumed {
            let before = self.parked_writers.fetch_sub(1, Ordering::Relaxed);
            assert!(before > 0, "more writers resumed than parked");
        }
        let open = self.open_writers.fetch_add(1, Ordering::Relaxed) + 1;
        if open > self.open_writers_max.get() {
            self.over_bound.notify_one();
        }
    }

    /// An open writer was parked.
    pub fn writer_parked(&self) {
        let before = self.open_writers.fetch_sub(1, Ordering::Relaxed);
        assert!(before > 0, "more writers parked than open");
        let parked = self.parked_writers.fetch_add(1, Ordering::Relaxed) + 1;
        if parked > self.parked_writers_max {
            self.over_bound.notify_one();
        }
    }

    /// The process ran out of file descriptors (accepting a connection failed): every idle
    /// open writer is to be parked.
    pub fn shed(&self) {
        self.shed.store(true, Ordering::Relaxed);
        self.over_bound.notify_one();
    }

    /// Whether [`Logs::shed`] was called since the last call of this.
    pub fn take_shed(&self) -> bool {
        self.shed.swap(false, Ordering::Relaxed)
    }

    /// Waits until a writer opens or parks past its bound, or descriptors ran out.
    pub async fn past_bound(&self) {
        self.over_bound.notified().await;
    }

    /// A writer was closed or dropped, open or parked (`parked`).
    pub fn writer_closed(&self, parked: bool) {
        let count = if parked {
            &self.parked_writers
        } else {
            &self.open_writers
        };
        let before = count.fetch_sub(1, Ordering::Relaxed);
        assert!(before > 0, "more writers closed than opened");
    }

    /// How many writers are open past their bound (0 if none).
    pub fn open_writers_over(&self) -> usize {
        self.open_writers
            .load(Ordering::Relaxed)
            .saturating_sub(self.open_writers_max.get())
    }

    /// How many writers are parked past their bound (0 if none).
    pub fn parked_writers_over(&self) -> usize {
        self.parked_writers
            .load(Ordering::Relaxed)
            .saturating_sub(self.parked_writers_max)
    }

    /// How many writers are kept open now.
    pub fn open_bound(&self) -> usize {
        self.open_writers_max.get()
    }

    /// How many writers are kept parked.
    pub fn parked_bound(&self) -> usize {
        self.parked_writers_max
    }

    /// Writers open now.
    pub fn open_writers(&self) -> usize {
        self.open_writers.load(Ordering::Relaxed)
    }

    /// Writers parked now.
    pub fn parked_writers(&self) -> usize {
        self.parked_writers.load(Ordering::Relaxed)
    }

    /// Creates the log of a new shape.
    pub fn create(&self, handle: &str) -> syncline_storage::Result<Writer> {
        self.store().create_shape(handle, &self.options)
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
    fn a_shared_bound_leaves_logs_what_connections_do_not_take() {
        let connections = Arc::new(AtomicUsize::new(0));
        let bound = OpenBound::Shared {
            open_files: 20_000,
            connections: connections.clone(),
        };
        assert_eq!(bound.get(), 2_500, "three quarters of 20,000, six each");
        connections.store(3_650, Ordering::Relaxed);
        assert_eq!(bound.get(), 1_891);
        connections.store(15_000, Ordering::Relaxed);
        assert_eq!(bound.get(), OPEN_WRITERS_MIN, "never below the minimum");
        let small = OpenBound::Shared {
            open_files: 1_024,
            connections: Arc::new(AtomicUsize::new(100)),
        };
        assert_eq!(small.get(), 111, "256 kept for the rest at a small limit");
        assert_eq!(OpenBound::Fixed(7).get(), 7);
    }
}

//! Replication progress as the rest of the server sees it: the last commit the pipeline
//! processed and the last position acknowledged to Postgres as durable.

use std::sync::atomic::{AtomicU64, Ordering};

use syncline_core::Lsn;

/// The pipeline's positions, readable from any task.
#[derive(Debug, Default)]
pub struct Progress {
    last_seen: AtomicU64,
    flushed: AtomicU64,
}

impl Progress {
    /// The pipeline processed a commit at `lsn` (or, at start, everything up to it).
    pub fn observe_lsn(&self, lsn: Lsn) {
        self.last_seen.fetch_max(lsn.0, Ordering::Relaxed);
    }

    /// The pipeline acknowledged `lsn` to Postgres.
    pub fn observe_flushed(&self, lsn: Lsn) {
        self.flushed.fetch_max(lsn.0, Ordering::Relaxed);
    }

    /// The last commit LSN the pipeline processed (Electric's `global_last_seen_lsn`).
    pub fn last_seen_lsn(&self) -> u64 {
        self.last_seen.load(Ordering::Relaxed)
    }

    /// The last LSN acknowledged to Postgres.
    pub fn flushed_lsn(&self) -> u64 {
        self.flushed.load(Ordering::Relaxed)
    }
}

//! Replication progress as the rest of the server sees it: the last commit the pipeline
//! processed and the last position acknowledged to Postgres as durable.
//!
//! The writer publishes both in the storage directory's `progress` file after every flush
//! ([`Progress::publish`]); standbys and replicas read them from there ([`Progress::follow`]),
//! so what they answer (`global_last_seen_lsn`, which offsets exist) is what the writer would.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use syncline_core::Lsn;

/// Bytes of the `progress` file: the two positions, twice (a read that does not find both
/// copies equal met a write in progress and is ignored).
const FILE_BYTES: usize = 32;

/// The pipeline's positions, readable from any task.
#[derive(Debug)]
pub struct Progress {
    last_seen: AtomicU64,
    flushed: AtomicU64,
    /// Where the writer publishes them.
    file: PathBuf,
}

impl Progress {
    /// Positions published in (or followed from) the file `file`.
    pub fn new(file: PathBuf) -> Progress {
        Progress {
            last_seen: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            file,
        }
    }

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

    /// Writes the positions to the `progress` file (the writer, after a flush; not synced: a
    /// crash loses at most what the next writer publishes again).
    pub fn publish(&self) -> io::Result<()> {
        let (seen, flushed) = (self.last_seen_lsn(), self.flushed_lsn());
        let mut bytes = [0u8; FILE_BYTES];
        for copy in bytes.chunks_exact_mut(16) {
            copy[..8].copy_from_slice(&seen.to_le_bytes());
            copy[8..].copy_from_slice(&flushed.to_le_bytes());
        }
        let file = File::options()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.file)?;
        file.write_all_at(&bytes, 0)
    }

    /// Reads the positions the writer published (a standby or replica).
    pub fn follow(&self) -> io::Result<()> {
        let mut bytes = [0u8; FILE_BYTES];
        match File::open(&self.file).and_then(|f| f.read_exact_at(&mut bytes, 0)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let (first, second) = bytes.split_at(16);
        if first == second {
            let word = |i: usize| u64::from_le_bytes(first[i..i + 8].try_into().expect("8 bytes"));
            self.observe_lsn(Lsn(word(0)));
            self.observe_flushed(Lsn(word(8)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_reads_what_the_writer_published() {
        let dir = tempfile::tempdir().unwrap();
        let writer = Progress::new(dir.path().join("progress"));
        let follower = Progress::new(dir.path().join("progress"));
        follower.follow().unwrap();
        assert_eq!(follower.last_seen_lsn(), 0, "nothing published yet");
        writer.observe_lsn(Lsn(500));
        writer.observe_flushed(Lsn(400));
        writer.publish().unwrap();
        follower.follow().unwrap();
        assert_eq!(
            (follower.last_seen_lsn(), follower.flushed_lsn()),
            (500, 400)
        );
        std::fs::write(dir.path().join("progress"), [7u8; FILE_BYTES - 1]).unwrap();
        follower.follow().unwrap();
        assert_eq!(follower.last_seen_lsn(), 500, "a short file is ignored");
    }
}

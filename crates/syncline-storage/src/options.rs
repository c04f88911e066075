//! A writer's settings and their defaults.

use std::sync::Arc;

use crate::io::FaultPlan;

/// Default JSON bytes after which a chunk closes (10 MiB, Electric's default).
pub const CHUNK_BYTES_MAX_DEFAULT: u64 = 10 * 1024 * 1024;
/// Default bytes a writer buffers before writing them to its files (without syncing).
pub const WRITE_BUFFER_BYTES_MAX_DEFAULT: usize = 256 * 1024;
/// Default bytes the journal takes between two syncs: a flush of up to this much costs one
/// `fdatasync` (a device flush, ~0.1-5 ms); beyond, writes are synced in place, so that a large
/// flush is not written twice.
pub const JOURNAL_BYTES_MAX_DEFAULT: usize = 512 * 1024;

/// Settings of a writer.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// JSON bytes after which a chunk closes; used when the shape is created, then fixed in
    /// its header.
    pub chunk_bytes_max: u64,
    /// Bytes buffered in memory before they are written to the files.
    pub write_buffer_bytes_max: usize,
    /// Bytes the journal takes between two syncs; later writes are synced in the chunk files.
    pub journal_bytes_max: usize,
    /// Crash testing: counts and can stop every write boundary.
    pub fault_plan: Option<Arc<FaultPlan>>,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            chunk_bytes_max: CHUNK_BYTES_MAX_DEFAULT,
            write_buffer_bytes_max: WRITE_BUFFER_BYTES_MAX_DEFAULT,
            journal_bytes_max: JOURNAL_BYTES_MAX_DEFAULT,
            fault_plan: None,
        }
    }
}

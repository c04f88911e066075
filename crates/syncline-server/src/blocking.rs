//! Blocking work (file I/O, fsync) called from async code, on either of the server's runtimes.
//!
//! HTTP, snapshots and the shapes service run on the multi-threaded runtime, whose workers
//! must hand their other tasks to another thread before they block
//! (`tokio::task::block_in_place`). The replication pipeline runs on a thread of its own with
//! a runtime of its own ([`crate::replicate`]): blocking there delays nothing else, and handing
//! over per flush is what it saves (on a worker, each `block_in_place` wakes another thread to
//! take the worker's place).

use tokio::runtime::{Handle, RuntimeFlavor};

/// Runs `f`, which may block: through `block_in_place` on a worker of the multi-threaded
/// runtime, directly anywhere else (the replication thread, outside any runtime).
pub fn in_place<R>(f: impl FnOnce() -> R) -> R {
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

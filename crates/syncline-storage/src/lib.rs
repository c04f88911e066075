//! Syncline's shape-log storage engine.
//!
//! Each shape is a directory of chunks. A chunk holds its messages' JSON bytes back to back in
//! one file (so a response body is one contiguous file range), fixed-width records with offsets
//! and positions in a second, and keys in a third. Closed chunks are immutable and listed in a
//! sparse index of fixed-width entries; the chunks not yet indexed are made durable through a
//! journal, so a small flush costs one `fdatasync` (a large one also syncs the chunk files it
//! wrote in place, rather than writing its bytes twice), and [`flush_all`] makes many logs
//! durable with one `fdatasync` of the store's group journal, to which their journals' new
//! frames are written instead (a checkpoint writes them to the log journals later). One [`Writer`] per shape appends, commits and flushes in batches, and
//! closes so that reopening it skips recovery; any number of [`Reader`]s, in any process, read
//! through the files alone and hold no descriptor between reads, so idle shapes cost no open
//! files. `docs/storage-format.md` specifies the layout, the
//! write order and recovery.
//!
//! ```
//! use syncline_storage::{LogOffset, Message, Operation, Store, WriterOptions};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(dir.path()).unwrap();
//! let mut writer = store.create_shape("items-1", &WriterOptions::default()).unwrap();
//! let json = br#"{"key":"1","value":{"id":"1"},"headers":{"operation":"insert"}}"#;
//! let offset = LogOffset::new(7, 0);
//! writer.append(&[Message { offset, key: b"1", op: Operation::Insert, json }]).unwrap();
//! writer.commit().unwrap();
//! assert_eq!(writer.flush().unwrap(), Some(offset)); // durable: tell Postgres
//!
//! let mut reader = store.open_reader("items-1").unwrap(); // any process, read-only
//! let response = reader.read(None).unwrap();
//! let body = response.body.unwrap(); // a file range: sendfile it, or read it
//! assert_eq!(body.read_to_vec().unwrap(), json);
//! assert_eq!(response.end_offset, Some(offset));
//! assert!(response.up_to_date);
//!
//! writer.close().unwrap(); // the next open_writer resumes without recovery
//! ```
//!
//! **Invariant:** this crate knows nothing of Postgres or HTTP: it stores opaque JSON bytes
//! addressed by [`LogOffset`], with a key and an [`Operation`] used only by compaction.

#![deny(missing_docs)]

mod chunk;
mod compaction;
mod error;
mod followers;
mod format;
mod group_journal;
mod index;
mod io;
mod lazy_file;
mod message;
mod num;
mod options;
mod reader;
mod recovery;
mod shape_lock;
mod store;
mod writer;

pub use compaction::{CompactionStats, MergeFn, COMPACTION_KEEP_CHUNKS_DEFAULT};
pub use error::{Result, StorageError};
pub use followers::FollowerMark;
pub use group_journal::{
    CHECKPOINT_OPEN_JOURNALS_MAX, GROUP_JOURNAL_BYTES_MAX_DEFAULT, GROUP_JOURNAL_RELEASE_WAIT_MAX,
};
pub use io::FaultPlan;
pub use message::{Message, Operation};
pub use options::{
    WriterOptions, CHUNK_BYTES_MAX_DEFAULT, JOURNAL_BYTES_MAX_DEFAULT,
    WRITE_BUFFER_BYTES_MAX_DEFAULT,
};
pub use reader::{FileRange, LogEnd, MessageSpan, Messages, ReadResult, Reader};
pub use store::{Store, SHAPE_ID_BYTES_MAX};
pub use syncline_core::LogOffset;
pub use writer::{flush_all, GroupSync, Writer, GROUP_FLUSH_MIN_LOGS};

/// Longest message key, in bytes.
pub const KEY_BYTES_MAX: usize = 64 * 1024;

/// Bytes of write buffers a writer keeps after a flush, at most: an idle writer holds little
/// memory however large its last transaction was.
pub const IDLE_WRITER_BUFFER_BYTES_MAX: usize = 12 * 1024;

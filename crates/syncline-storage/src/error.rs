//! The crate's error type.

use std::io;
use std::path::{Path, PathBuf};

use syncline_core::LogOffset;

/// Everything that can go wrong in the storage engine.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A system call on a file or directory failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// No shape with this id is stored.
    #[error("shape {0:?} not found")]
    ShapeNotFound(String),
    /// A shape with this id is already stored.
    #[error("shape {0:?} already exists")]
    ShapeExists(String),
    /// Shape ids are 1..=200 bytes of `[A-Za-z0-9_.-]`, not starting with a dot.
    #[error(
        "invalid shape id {0:?}: expected 1..=200 bytes of [A-Za-z0-9_.-], not starting with '.'"
    )]
    InvalidShapeId(String),
    /// Another writer (in this or another process) holds the shape's lock.
    #[error("shape {0:?} already has a writer")]
    WriterBusy(String),
    /// Another writer changed the log while this one was parked ([`crate::Writer::park`]).
    #[error("shape {0:?} was changed by another writer while this one was parked")]
    Changed(String),
    /// A file does not match the documented format.
    #[error("corrupt {path}: {reason}")]
    Corrupt {
        /// The file involved.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// Messages must be appended in strictly increasing offset order.
    #[error("offset {offset} is not after the last appended offset {last}")]
    OffsetNotIncreasing {
        /// The offending offset.
        offset: LogOffset,
        /// The last offset already appended.
        last: LogOffset,
    },
    /// A message key is longer than [`crate::KEY_BYTES_MAX`].
    #[error("key of {0} bytes is longer than the {max} byte limit", max = crate::KEY_BYTES_MAX)]
    KeyTooLong(usize),
    /// Writer options out of range.
    #[error("invalid writer options: {0}")]
    InvalidOptions(String),
    /// The store was opened read-only ([`crate::Store::open_read_only`]): it never writes.
    #[error("the shape store is open read-only: {0} refused")]
    ReadOnly(&'static str),
    /// Another live store still holds this group journal after
    /// [`crate::GROUP_JOURNAL_RELEASE_WAIT_MAX`]: a writer that lost its place has not let go
    /// of the files, and taking them over now could lose what only that journal holds.
    #[error("another process still holds the group journal {0} (a previous writer that has not let go of the shape logs)")]
    GroupJournalHeld(PathBuf),
    /// An earlier I/O failure left the writer in an unknown state; reopen the shape to recover.
    #[error("writer stopped after an earlier failure; reopen the shape to recover")]
    Poisoned,
}

impl StorageError {
    /// The same failure again, for each of several callers it reaches (the group journal's
    /// failure is every log's it held).
    pub(crate) fn duplicate(&self) -> StorageError {
        match self {
            StorageError::Io { path, source } => StorageError::Io {
                path: path.clone(),
                source: io::Error::new(source.kind(), source.to_string()),
            },
            other => StorageError::Io {
                path: PathBuf::new(),
                source: io::Error::other(other.to_string()),
            },
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Attaches a path to an `io::Error`; the path is copied only when there is an error (this
/// wraps every file operation of a flush).
pub(crate) fn io_err<P: AsRef<Path>>(path: P) -> impl FnOnce(io::Error) -> StorageError {
    move |source| StorageError::Io {
        path: path.as_ref().to_path_buf(),
        source,
    }
}

/// Builds a [`StorageError::Corrupt`].
pub(crate) fn corrupt(path: impl Into<PathBuf>, reason: impl Into<String>) -> StorageError {
    StorageError::Corrupt {
        path: path.into(),
        reason: reason.into(),
    }
}

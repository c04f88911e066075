//! The storage root: creating, opening, listing and deleting shapes.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::chunk::{ChunkDir, OpenChunk};
use crate::error::{io_err, Result, StorageError};
use crate::followers::{self, FollowerMark};
use crate::format::{ShapeMeta, INDEX_FILE, META_FILE};
use crate::group_journal::{
    self, GroupJournal, GROUP_JOURNAL_BYTES_MAX_DEFAULT, GROUP_JOURNAL_RELEASE_WAIT_MAX,
};
use crate::io::{try_lock, Io};
use crate::options::WriterOptions;
use crate::reader::Reader;
use crate::recovery::{created, open_writer, read_meta};
use crate::shape_lock::lock_only;
use crate::writer::Writer;

/// Name prefix of a shape directory being deleted.
const DELETING_PREFIX: &str = ".deleting-";
/// Name prefix of a shape directory being created.
const CREATING_PREFIX: &str = ".creating-";
/// Longest shape id, in bytes.
pub const SHAPE_ID_BYTES_MAX: usize = 200;

/// A directory holding one subdirectory per shape.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    /// Opened read-only: every call that would write fails with [`StorageError::ReadOnly`].
    read_only: bool,
    /// Shared by every clone and every writer this store opens.
    group: Arc<GroupJournal>,
}

impl Store {
    /// Opens (creating if needed) the storage root at `root`, finishing deletions a crash
    /// interrupted and replaying every group journal (see [`crate::flush_all`]); one another
    /// live store still holds is waited for, up to [`GROUP_JOURNAL_RELEASE_WAIT_MAX`] (a writer
    /// taking over from one that has not let go yet), then [`StorageError::GroupJournalHeld`].
    /// Only one process writes a store at a time: a second store opened for writing beside a
    /// live one must not open its writers' logs.
    pub fn open(root: impl Into<PathBuf>) -> Result<Store> {
        Store::open_within(root, GROUP_JOURNAL_RELEASE_WAIT_MAX)
    }

    /// [`Store::open`], waiting at most `wait_max` (instead of
    /// [`GROUP_JOURNAL_RELEASE_WAIT_MAX`]) for another live store to let go of its group
    /// journal; [`StorageError::GroupJournalHeld`] past it.
    pub fn open_within(root: impl Into<PathBuf>, wait_max: Duration) -> Result<Store> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(io_err(&root))?;
        remove_dirs_named(&root, DELETING_PREFIX)?;
        group_journal::replay(&root, wait_max)?;
        // Only now that no other store writes here: a creation a crash cut short before its
        // rename, which nobody retries (ids are not reused).
        remove_dirs_named(&root, CREATING_PREFIX)?;
        Ok(Store {
            group: Arc::new(GroupJournal::new(
                root.clone(),
                GROUP_JOURNAL_BYTES_MAX_DEFAULT,
            )),
            root,
            read_only: false,
        })
    }

    /// The same store, its group journal checkpointed (every log journal it covers synced, and
    /// the file written again from its start) once it holds `bytes` bytes instead of
    /// [`GROUP_JOURNAL_BYTES_MAX_DEFAULT`]. Writers opened before keep the old setting.
    pub fn with_group_journal_bytes_max(self, bytes: u64) -> Store {
        Store {
            group: Arc::new(GroupJournal::new(self.root.clone(), bytes)),
            ..self
        }
    }

    /// Opens an existing storage root without creating or changing anything: readers only.
    /// Creating, opening a writer and deleting fail with [`StorageError::ReadOnly`], so a
    /// process that shares the root with a writer can never change its files.
    pub fn open_read_only(root: impl Into<PathBuf>) -> Result<Store> {
        let root = root.into();
        fs::metadata(&root).map_err(io_err(&root))?;
        Ok(Store {
            group: Arc::new(GroupJournal::new(
                root.clone(),
                GROUP_JOURNAL_BYTES_MAX_DEFAULT,
            )),
            root,
            read_only: true,
        })
    }

    /// The same storage root, read-only (no I/O). Writers already open keep their group
    /// journal (the file stays locked until the last of them is gone).
    pub fn to_read_only(&self) -> Store {
        Store {
            root: self.root.clone(),
            read_only: true,
            group: Arc::new(GroupJournal::new(
                self.root.clone(),
                GROUP_JOURNAL_BYTES_MAX_DEFAULT,
            )),
        }
    }

    /// Whether the store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn check_writable(&self, what: &'static str) -> Result<()> {
        if self.read_only {
            return Err(StorageError::ReadOnly(what));
        }
        Ok(())
    }

    /// The storage root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Marks this process as following the store's writer (reading its logs, never writing
    /// them) until the mark is dropped; works on a read-only store (it writes only the mark).
    pub fn mark_follower(&self) -> Result<FollowerMark> {
        followers::mark(&self.root)
    }

    /// Whether a live follower marks the store ([`Store::mark_follower`]): its writer should
    /// then leave no durable byte unwritten ([`crate::Writer::set_deferring`]).
    pub fn is_followed(&self) -> Result<bool> {
        followers::followed(&self.root)
    }

    /// Creates a shape's storage and returns its writer. The shape appears atomically: it is
    /// built in a hidden directory, then renamed into place. Nothing is synced: the writer's
    /// first flush makes the shape durable with its first commits (its files, its directory
    /// and the root's entry synced together). Until that flush returns, a crash may leave the
    /// shape absent, or present but incomplete: [`Store::open_writer`] may then fail on it, and
    /// [`Store::delete_shape`] removes it.
    pub fn create_shape(&self, shape: &str, options: &WriterOptions) -> Result<Writer> {
        self.check_writable("creating a shape")?;
        let dir = self.shape_dir(shape)?;
        if dir.exists() {
            return Err(StorageError::ShapeExists(shape.into()));
        }
        if options.chunk_bytes_max == 0 {
            return Err(StorageError::InvalidOptions(
                "chunk_bytes_max must be positive".into(),
            ));
        }
        let io = Io::new(options.fault_plan.clone());
        let tmp = self.root.join(format!("{CREATING_PREFIX}{shape}"));
        if let Err(e) = fs::create_dir(&tmp) {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                return Err(io_err(&tmp)(e));
            }
            fs::remove_dir_all(&tmp).map_err(io_err(&tmp))?;
            fs::create_dir(&tmp).map_err(io_err(&tmp))?;
        }
        let meta_path = tmp.join(META_FILE);
        let meta = ShapeMeta {
            chunk_bytes_max: options.chunk_bytes_max,
        };
        let lock = io.create(&meta_path)?;
        io.write_at(&lock, &meta_path, 0, &meta.encode())?;
        // Locked before the directory takes its name, so no other writer can take it between.
        assert!(
            try_lock(&lock).map_err(io_err(&meta_path))?,
            "nothing else has a new shape's files open"
        );
        let index = io.create(&tmp.join(INDEX_FILE))?;
        let mut tail = OpenChunk::create(
            &io,
            (&tmp, ChunkDir::Hidden),
            0,
            None,
            options.journal_bytes_max,
        )?;
        io.rename(&tmp, &dir)?;
        tail.moved_to(&dir);
        let mut writer = created(&dir, io, (lock, meta), index, tail, options);
        writer.created_unsynced = true;
        writer.dir_dirty = true;
        Ok(self.with_group(writer))
    }

    /// Opens an existing shape for writing, first cutting it back to its last durable commit.
    /// After a [`Writer::close`] that left a close record this writes nothing and scans nothing;
    /// otherwise it runs recovery (see `docs/storage-format.md`).
    pub fn open_writer(&self, shape: &str, options: &WriterOptions) -> Result<Writer> {
        self.check_writable("opening a writer")?;
        let dir = self.shape_dir(shape)?;
        let writer = open_writer(&dir, shape, options, || self.group.apply_shape(shape))?;
        Ok(self.with_group(writer))
    }

    /// `writer`, flushed through this store's group journal in a group flush.
    fn with_group(&self, mut writer: Writer) -> Writer {
        writer.group = Some(self.group.clone());
        writer
    }

    /// Whether the shape's directory exists (`false` for an invalid shape id).
    pub fn has_shape(&self, shape: &str) -> bool {
        self.shape_dir(shape).is_ok_and(|dir| dir.is_dir())
    }

    /// Opens a reader of a shape; works on a read-only storage root and beside a live writer.
    pub fn open_reader(&self, shape: &str) -> Result<Reader> {
        let dir = self.shape_dir(shape)?;
        let meta = dir.join(META_FILE);
        if !meta.exists() {
            return Err(StorageError::ShapeNotFound(shape.into()));
        }
        read_meta(&meta)?;
        Ok(Reader::new(dir))
    }

    /// Deletes a shape that has no writer, whatever state a crash left it in. Readers with open
    /// files keep reading them.
    pub fn delete_shape(&self, shape: &str) -> Result<()> {
        self.check_writable("deleting a shape")?;
        let dir = self.shape_dir(shape)?;
        let _lock = match lock_only(&dir, shape) {
            // A creation cut short by a crash, before its first flush, can leave the directory
            // without `shape.meta`: no writer holds it, since a writer keeps that file open.
            Err(StorageError::ShapeNotFound(_)) if dir.is_dir() => None,
            locked => Some(locked?),
        };
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let doomed = self.root.join(format!("{DELETING_PREFIX}{shape}-{nanos}"));
        fs::rename(&dir, &doomed).map_err(io_err(&dir))?;
        Io::default().sync_dir(&self.root)?;
        fs::remove_dir_all(&doomed).map_err(io_err(&doomed))
    }

    /// Ids of the stored shapes, from directory names alone (nothing is opened or loaded).
    pub fn list_shapes(&self) -> Result<Vec<String>> {
        let mut shapes = Vec::new();
        for dirent in fs::read_dir(&self.root).map_err(io_err(&self.root))? {
            let dirent = dirent.map_err(io_err(&self.root))?;
            let name = dirent.file_name().to_string_lossy().into_owned();
            if valid_shape_id(&name) && dirent.file_type().map_err(io_err(dirent.path()))?.is_dir()
            {
                shapes.push(name);
            }
        }
        shapes.sort();
        Ok(shapes)
    }

    fn shape_dir(&self, shape: &str) -> Result<PathBuf> {
        if !valid_shape_id(shape) {
            return Err(StorageError::InvalidShapeId(shape.into()));
        }
        Ok(self.root.join(shape))
    }
}

/// Removes every entry of `root` whose name starts with `prefix`, with what it holds.
fn remove_dirs_named(root: &Path, prefix: &str) -> Result<()> {
    for dirent in fs::read_dir(root).map_err(io_err(root))? {
        let dirent = dirent.map_err(io_err(root))?;
        if dirent.file_name().to_string_lossy().starts_with(prefix) {
            fs::remove_dir_all(dirent.path()).map_err(io_err(dirent.path()))?;
        }
    }
    Ok(())
}

fn valid_shape_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= SHAPE_ID_BYTES_MAX
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

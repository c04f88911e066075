//! The single writer of a shape log: buffered appends, commits, batched durable flushes.

use std::borrow::Cow;
use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use syncline_core::LogOffset;

use crate::chunk::{ChunkDir, Files, JournalWrite, OpenChunk};
use crate::error::{io_err, Result, StorageError};
use crate::format::{
    journal_path, ChunkEntry, CloseRecord, RecordKind, ENTRY_BYTES, ENTRY_CONTINUED,
    FLAG_SNAPSHOT_DONE, META_FILE,
};
use crate::group_journal::GroupJournal;
use crate::io::{run_concurrently, Io};
use crate::lazy_file::LazyFile;
use crate::message::Message;
use crate::num::to_u64;
use crate::shape_lock::lock_only;
use crate::KEY_BYTES_MAX;

/// Appends to one shape log. Only one exists per shape at a time, across processes (it holds an
/// exclusive `flock` on `shape.meta`); readers never wait for it and it never waits for them.
///
/// Appended messages become visible to readers and durable only at [`Writer::flush`], and only
/// up to the last [`Writer::commit`] (a group flush may leave them unseen for a while, see
/// [`Writer::set_deferring`]). After any I/O error the writer refuses further work
/// ([`StorageError::Poisoned`]); reopening the shape recovers to the last durable commit.
///
/// An open writer holds up to six file descriptors and the lock. [`Writer::park`] releases
/// them and the buffers without any I/O, keeping the writer's state, so that a writer used
/// now and then costs no descriptor in between and resumes without reading its log;
/// [`Writer::close`] releases everything, so cheaply that idle shapes can be closed and
/// reopened on demand.
#[derive(Debug)]
pub struct Writer {
    pub(crate) dir: PathBuf,
    pub(crate) io: Io,
    /// The open `shape.meta`, holding the writer's lock; none while parked.
    pub(crate) lock: Option<File>,
    pub(crate) chunk_bytes_max: u64,
    pub(crate) write_buffer_bytes_max: usize,
    pub(crate) journal_bytes_max: usize,
    pub(crate) index: LazyFile,
    /// Entries durable in the index file, in chunk order.
    pub(crate) indexed: Vec<ChunkEntry>,
    pub(crate) tail: OpenChunk,
    /// Closed chunks whose content is not all committed yet.
    pub(crate) closed_pending: Vec<ChunkEntry>,
    /// Closed, committed chunks whose index entries the next flush appends.
    pub(crate) closed_committed: Vec<ChunkEntry>,
    pub(crate) last_appended: Option<LogOffset>,
    pub(crate) last_committed: Option<LogOffset>,
    pub(crate) durable: Option<LogOffset>,
    /// The last commit whose record is in the chunk files (readers see up to it), kept when
    /// a group flush leaves the tail's new bytes unwritten ([`Writer::set_deferring`]).
    pub(crate) files_commit: Option<LogOffset>,
    /// Whether a group flush through the group journal may leave the tail's new bytes in
    /// memory instead of writing them to the chunk files ([`Writer::set_deferring`]).
    pub(crate) deferring: bool,
    pub(crate) txn_open: bool,
    pub(crate) snapshot_done: bool,
    /// Whether files were created since the directory was last synced.
    pub(crate) dir_dirty: bool,
    /// The chunk closed last, written but not synced: the next flush syncs its four files with
    /// everything else it syncs, before the chunk's index entry (or the next chunk's close
    /// syncs them first).
    /// (Boxed: most writers have none, and idle writers stay in memory by the thousand.)
    pub(crate) closed_unsynced: Option<Box<OpenChunk>>,
    /// Whether the shape was created since the last flush, so that its creation is not durable
    /// yet: the next flush also syncs `shape.meta` and the store's root directory.
    pub(crate) created_unsynced: bool,
    pub(crate) poisoned: bool,
    /// What the index file was when the writer parked ([`file_identity`]); none unless parked.
    pub(crate) parked_index: Option<FileIdentity>,
    /// The group journal of the store that opened the writer (none for a writer of a store
    /// opened otherwise, e.g. in tests of recovery alone).
    pub(crate) group: Option<Arc<GroupJournal>>,
}

impl Writer {
    /// Buffers messages of the current transaction, in strictly increasing offset order.
    ///
    /// A transaction may arrive in any number of calls; buffers are written to the files (not
    /// synced) whenever they pass the write-buffer bound, so a huge transaction streams through.
    /// A chunk closes before a message once it holds `chunk_bytes_max` bytes of JSON, and before
    /// the first message after the initial snapshot (offsets with TX 0 and the rest never share a
    /// chunk).
    pub fn append(&mut self, messages: &[Message<'_>]) -> Result<()> {
        let mut last = self.last_appended;
        for m in messages {
            if m.key.len() > KEY_BYTES_MAX {
                return Err(StorageError::KeyTooLong(m.key.len()));
            }
            if let Some(last) = last.filter(|&l| m.offset <= l) {
                return Err(StorageError::OffsetNotIncreasing {
                    offset: m.offset,
                    last,
                });
            }
            last = Some(m.offset);
        }
        self.guarded(|w| {
            for m in messages {
                let after_snapshot = m.offset.tx > 0 && w.last_appended.is_some_and(|l| l.tx == 0);
                if (w.tail.json_len() >= w.chunk_bytes_max || after_snapshot)
                    && w.tail.record_count() > 0
                {
                    w.roll_over()?;
                }
                w.tail
                    .push(m.offset, RecordKind::Message(m.op), 0, m.json, m.key);
                w.last_appended = Some(m.offset);
                w.txn_open = true;
                if w.tail.buffered_bytes() >= w.write_buffer_bytes_max {
                    w.tail.write_out(&w.io, false)?;
                }
            }
            Ok(())
        })
    }

    /// Ends the current transaction; it becomes visible and durable at the next flush.
    /// Does nothing when no message was appended since the last commit.
    pub fn commit(&mut self) -> Result<()> {
        if !self.txn_open {
            return Ok(());
        }
        self.guarded(|w| {
            w.push_commit();
            Ok(())
        })
    }

    /// Appends `end` (the snapshot's closing message) to the current chunk whatever its size,
    /// and marks the initial snapshot complete, committing it; readers learn it from the files
    /// after the next flush. The snapshot's last chunk closes at once and the log's first chunk
    /// is created (its files synced), so the first transaction after the snapshot only appends:
    /// creating files is costly, and that transaction may reach thousands of new shapes.
    pub fn complete_snapshot(&mut self, end: &Message<'_>) -> Result<()> {
        if end.key.len() > KEY_BYTES_MAX {
            return Err(StorageError::KeyTooLong(end.key.len()));
        }
        if let Some(last) = self.last_appended.filter(|&l| end.offset <= l) {
            return Err(StorageError::OffsetNotIncreasing {
                offset: end.offset,
                last,
            });
        }
        self.guarded(|w| {
            w.tail.push(
                end.offset,
                RecordKind::Message(end.op),
                0,
                end.json,
                end.key,
            );
            w.last_appended = Some(end.offset);
            w.snapshot_done = true;
            w.push_commit();
            w.roll_over()
        })
    }

    /// Writes everything buffered, makes every commit so far durable (the journal, a chunk
    /// closed since the last flush, new directory entries and a new shape's files, their
    /// writeback started together, then each synced; then index entries, synced) and returns the last durable committed offset.
    /// Afterwards the writer keeps at most [`crate::IDLE_WRITER_BUFFER_BYTES_MAX`] of buffers.
    pub fn flush(&mut self) -> Result<Option<LogOffset>> {
        let committed = self.write_unsynced(false)?;
        let synced = self
            .pending_syncs(true)
            .and_then(|syncs| sync_in_turn(&syncs, &self.io));
        if let Err(e) = synced {
            self.poisoned = true;
            return Err(e);
        }
        self.synced(committed)?;
        Ok(committed)
    }

    /// Writes everything buffered (not synced; the journal's new frame only to memory if
    /// `defer_journal`, for the group journal): the first of [`flush_all`]'s three steps.
    /// Returns the last committed offset, which the syncs that follow make durable.
    fn write_unsynced(&mut self, defer_journal: bool) -> Result<Option<LogOffset>> {
        let files = if defer_journal && self.deferring {
            Files::Defer
        } else {
            Files::Write
        };
        self.guarded(|w| {
            w.tail.write_out_as(&w.io, defer_journal, files)?;
            Ok(w.last_committed)
        })
    }

    /// What [`Writer::flush`] syncs after [`Writer::write_unsynced`]: the tail's files (the
    /// journal only `with_journal`, or if its header is new), a chunk closed since the last
    /// flush, the directory if files were created in it, and a new shape's `shape.meta` and
    /// the root's entry for it (its `index` is empty until entries are appended, with a sync).
    fn pending_syncs(&self, with_journal: bool) -> Result<Vec<PendingSync<'_>>> {
        let mut files = self.tail.files_to_sync(with_journal)?;
        if let Some(closed) = &self.closed_unsynced {
            files.extend(closed.files_to_sync_closed()?);
        }
        let mut syncs: Vec<PendingSync<'_>> = files
            .into_iter()
            .map(|(file, path)| PendingSync::File(file, Cow::Borrowed(path)))
            .collect();
        if self.dir_dirty {
            syncs.push(PendingSync::Dir(&self.dir));
        }
        if self.created_unsynced {
            let lock = self
                .lock
                .as_ref()
                .expect("a writer flushes holding its lock");
            syncs.push(PendingSync::File(
                lock,
                Cow::Owned(self.dir.join(META_FILE)),
            ));
            let root = self
                .dir
                .parent()
                .expect("a shape's directory is in the store's root");
            syncs.push(PendingSync::Dir(root));
        }
        Ok(syncs)
    }

    /// The last of [`flush_all`]'s steps, once every sync of [`Writer::pending_syncs`]
    /// succeeded after [`Writer::write_unsynced`] returned `committed`: as [`Writer::flush`]
    /// after its syncs.
    fn synced(&mut self, committed: Option<LogOffset>) -> Result<()> {
        self.guarded(|w| {
            assert_eq!(
                committed, w.last_committed,
                "nothing is committed between the steps of a group flush"
            );
            w.tail.synced();
            w.tail.shrink_buffers();
            w.closed_unsynced = None;
            w.dir_dirty = false;
            w.created_unsynced = false;
            w.append_index_entries()?;
            w.durable = committed;
            Ok(())
        })
    }

    /// Closes the log, releasing its files and its lock: makes every commit durable, as
    /// [`Writer::flush`] does, and returns the last durable committed offset.
    ///
    /// Unless a transaction is open, it then syncs the tail's chunk files (if the flushes since
    /// their last sync made them durable only through the journal) and ends the journal with a
    /// close record (written, not synced), so that the next [`crate::Store::open_writer`]
    /// resumes the log without recovery's replay and scan of the tail and without writing. An
    /// open transaction is discarded, as by a crash: the next open runs recovery, which cuts
    /// the log back to the last commit. (Dropping a writer without closing it discards what
    /// was not flushed, and the next open runs recovery too.)
    pub fn close(mut self) -> Result<Option<LogOffset>> {
        let durable = self.flush()?;
        if self.txn_open {
            return Ok(durable);
        }
        self.guarded(|w| {
            assert!(
                w.closed_pending.is_empty() && w.closed_committed.is_empty(),
                "a flush with no transaction open indexes every closed chunk"
            );
            let record = CloseRecord {
                seq: w.tail.seq,
                lens: w.tail.lens(),
                last_committed: w.last_committed,
                snapshot_done: w.snapshot_done,
            };
            w.tail.write_close_record(&w.io, &record)
        })?;
        Ok(durable)
    }

    /// Parks the writer if it is idle (no transaction open, every commit durable): closes its
    /// files, frees its buffers and releases its lock, with no I/O but the write of bytes a
    /// flush left unwritten ([`Writer::write_deferred`]), keeping what it knows of the log. Returns whether it parked (or was parked already). Any later use first takes
    /// the lock again and checks that no other writer changed the log meanwhile (else it fails
    /// with [`StorageError::Changed`]; reopen the shape then).
    pub fn park(&mut self) -> bool {
        if self.lock.is_none() {
            return true;
        }
        if self.poisoned || self.txn_open || self.last_committed != self.durable {
            return false;
        }
        if self.write_deferred().is_err() {
            return false;
        }
        assert!(
            self.closed_pending.is_empty()
                && self.closed_committed.is_empty()
                && self.closed_unsynced.is_none(),
            "a flush with no transaction open syncs and indexes every closed chunk"
        );
        match file_identity(self.index.path()) {
            Ok(identity) => self.parked_index = Some(identity),
            Err(_) => return false,
        }
        // Empty, but with the room of earlier chunks: a parked writer keeps no spare room.
        self.closed_pending = Vec::new();
        self.closed_committed = Vec::new();
        self.tail.release();
        self.index.release();
        self.lock = None;
        true
    }

    /// Closes the writer's files, keeping its lock and everything it knows, busy or idle: for
    /// more writers than may be open at once. Buffers past [`crate::IDLE_WRITER_BUFFER_BYTES_MAX`]
    /// are written out first (not synced); smaller ones are kept, so that a writer held between
    /// the changes of a transaction and its flush opens its files once, at the flush. Nothing
    /// is checked when it goes on (nobody else could take the lock): its files reopen as they
    /// are written. Holds one descriptor, the lock.
    pub fn close_files(&mut self) -> Result<()> {
        if self.lock.is_none() {
            return Ok(());
        }
        self.guarded(|w| {
            if w.tail.buffered_bytes() > crate::IDLE_WRITER_BUFFER_BYTES_MAX {
                w.tail.write_out(&w.io, false)?;
            }
            w.tail.release_files();
            if let Some(closed) = &mut w.closed_unsynced {
                closed.release_files();
            }
            w.index.release();
            Ok(())
        })
    }

    /// Whether the writer is parked ([`Writer::park`]): it holds no file descriptor.
    pub fn is_parked(&self) -> bool {
        self.lock.is_none()
    }

    /// Takes the lock of a parked writer again, checking that the log is as the writer left it.
    fn unpark(&mut self) -> Result<()> {
        let shape = self
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let lock = lock_only(&self.dir, &shape)?;
        let same_index = self.parked_index.is_some()
            && self.parked_index == Some(file_identity(self.index.path())?);
        if !same_index || !self.tail.unchanged_since_release()? {
            return Err(StorageError::Changed(shape));
        }
        self.parked_index = None;
        self.lock = Some(lock);
        Ok(())
    }

    /// The last committed offset made durable by a flush (or found by recovery).
    pub fn durable_offset(&self) -> Option<LogOffset> {
        self.durable
    }

    /// Lets the group flushes through the store's group journal (see [`flush_all`]) leave the
    /// tail's new bytes in memory, unwritten, or makes them write every byte again. A byte left
    /// unwritten is durable through the journals all the same, but readers do not see it until
    /// [`Writer::write_deferred`] writes it (which any other use that writes the files does
    /// too). The tail's buffers take at most [`crate::IDLE_WRITER_BUFFER_BYTES_MAX`] of memory
    /// so (what an idle writer may keep anyway); past that, and when the journal has no room
    /// for them, the flush writes them.
    pub fn set_deferring(&mut self, deferring: bool) {
        self.deferring = deferring;
    }

    /// The last durable commit that readers find in the files: the durable offset, unless a
    /// group flush left bytes unwritten ([`Writer::set_deferring`]).
    pub fn readable_offset(&self) -> Option<LogOffset> {
        self.files_commit.min(self.durable)
    }

    /// Whether bytes a flush made durable are not written to the files yet.
    pub fn has_deferred(&self) -> bool {
        self.readable_offset() < self.durable
    }

    /// Writes the bytes a group flush left in memory to the chunk files (not synced: the
    /// journals made them durable), so that readers see every durable commit.
    pub fn write_deferred(&mut self) -> Result<()> {
        if self.tail.unwritten_bytes() == 0 {
            return Ok(());
        }
        self.guarded(|w| w.tail.write_files(&w.io))
    }

    /// The last committed offset, durable or not.
    pub fn last_committed(&self) -> Option<LogOffset> {
        self.last_committed
    }

    /// The last appended offset, committed or not.
    pub fn last_appended(&self) -> Option<LogOffset> {
        self.last_appended
    }

    /// Whether messages were appended since the last commit: a transaction is open, and
    /// [`Writer::close`] (or a drop) would discard it.
    pub fn in_transaction(&self) -> bool {
        self.txn_open
    }

    /// Whether [`Writer::complete_snapshot`] was called on this shape.
    pub fn snapshot_complete(&self) -> bool {
        self.snapshot_done
    }

    /// Bytes appended but not yet written to the files; callers flush when this grows.
    pub fn buffered_bytes(&self) -> usize {
        self.tail.buffered_bytes()
    }

    /// Bytes of memory the write buffers hold, used or not (see [`Writer::flush`]).
    pub fn retained_bytes(&self) -> usize {
        self.tail.retained_bytes()
    }

    /// The shape's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs `f`, and stops the writer for good if it fails on I/O or finds corruption.
    pub(crate) fn guarded<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        if self.poisoned {
            return Err(StorageError::Poisoned);
        }
        let result = if self.lock.is_none() {
            self.unpark().and_then(|()| f(self))
        } else {
            f(self)
        };
        if result.is_err() {
            self.poisoned = true;
        } else if self.tail.unwritten_bytes() == 0 {
            self.files_commit = self.last_committed;
        }
        result
    }

    fn snapshot_flags(&self) -> u8 {
        if self.snapshot_done {
            FLAG_SNAPSHOT_DONE
        } else {
            0
        }
    }

    fn push_commit(&mut self) {
        let offset = self.last_appended.unwrap_or(LogOffset::ZERO);
        self.tail
            .push(offset, RecordKind::Commit, self.snapshot_flags(), &[], &[]);
        self.closed_committed.append(&mut self.closed_pending);
        self.last_committed = self.last_appended;
        self.txn_open = false;
    }

    /// Closes the full tail chunk (immutable from now on; its files written, and synced by the
    /// next flush or the next close of a chunk, whichever comes first) and opens the next.
    fn roll_over(&mut self) -> Result<()> {
        if let Some(earlier) = self.closed_unsynced.take() {
            self.io.sync_data_all(&earlier.files_to_sync_closed()?)?;
        }
        self.tail.write_closing(&self.io)?;
        let entry = self.tail.entry(u16::from(self.snapshot_flags()));
        if self.tail.last_is_commit {
            self.closed_committed.push(entry);
        } else {
            self.closed_pending.push(entry);
        }
        let next = OpenChunk::create(
            &self.io,
            (&self.dir, ChunkDir::Live),
            self.tail.seq + 1,
            self.last_appended,
            self.journal_bytes_max,
        )?;
        self.closed_unsynced = Some(Box::new(std::mem::replace(&mut self.tail, next)));
        self.dir_dirty = true;
        Ok(())
    }

    /// Appends the index entries of closed, committed chunks in one write (each but the last
    /// marked continued, so that a torn write lists none of them), syncs the index, and removes
    /// the journals of those chunks.
    fn append_index_entries(&mut self) -> Result<()> {
        let Some(last) = self.closed_committed.len().checked_sub(1) else {
            return Ok(());
        };
        let bytes: Vec<u8> = self
            .closed_committed
            .iter()
            .enumerate()
            .flat_map(|(i, e)| {
                let continued = if i < last { ENTRY_CONTINUED } else { 0 };
                ChunkEntry {
                    flags: e.flags | continued,
                    ..*e
                }
                .encode()
            })
            .collect();
        let pos = to_u64(self.indexed.len() * ENTRY_BYTES);
        let (index, path) = (self.index.get()?, self.index.path());
        self.io.write_at(index, path, pos, &bytes)?;
        self.io.sync_data(index, path)?;
        let first_new = to_u64(self.indexed.len());
        self.indexed.append(&mut self.closed_committed);
        // Indexed chunks were synced when they closed: their journals are no longer needed.
        for seq in first_new..to_u64(self.indexed.len()) {
            self.io.remove_file(&journal_path(&self.dir, seq))?;
        }
        Ok(())
    }
}

/// A file's inode, size and change time: any write, cut or replacement (a rename over it)
/// changes at least one of them.
pub(crate) type FileIdentity = (u64, u64, u64, i64, i64);

/// The [`FileIdentity`] of the file at `path`, read without opening it.
fn file_identity(path: &Path) -> Result<FileIdentity> {
    let m = fs::metadata(path).map_err(io_err(path))?;
    Ok((m.dev(), m.ino(), m.len(), m.ctime(), m.ctime_nsec()))
}

/// Logs flushed together from this many on through the group journal (or with concurrent
/// syncs) ([`GroupSync::Auto`]): below it, the log's own flush (`syncline-bench group-flush`
/// measures every policy).
pub const GROUP_FLUSH_MIN_LOGS: usize = 2;

/// How [`flush_all`] makes its logs durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupSync {
    /// From [`GROUP_FLUSH_MIN_LOGS`] logs on [`GroupSync::Journal`] (or
    /// [`GroupSync::Concurrent`] for writers of different stores), else
    /// [`GroupSync::EachLog`].
    Auto,
    /// Each log's own flush, one after the other, as [`Writer::flush`].
    EachLog,
    /// Every log's syncs issued together, from up to 64 threads.
    Concurrent,
    /// Every log journal's new frames written to the store's group journal instead of the log
    /// journal (until a checkpoint), which one `fdatasync` makes durable; other syncs (chunk files written in place, new directory
    /// entries) issued together meanwhile. The writers must come from one [`crate::Store`].
    Journal,
}

/// A file or directory a group flush syncs.
enum PendingSync<'a> {
    File(&'a File, Cow<'a, Path>),
    Dir(&'a Path),
}

/// Flushes several logs, each as [`Writer::flush`] does, and returns each one's result in
/// order. Except with [`GroupSync::EachLog`], every log's buffers are written first, then
/// made durable together:
/// - [`GroupSync::Journal`]: the new frames of every log's journal are written to the
///   store's group journal instead (until its checkpoint writes them to the log journals) (see `docs/storage-format.md`) and made durable by its one
///   `fdatasync`, whatever the number of logs; the few other syncs (chunk files written in
///   place by a large write, new directory entries) run meanwhile, together;
/// - [`GroupSync::Concurrent`]: every sync (`fdatasync` of each journal, and of chunk files
///   written in place; `fsync` of new directory entries) is issued at once from up to 64
///   threads, so the file system commits them together (on ext4 concurrent syncs share
///   journal commits and device flushes: the cost grows far slower than the number of logs);
///
/// then each log's index entries, if chunks closed, are written and synced. A log whose own
/// sync fails fails alone; a failure of the group journal fails every log it held.
pub fn flush_all(writers: &mut [&mut Writer], sync: GroupSync) -> Vec<Result<Option<LogOffset>>> {
    let shared = writers.first().and_then(|w| w.group.clone()).filter(|g| {
        writers
            .iter()
            .all(|w| w.group.as_ref().is_some_and(|o| Arc::ptr_eq(o, g)))
    });
    let group = match sync {
        GroupSync::Auto if writers.len() < GROUP_FLUSH_MIN_LOGS => {
            return writers.iter_mut().map(|w| w.flush()).collect()
        }
        GroupSync::EachLog => return writers.iter_mut().map(|w| w.flush()).collect(),
        GroupSync::Auto => shared,
        GroupSync::Concurrent => None,
        GroupSync::Journal => {
            assert!(
                shared.is_some(),
                "a journal group flush is of one store's writers"
            );
            shared
        }
    };
    let (mut results, failures) = {
        let mut prepared = prepare_all(writers, group.is_some());
        let mut failures = Vec::new();
        let mut held = Vec::new();
        let mut writes = Vec::new();
        let mut syncs: Vec<(usize, PendingSync<'_>)> = Vec::new();
        for (i, p) in prepared.iter_mut().enumerate() {
            if let Some(e) = p.failure.take() {
                failures.push((i, e));
                continue;
            }
            if let Some(write) = p.journal.take() {
                held.push(i);
                writes.push(write);
            }
            syncs.extend(std::mem::take(&mut p.syncs).into_iter().map(|s| (i, s)));
        }
        let ios: Vec<&Io> = prepared.iter().map(|p| p.io).collect();
        match (&group, writes.first()) {
            (Some(group), Some(_)) => {
                let group_result = std::thread::scope(|scope| {
                    let others = (!syncs.is_empty())
                        .then(|| scope.spawn(|| sync_concurrently(&syncs, &ios)));
                    let result = group.commit(ios[held[0]], &writes);
                    if let Some(others) = others {
                        failures.extend(others.join().expect("syncs do not panic"));
                    }
                    result
                });
                if let Err(e) = group_result {
                    failures.extend(held.into_iter().map(|i| (i, e.duplicate())));
                }
            }
            _ => failures.extend(sync_concurrently(&syncs, &ios)),
        }
        let results: Vec<Result<Option<LogOffset>>> =
            prepared.into_iter().map(|p| p.result).collect();
        (results, failures)
    };
    for (i, error) in failures {
        if results[i].is_ok() {
            writers[i].poisoned = true;
            results[i] = Err(error);
        }
    }
    for (w, result) in writers.iter_mut().zip(results.iter_mut()) {
        if let Ok(committed) = *result {
            if let Err(e) = w.synced(committed) {
                *result = Err(e);
            }
        }
    }
    results
}

/// Logs per thread that writes a group flush's buffers: below twice this, one thread writes.
const WRITE_LOGS_PER_THREAD_MIN: usize = 128;

/// One log's part of a group flush once its buffers are written: its last commit (or its
/// failure to write), what it still needs synced, and its I/O.
struct Prepared<'a> {
    /// As [`Writer::write_unsynced`] returned.
    result: Result<Option<LogOffset>>,
    /// A failure after the write (opening a file to sync): the log fails.
    failure: Option<StorageError>,
    /// The journal's new frames, for the group journal.
    journal: Option<JournalWrite<'a>>,
    /// The other syncs the log needs.
    syncs: Vec<PendingSync<'a>>,
    io: &'a Io,
}

/// Writes one log's buffers and gathers what it needs to become durable: through the group
/// journal (`journaled`) or by its own syncs.
fn prepare<'a>(writer: &'a mut Writer, journaled: bool) -> Prepared<'a> {
    // A writer that came with its files closed (held between flushes) closes them again once
    // written, when the group journal makes them durable: a flush of thousands of such logs
    // then needs a few descriptors at a time, not three per log.
    let held = writer.lock.is_some() && writer.tail.files_closed();
    let result = writer.write_unsynced(journaled);
    if held && journaled && result.is_ok() && !writer.tail.chunk_files_unsynced() {
        writer.tail.release_files();
    }
    let writer: &'a Writer = writer;
    let mut prepared = Prepared {
        failure: None,
        journal: None,
        syncs: Vec::new(),
        io: &writer.io,
        result,
    };
    if prepared.result.is_err() {
        return prepared;
    }
    if journaled {
        prepared.journal = writer.tail.journal_write();
    }
    match writer.pending_syncs(!journaled) {
        Ok(syncs) => prepared.syncs = syncs,
        Err(e) => prepared.failure = Some(e),
    }
    prepared
}

/// [`prepare`] for every log, from as many threads as the machine has cores when there are
/// enough logs: the writes (four `pwrite`s per log) are most of a large group flush's time.
fn prepare_all<'a>(writers: &'a mut [&mut Writer], journaled: bool) -> Vec<Prepared<'a>> {
    static CORES: OnceLock<usize> = OnceLock::new();
    let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let threads = cores.min(writers.len() / WRITE_LOGS_PER_THREAD_MIN).max(1);
    if threads == 1 {
        return writers.iter_mut().map(|w| prepare(w, journaled)).collect();
    }
    let per_thread = writers.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let parts: Vec<_> = writers
            .chunks_mut(per_thread)
            .map(|part| {
                scope.spawn(move || {
                    part.iter_mut()
                        .map(|w| prepare(w, journaled))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|part| part.join().expect("writing a log does not panic"))
            .collect()
    })
}

/// Runs every sync of `syncs` from this thread: the files' writeback started together, then
/// each file synced, then each directory (a thread per sync costs more than it saves when one
/// log flushes).
fn sync_in_turn(syncs: &[PendingSync<'_>], io: &Io) -> Result<()> {
    let files: Vec<(&File, &Path)> = syncs
        .iter()
        .filter_map(|s| match s {
            PendingSync::File(file, path) => Some((*file, path.as_ref())),
            PendingSync::Dir(_) => None,
        })
        .collect();
    io.sync_data_all(&files)?;
    for sync in syncs {
        if let PendingSync::Dir(dir) = sync {
            io.sync_dir(dir)?;
        }
    }
    Ok(())
}

/// Runs every sync of `syncs` (each tagged with its log's index into `ios`) at once, from up to
/// 64 threads; returns the failures, by log.
fn sync_concurrently(
    syncs: &[(usize, PendingSync<'_>)],
    ios: &[&Io],
) -> Vec<(usize, StorageError)> {
    let failures = Mutex::new(Vec::new());
    run_concurrently(syncs.len(), |n| {
        let (i, sync) = &syncs[n];
        let io = ios[*i];
        let result = match sync {
            PendingSync::File(file, path) => io.sync_data(file, path),
            PendingSync::Dir(dir) => io.sync_dir(dir),
        };
        if let Err(e) = result {
            failures.lock().expect("failures lock").push((*i, e));
        }
    });
    failures.into_inner().expect("failures lock")
}

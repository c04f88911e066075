//! The group journal: one file per writable store through which a group flush makes the new
//! frames of many logs' journals durable with a single `fdatasync`, instead of one per log.
//!
//! Each entry holds frames of a log's journal that a group flush made durable here instead of
//! in the log journal: the writer does not write them to its journal at all (the file keeps a
//! hole there). Applying an entry writes its bytes to their place in the log journal, so
//! applying every entry (at [`replay`], when the store opens for writing; at a checkpoint; and
//! for one shape before its recovery reads its journal, [`GroupJournal::apply_shape`]) leaves
//! every log journal as its own write and sync would have. Entries name their journal by path
//! and id, and a journal's bytes at a position never change while it lives, so applying any
//! entry, however old, is harmless. Once the file holds its bound
//! ([`GROUP_JOURNAL_BYTES_MAX_DEFAULT`] unless set), a checkpoint applies its entries, syncs
//! the log journals they reached and starts writing the file again from the start, in a new
//! epoch.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::chunk::JournalWrite;
use crate::error::{io_err, Result, StorageError};
use crate::format::{
    parse_journal_name, GroupEntry, JournalHeader, GROUP_ENTRY_HEADER_BYTES, GROUP_JOURNAL_PREFIX,
    JOURNAL_ALLOCATE_BYTES, JOURNAL_HEADER_BYTES,
};
use crate::io::{run_concurrently, try_lock, Io};
use crate::num::to_u64;

/// Bytes a group journal takes before a checkpoint starts it again, by default.
pub const GROUP_JOURNAL_BYTES_MAX_DEFAULT: u64 = 64 * 1024 * 1024;

/// A checkpoint reads back and applies the entries of whole flushes about an eighth of the
/// file's bound at a time (a larger flush is one batch), so that its memory stays small.
const APPLY_BATCHES: u64 = 8;

/// The group journal of one writable store; its file is created at the first group flush.
#[derive(Debug)]
pub(crate) struct GroupJournal {
    root: PathBuf,
    /// Bytes the file takes before a checkpoint.
    bytes_max: u64,
    active: Mutex<Option<Active>>,
}

/// The open group journal file.
#[derive(Debug)]
struct Active {
    path: PathBuf,
    /// Open, and locked (`flock`) for as long as the store lives.
    file: File,
    io: Io,
    epoch: u64,
    /// Where the next entries go.
    end: u64,
    /// The file's (sparse) size.
    allocated: u64,
    /// Where each flush's entries of this epoch end, in order.
    flush_ends: Vec<u64>,
}

impl GroupJournal {
    /// The group journal of the store at `root` (no file yet), checkpointed once it holds
    /// `bytes_max` bytes.
    pub fn new(root: PathBuf, bytes_max: u64) -> GroupJournal {
        GroupJournal {
            root,
            bytes_max,
            active: Mutex::new(None),
        }
    }

    /// Bytes of entries a checkpoint applies at a time.
    fn batch_bytes(&self) -> u64 {
        (self.bytes_max / APPLY_BATCHES).max(1)
    }

    /// Makes `writes` (log journals' frames since their last sync, which the group flush did
    /// not write to them) durable with one write
    /// and one `fdatasync` of the group journal, creating its file with `io` on first use, and
    /// checkpoints once the file holds its bound. An error (of the write, the sync or the
    /// checkpoint) fails the flush of every log in `writes`.
    pub fn commit(&self, io: &Io, writes: &[JournalWrite<'_>]) -> Result<()> {
        if writes.is_empty() {
            return Ok(());
        }
        let mut active = self.active.lock().expect("group journal lock");
        self.append_and_sync(&mut active, io, writes)
    }

    fn append_and_sync(
        &self,
        active: &mut Option<Active>,
        io: &Io,
        writes: &[JournalWrite<'_>],
    ) -> Result<()> {
        if active.is_none() {
            *active = Some(Active::create(&self.root, io)?);
        }
        let a = active.as_mut().expect("created above");
        let mut buf = Vec::with_capacity(
            writes
                .iter()
                .map(|w| GROUP_ENTRY_HEADER_BYTES + w.path.as_os_str().len() + w.bytes.len())
                .sum(),
        );
        let root = self.root.as_os_str().as_bytes();
        for w in writes {
            // The path below the root, by bytes (a component-wise strip costs more, per log).
            let full = w.path.as_os_str().as_bytes();
            let below = full
                .strip_prefix(root)
                .map(|rest| rest.strip_prefix(b"/").unwrap_or(rest))
                .expect("a log journal lies in its store");
            GroupEntry {
                epoch: a.epoch,
                path: std::str::from_utf8(below).expect("shape ids are ASCII"),
                journal_id: w.id,
                at: w.at,
                file_len: w.file_len,
                bytes: w.bytes,
            }
            .encode_into(&mut buf);
        }
        let end = a.end + to_u64(buf.len());
        if end > a.allocated {
            a.allocated = end.next_multiple_of(JOURNAL_ALLOCATE_BYTES);
            a.io.set_len(&a.file, &a.path, a.allocated)?;
        }
        a.io.write_at(&a.file, &a.path, a.end, &buf)?;
        a.io.sync_data(&a.file, &a.path)?;
        a.end = end;
        a.flush_ends.push(end);
        if a.end >= self.bytes_max {
            a.checkpoint(self.batch_bytes())?;
        }
        Ok(())
    }
}

impl Active {
    /// Creates a new group journal file in `root` (its directory entry synced) and locks it.
    fn create(root: &Path, io: &Io) -> Result<Active> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = root.join(format!(
            "{GROUP_JOURNAL_PREFIX}{}-{nanos}",
            std::process::id()
        ));
        let file = io.create(&path)?;
        assert!(
            try_lock(&file).map_err(io_err(&path))?,
            "a new group journal is nobody else's"
        );
        io.set_len(&file, &path, JOURNAL_ALLOCATE_BYTES)?;
        io.sync_data(&file, &path)?;
        io.sync_dir(root)?;
        Ok(Active {
            path,
            file,
            io: io.clone(),
            epoch: 1,
            end: 0,
            allocated: JOURNAL_ALLOCATE_BYTES,
            flush_ends: Vec::new(),
        })
    }

    /// Applies the entries of the current epoch that `keep` keeps to their log journals,
    /// reading the file back a batch of whole flushes at a time (about `batch_bytes` each),
    /// and syncs the journals written.
    fn apply_entries(
        &self,
        batch_bytes: u64,
        keep: impl Fn(&GroupEntry<'_>) -> bool,
    ) -> Result<()> {
        let mut journals = Journals::new(self.root());
        let mut start = 0;
        for (i, &end) in self.flush_ends.iter().enumerate() {
            let last = i + 1 == self.flush_ends.len();
            if end - start < batch_bytes && !last {
                continue;
            }
            let mut bytes = vec![0u8; crate::num::to_usize(end - start)];
            self.file
                .read_exact_at(&mut bytes, start)
                .map_err(io_err(&self.path))?;
            let entries = epoch_entries(&bytes).into_iter().filter(&keep).collect();
            journals.apply(&self.io, entries)?;
            start = end;
        }
        journals.sync(&self.io)
    }

    /// Applies every entry of this epoch to its log journal and syncs those journals, then
    /// starts a new epoch at the start of the file. After a failure the epoch goes on, so that
    /// every entry stays replayable.
    fn checkpoint(&mut self, batch_bytes: u64) -> Result<()> {
        self.apply_entries(batch_bytes, |_| true)?;
        self.epoch += 1;
        self.end = 0;
        self.flush_ends.clear();
        Ok(())
    }

    /// The store root the file lies in.
    fn root(&self) -> PathBuf {
        self.path
            .parent()
            .expect("a group journal lies in its store")
            .to_path_buf()
    }
}

impl GroupJournal {
    /// Applies this epoch's entries for the journals of `shape` and syncs those journals, so
    /// that its recovery, which reads them, finds every frame made durable here.
    pub fn apply_shape(&self, shape: &str) -> Result<()> {
        let active = self.active.lock().expect("group journal lock");
        let Some(a) = active.as_ref() else {
            return Ok(());
        };
        let prefix = format!("{shape}/");
        a.apply_entries(self.batch_bytes(), |e| e.path.starts_with(&prefix))
    }
}

/// The intact entries at the start of `bytes` that share the first one's epoch.
fn epoch_entries(bytes: &[u8]) -> Vec<GroupEntry<'_>> {
    let mut entries: Vec<GroupEntry<'_>> = Vec::new();
    let mut at = 0;
    while let Some((entry, len)) = bytes.get(at..).and_then(GroupEntry::decode) {
        if entries
            .first()
            .is_some_and(|first| first.epoch != entry.epoch)
        {
            break;
        }
        entries.push(entry);
        at += len;
    }
    entries
}

/// Longest wait, when a store opens for writing, for another live store to let go of its
/// group journal: a writer that lost its place (its lock's session ended) drops its files at
/// once, but may still hold them when the next writer starts.
pub const GROUP_JOURNAL_RELEASE_WAIT_MAX: Duration = Duration::from_secs(30);
/// How often a held group journal is tried again.
const GROUP_JOURNAL_RELEASE_POLL: Duration = Duration::from_millis(10);

/// Replays and removes every group journal in `root` (a store that opens for writing does
/// this before any writer opens): each intact entry of the file's first epoch whose log
/// journal still exists with the entry's id gets its bytes written back (and the journal's
/// size restored), then those journals are synced and the file removed. A journal another
/// live store holds is waited for, up to `wait_max`: its entries may hold the only durable
/// copy of commits of logs that store parked (their locks released), which recovering those
/// logs without them would cut off.
pub(crate) fn replay(root: &Path, wait_max: Duration) -> Result<()> {
    let deadline = Instant::now() + wait_max;
    let io = Io::default();
    let mut removed = false;
    for dirent in fs::read_dir(root).map_err(io_err(root))? {
        let dirent = dirent.map_err(io_err(root))?;
        if !dirent
            .file_name()
            .to_string_lossy()
            .starts_with(GROUP_JOURNAL_PREFIX)
        {
            continue;
        }
        let path = dirent.path();
        let file = File::open(&path).map_err(io_err(&path))?;
        while !try_lock(&file).map_err(io_err(&path))? {
            if Instant::now() >= deadline {
                return Err(StorageError::GroupJournalHeld(path));
            }
            std::thread::sleep(GROUP_JOURNAL_RELEASE_POLL);
        }
        let bytes = fs::read(&path).map_err(io_err(&path))?;
        let mut journals = Journals::new(root.to_path_buf());
        journals.apply(&io, epoch_entries(&bytes))?;
        journals.sync(&io)?;
        io.remove_file(&path)?;
        removed = true;
    }
    if removed {
        io.sync_dir(root)?;
    }
    Ok(())
}

/// Log journals a checkpoint keeps open at once, at most (and at most an eighth of the
/// process's open-files limit): a journal opened past that is closed once written, and the
/// next batch of entries reaching it opens it again.
pub const CHECKPOINT_OPEN_JOURNALS_MAX: usize = 1024;

/// [`CHECKPOINT_OPEN_JOURNALS_MAX`], or an eighth of the process's open-files limit if less.
fn open_journals_max() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct passed to it.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    } else {
        0
    };
    CHECKPOINT_OPEN_JOURNALS_MAX.min(soft / 8)
}

/// The log journals an application of entries reaches, by path relative to the store root:
/// each opened (and its header read) once, however many batches of entries reach it (up to
/// [`open_journals_max`] open at once), and synced once at the end.
struct Journals {
    root: PathBuf,
    by_path: HashMap<String, Journal>,
    /// Journals open now, and how many may be.
    open: usize,
    open_max: usize,
    /// Where adjacent entries of one journal are joined into one write; kept between writes.
    run: Vec<u8>,
}

/// A log journal entries are applied to.
struct Journal {
    path: PathBuf,
    /// Open from the first batch of entries it is written in; `None` before, and once closed
    /// (opened past [`open_journals_max`]: the next batch reaching it opens it again).
    file: Option<File>,
    /// Whether its entries are applied: its path names a log journal and, when last opened,
    /// the file existed with a valid header.
    live: bool,
    /// Its header's id, read at each opening.
    id: u64,
    /// Its size, as of its last opening and the writes since.
    len: u64,
    /// Whether entries were written to it, so that it needs a sync.
    written: bool,
}

impl Journals {
    fn new(root: PathBuf) -> Journals {
        Journals {
            root,
            by_path: HashMap::new(),
            open: 0,
            open_max: open_journals_max(),
            run: Vec::new(),
        }
    }

    /// Writes every entry's bytes into its log journal, if that journal exists with the
    /// entry's id (and restores the journal's size); entries of one journal are written in
    /// position order, adjacent ones in one write.
    fn apply(&mut self, io: &Io, entries: Vec<GroupEntry<'_>>) -> Result<()> {
        let mut by_journal: HashMap<&str, Vec<GroupEntry<'_>>> = HashMap::new();
        for entry in entries {
            by_journal.entry(entry.path).or_default().push(entry);
        }
        for (relative, mut entries) in by_journal {
            entries.sort_by_key(|e| e.at);
            if !self.by_path.contains_key(relative) {
                let journal = Journal::new(&self.root, relative);
                self.by_path.insert(relative.to_owned(), journal);
            }
            let journal = self.by_path.get_mut(relative).expect("inserted above");
            let was_open = journal.file.is_some();
            let result = journal.write(io, &entries, &mut self.run);
            if journal.file.is_some() && !was_open {
                self.open += 1;
                if self.open > self.open_max {
                    journal.file = None;
                    self.open -= 1;
                }
            }
            result?;
        }
        Ok(())
    }

    /// `fdatasync` of every journal written, at once (a journal closed meanwhile is opened by
    /// path again; one removed since needs nothing: an indexed chunk's journal is removed once
    /// its files are synced).
    fn sync(self, io: &Io) -> Result<()> {
        let written: Vec<&Journal> = self.by_path.values().filter(|j| j.written).collect();
        let failure = Mutex::new(None);
        run_concurrently(written.len(), |i| {
            let journal = written[i];
            let result = match &journal.file {
                Some(file) => io.sync_data(file, &journal.path),
                None => match File::open(&journal.path) {
                    Ok(file) => io.sync_data(&file, &journal.path),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(io_err(&journal.path)(e)),
                },
            };
            if let Err(e) = result {
                *failure.lock().expect("failure lock") = Some(e);
            }
        });
        match failure.into_inner().expect("failure lock") {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Journal {
    /// The log journal at `relative` below `root`, not opened yet; live if the path names a
    /// log journal (`<shape-id>/<seq:010>.journal`).
    fn new(root: &Path, relative: &str) -> Journal {
        let names: Vec<&str> = Path::new(relative)
            .components()
            .map(|c| match c {
                Component::Normal(name) => name.to_str(),
                _ => None,
            })
            .collect::<Option<_>>()
            .unwrap_or_default();
        let live = matches!(names[..], [shape, name]
            if !shape.starts_with('.') && parse_journal_name(name).is_some());
        Journal {
            path: root.join(relative),
            file: None,
            live,
            id: 0,
            len: 0,
            written: false,
        }
    }

    /// Opens the file at the journal's path and reads its id and size; a file that does not
    /// exist or has no valid header makes the journal not live.
    fn reopen(&mut self) -> Result<()> {
        let file = match OpenOptions::new().read(true).write(true).open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.live = false;
                return Ok(());
            }
            Err(e) => return Err(io_err(&self.path)(e)),
        };
        let mut head = [0u8; JOURNAL_HEADER_BYTES];
        let id = (file.read_exact_at(&mut head, 0).is_ok())
            .then(|| JournalHeader::decode(&head).map(|h| h.id))
            .flatten();
        let Some(id) = id else {
            self.live = false;
            return Ok(());
        };
        self.id = id;
        self.len = file.metadata().map_err(io_err(&self.path))?.len();
        self.file = Some(file);
        Ok(())
    }

    /// Writes `entries` (sorted by position) that carry the journal's id, adjacent ones joined
    /// in `run`, and extends the file to the size the last of them had.
    fn write(&mut self, io: &Io, entries: &[GroupEntry<'_>], run: &mut Vec<u8>) -> Result<()> {
        if self.live && self.file.is_none() {
            self.reopen()?;
        }
        if !self.live {
            return Ok(());
        }
        let id = self.id;
        let mut entries = entries.iter().filter(|e| e.journal_id == id).peekable();
        if entries.peek().is_none() {
            return Ok(());
        }
        let file = self.file.as_ref().expect("opened above");
        let mut file_len = 0;
        let mut run_at = None;
        run.clear();
        for e in entries {
            file_len = file_len.max(e.file_len);
            match run_at {
                Some(at) if at + to_u64(run.len()) == e.at => run.extend_from_slice(e.bytes),
                _ => {
                    if let Some(at) = run_at {
                        io.write_at(file, &self.path, at, run)?;
                        self.len = self.len.max(at + to_u64(run.len()));
                    }
                    run.clear();
                    run.extend_from_slice(e.bytes);
                    run_at = Some(e.at);
                }
            }
        }
        let at = run_at.expect("one entry at least");
        io.write_at(file, &self.path, at, run)?;
        self.len = self.len.max(at + to_u64(run.len()));
        if self.len < file_len {
            io.set_len(file, &self.path, file_len)?;
            self.len = file_len;
        }
        self.written = true;
        Ok(())
    }
}

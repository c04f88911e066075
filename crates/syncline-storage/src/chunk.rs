//! The writer's open chunk: three append-only files fed through in-memory buffers, and the
//! chunk's journal, which receives the same bytes as one checksummed frame per write so that a
//! small flush needs a single `fdatasync` (a large one syncs the chunk files instead).

use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, RandomState};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use syncline_core::LogOffset;

use crate::error::{io_err, Result};
use crate::format::{
    chunk_path, journal_path, ChunkEntry, ChunkFile, ChunkLens, CloseRecord, FrameHeader,
    JournalHeader, Record, RecordKind, CLOSE_RECORD_BYTES, FRAME_JSON_IN_PLACE,
    FRAME_RECORDS_IN_PLACE, JOURNAL_ALLOCATE_BYTES, JOURNAL_HEADER_BYTES, RECORD_BYTES,
};
use crate::io::Io;
use crate::lazy_file::LazyFile;
use crate::num::{to_u64, to_usize};

/// One file of the open chunk with the bytes not yet written to it, or not yet in a journal
/// frame: a frame may take bytes that are written to the file only later ([`Files::Defer`]).
#[derive(Debug)]
struct Appender {
    file: LazyFile,
    /// Bytes already written to the file.
    written: u64,
    /// Bytes already in a journal frame.
    framed: u64,
    /// The bytes from `min(written, framed)` on.
    buf: Vec<u8>,
}

impl Appender {
    fn new(file: LazyFile, len: u64) -> Appender {
        Appender {
            file,
            written: len,
            framed: len,
            buf: Vec::new(),
        }
    }

    /// Where `buf` starts in the file.
    fn start(&self) -> u64 {
        self.written.min(self.framed)
    }

    fn len(&self) -> u64 {
        self.start() + to_u64(self.buf.len())
    }

    /// The bytes not yet in a journal frame.
    fn unframed(&self) -> &[u8] {
        &self.buf[to_usize(self.framed - self.start())..]
    }

    /// How many bytes are not yet written to the file.
    fn unwritten_len(&self) -> usize {
        to_usize(self.len() - self.written)
    }

    /// Writes the bytes not yet written (not synced).
    fn write_out(&mut self, io: &Io) -> Result<()> {
        let (start, len) = (self.start(), self.len());
        if self.written == len {
            return Ok(());
        }
        let unwritten = &self.buf[to_usize(self.written - start)..];
        io.write_at(self.file.get()?, self.file.path(), self.written, unwritten)?;
        self.written = len;
        self.forget_done(start);
        Ok(())
    }

    /// Records that a journal frame took every byte.
    fn framed_all(&mut self) {
        let start = self.start();
        self.framed = self.len();
        self.forget_done(start);
    }

    /// Drops the bytes both written and framed, `buf` having started at `old_start`.
    fn forget_done(&mut self, old_start: u64) {
        let done = to_usize(self.start() - old_start);
        if done == self.buf.len() {
            self.buf.clear();
        } else {
            self.buf.drain(..done);
        }
    }
}

/// What a write of the open chunk's buffers does with the chunk files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Files {
    /// Writes them; the journal's frame holds the bytes too while the journal has room since
    /// its last sync, else it describes them in place (and the next sync covers the files).
    Write,
    /// Writes them; the frame describes them in place, whatever the journal holds (the caller
    /// syncs them).
    InPlace,
    /// Leaves the bytes in memory, unwritten, when the frame can hold them and the buffers'
    /// memory stays within [`DEFERRED_BYTES_MAX`]; else as [`Files::Write`]. Readers do not
    /// see them until [`OpenChunk::write_files`].
    Defer,
}

/// Memory the open chunk's buffers may take while they keep bytes unwritten ([`Files::Defer`]):
/// no more than an idle writer may keep anyway.
const DEFERRED_BYTES_MAX: usize = crate::IDLE_WRITER_BUFFER_BYTES_MAX;

/// Whether a new chunk's directory is seen by readers and recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkDir {
    /// A shape's directory: a new file must appear whole.
    Live,
    /// A shape's directory before `create_shape` renames it into place.
    Hidden,
}

/// The journal of the open chunk: a header, then one frame per write of the buffers.
#[derive(Debug)]
struct Journal {
    file: LazyFile,
    /// This journal's random id ([`JournalHeader::id`]).
    id: u64,
    len: u64,
    /// Length of the frames durable at the last sync (by this file's own or the group
    /// journal's).
    synced_len: u64,
    /// The file's size: frames are written into this (sparse) space, so that a sync after a
    /// small write rarely has to commit a size change.
    allocated: u64,
    /// The frames since the last sync (`synced_len..len`), for the group journal.
    unsynced: Vec<u8>,
    /// Whether some of those frames were not written to the file (the group journal takes
    /// them instead).
    deferred: bool,
    /// Whether the header was written but not synced yet: the chunk's next sync includes the
    /// journal whatever else it holds (the group journal cannot carry a header, and its
    /// entries are replayed only into a journal whose header names them).
    header_unsynced: bool,
}

/// What a log journal's frames since its last sync need from the group journal to be durable
/// without the journal's own sync: the bytes, where they go, and which journal takes them.
#[derive(Debug)]
pub(crate) struct JournalWrite<'a> {
    /// The journal's path.
    pub path: &'a Path,
    /// The journal's id.
    pub id: u64,
    /// Where the bytes start in the journal.
    pub at: u64,
    /// The journal's size.
    pub file_len: u64,
    /// The frames since the last sync (kept in memory by the journal).
    pub bytes: &'a [u8],
}

/// A new journal id: random (std's per-process random hash keys, which change with every
/// `RandomState`), mixed with the time.
fn new_journal_id() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    RandomState::new().hash_one(nanos)
}

/// Capacity each of the open chunk's three buffers keeps after a flush: one writer's share of
/// [`crate::IDLE_WRITER_BUFFER_BYTES_MAX`].
const BUFFER_KEPT_BYTES_MAX: usize = crate::IDLE_WRITER_BUFFER_BYTES_MAX / 3;

impl Journal {
    /// Starts a journal whose chunk files hold exactly `base` durable bytes, atomically
    /// replacing any previous journal of the chunk; the caller syncs the directory. With
    /// `sync`, the header is synced before the journal takes its place; without, the chunk's
    /// next sync makes it durable (for a chunk whose files nothing durable needs before then).
    /// In a [`ChunkDir::Hidden`] directory the journal is written in place: the directory's
    /// rename makes it appear whole.
    fn start(
        io: &Io,
        dir: &Path,
        seq: u64,
        base: ChunkLens,
        sync: bool,
        place: ChunkDir,
    ) -> Result<Journal> {
        let path = journal_path(dir, seq);
        let write_at = match place {
            ChunkDir::Live => path.with_extension("journal.tmp"),
            ChunkDir::Hidden => path.clone(),
        };
        let file = io.create(&write_at)?;
        let id = new_journal_id();
        let header = JournalHeader { base, id };
        io.write_at(&file, &write_at, 0, &header.encode())?;
        io.set_len(&file, &write_at, JOURNAL_ALLOCATE_BYTES)?;
        if sync {
            io.sync_data(&file, &write_at)?;
        }
        if write_at != path {
            io.rename(&write_at, &path)?;
        }
        Ok(Journal::created(path, file, header, !sync))
    }

    /// Takes over the empty journal [`Journal::start`] made, open in `file`; `header_unsynced`
    /// if its header is not durable yet.
    fn created(path: PathBuf, file: File, header: JournalHeader, header_unsynced: bool) -> Journal {
        let len = to_u64(JOURNAL_HEADER_BYTES);
        Journal {
            file: LazyFile::opened(path, file),
            id: header.id,
            len,
            synced_len: len,
            allocated: JOURNAL_ALLOCATE_BYTES,
            unsynced: Vec::new(),
            deferred: false,
            header_unsynced,
        }
    }

    /// Continues the journal a clean close left in `file` with header `header`: its frames
    /// end at `close_at`, where the close record lies (the next frame overwrites it), and the
    /// file ends after the record.
    fn resume(path: PathBuf, file: File, header: JournalHeader, close_at: u64) -> Journal {
        Journal {
            file: LazyFile::opened(path, file),
            id: header.id,
            len: close_at,
            synced_len: close_at,
            allocated: close_at + to_u64(CLOSE_RECORD_BYTES),
            unsynced: Vec::new(),
            deferred: false,
            header_unsynced: false,
        }
    }

    /// The frames since the last sync, for the group journal.
    fn unsynced_write(&self) -> JournalWrite<'_> {
        JournalWrite {
            path: self.file.path(),
            id: self.id,
            at: self.synced_len,
            file_len: self.allocated,
            bytes: &self.unsynced,
        }
    }

    /// Appends a frame, first extending the file's size by whole steps if it would not fit;
    /// the frame is written to the file unless `defer` (the group journal then makes it
    /// durable and writes it there later).
    fn append(&mut self, io: &Io, frame: &[u8], defer: bool) -> Result<()> {
        let end = self.len + to_u64(frame.len());
        if end > self.allocated {
            self.allocated = end.next_multiple_of(JOURNAL_ALLOCATE_BYTES);
            io.set_len(self.file.get()?, self.file.path(), self.allocated)?;
        }
        if !defer {
            io.write_at(self.file.get()?, self.file.path(), self.len, frame)?;
        }
        self.unsynced.extend_from_slice(frame);
        self.deferred |= defer;
        self.len = end;
        Ok(())
    }

    /// Every frame so far is durable.
    fn synced(&mut self) {
        self.synced_len = self.len;
        self.unsynced.clear();
        self.unsynced.shrink_to(BUFFER_KEPT_BYTES_MAX);
        self.deferred = false;
        self.header_unsynced = false;
    }
}

/// How the journal of an existing tail chunk continues.
#[derive(Debug)]
pub(crate) enum JournalStart {
    /// A fresh journal, based at the chunk files' lengths (after recovery).
    Fresh,
    /// The journal a clean close left, open in `file`, its close record at `close_at`.
    Resume {
        /// The journal, open for reading and writing.
        file: File,
        /// Its header.
        header: JournalHeader,
        /// Where the close record lies: the end of the frames.
        close_at: u64,
    },
}

/// What the writer resumes from in an existing tail chunk.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TailState {
    /// Durable bytes of the chunk's files, each ending with a commit record (or empty).
    pub lens: ChunkLens,
    /// Offset of the chunk's first record, if any.
    pub first: Option<LogOffset>,
    /// The chunk's last record, a commit, if any.
    pub last_commit: Option<Record>,
    /// Offset of the log's last message, in this chunk or an earlier one.
    pub last_message: Option<LogOffset>,
}

/// The chunk being appended to (generation 0, never compacted while open).
#[derive(Debug)]
pub(crate) struct OpenChunk {
    /// Position of the chunk in the log (0, 1, ...).
    pub seq: u64,
    json: Appender,
    keys: Appender,
    recs: Appender,
    journal: Journal,
    /// Offset of the first record, if any.
    pub first: Option<LogOffset>,
    /// Offset of the last record, if any.
    pub last: Option<LogOffset>,
    /// Whether the last record is a commit.
    pub last_is_commit: bool,
    /// Offset of the log's last message, in this chunk or an earlier one: a message must come
    /// after it, a commit carries it.
    last_message: Option<LogOffset>,
    /// Whether the journal was written since its last sync.
    journal_unsynced: bool,
    /// Whether the chunk files were written in place since they were last synced.
    in_place_unsynced: bool,
    /// Whether the chunk files were written at all (in place or journaled) since they were last
    /// synced: their bytes may then be durable only through the journal.
    files_unsynced: bool,
    /// Bytes the journal took since the last sync.
    journaled: usize,
    /// Bytes the journal takes between two syncs; later writes stay in place.
    journal_bytes_max: usize,
}

impl OpenChunk {
    /// Creates the three empty files of chunk `seq` and its journal in `dir` (`place` says
    /// whether readers may see it yet), following a log whose last message is `last_message`,
    /// none of them synced: the chunk's next sync includes its journal, and the caller syncs
    /// the directory with it.
    pub fn create(
        io: &Io,
        (dir, place): (&Path, ChunkDir),
        seq: u64,
        last_message: Option<LogOffset>,
        journal_bytes_max: usize,
    ) -> Result<Self> {
        let make = |file| -> Result<Appender> {
            let path = chunk_path(dir, seq, 0, file);
            let file = io.create(&path)?;
            Ok(Appender::new(LazyFile::opened(path, file), 0))
        };
        Ok(OpenChunk {
            seq,
            json: make(ChunkFile::Json)?,
            keys: make(ChunkFile::Keys)?,
            recs: make(ChunkFile::Recs)?,
            journal: Journal::start(io, dir, seq, ChunkLens::default(), false, place)?,
            first: None,
            last: None,
            last_is_commit: false,
            last_message,
            journal_unsynced: false,
            in_place_unsynced: false,
            files_unsynced: false,
            journaled: 0,
            journal_bytes_max,
        })
    }

    /// Opens the existing files of chunk `seq` as `state` describes them, with a fresh journal
    /// based at their lengths (the caller then syncs the directory) or the one a clean close left.
    pub fn open(
        io: &Io,
        dir: &Path,
        seq: u64,
        state: TailState,
        journal: JournalStart,
        journal_bytes_max: usize,
    ) -> Result<Self> {
        let lens = state.lens;
        let open = |file, written| -> Result<Appender> {
            let path = chunk_path(dir, seq, 0, file);
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(io_err(&path))?;
            Ok(Appender::new(LazyFile::opened(path, file), written))
        };
        Ok(OpenChunk {
            seq,
            json: open(ChunkFile::Json, lens.json)?,
            keys: open(ChunkFile::Keys, lens.keys)?,
            recs: open(ChunkFile::Recs, lens.recs)?,
            journal: match journal {
                JournalStart::Fresh => Journal::start(io, dir, seq, lens, true, ChunkDir::Live)?,
                JournalStart::Resume {
                    file,
                    header,
                    close_at,
                } => Journal::resume(journal_path(dir, seq), file, header, close_at),
            },
            first: state.first,
            last: state.last_commit.map(|r| r.offset),
            last_is_commit: state.last_commit.is_some(),
            last_message: state.last_message,
            journal_unsynced: false,
            in_place_unsynced: false,
            files_unsynced: false,
            journaled: 0,
            journal_bytes_max,
        })
    }

    /// Follows the chunk's directory, renamed to `dir` with the files open in it: later
    /// writes, syncs and reopens use the paths in `dir`.
    pub fn moved_to(&mut self, dir: &Path) {
        self.json
            .file
            .move_to(chunk_path(dir, self.seq, 0, ChunkFile::Json));
        self.keys
            .file
            .move_to(chunk_path(dir, self.seq, 0, ChunkFile::Keys));
        self.recs
            .file
            .move_to(chunk_path(dir, self.seq, 0, ChunkFile::Recs));
        self.journal.file.move_to(journal_path(dir, self.seq));
    }

    /// Bytes of JSON in the chunk, written or buffered.
    pub fn json_len(&self) -> u64 {
        self.json.len()
    }

    /// Records in the chunk, written or buffered.
    pub fn record_count(&self) -> u64 {
        self.recs.len() / to_u64(RECORD_BYTES)
    }

    /// Bytes held in memory: not yet written, or not yet in a journal frame.
    pub fn buffered_bytes(&self) -> usize {
        self.json.buf.len() + self.keys.buf.len() + self.recs.buf.len()
    }

    /// Bytes not yet in a journal frame.
    fn unframed_bytes(&self) -> usize {
        self.json.unframed().len() + self.keys.unframed().len() + self.recs.unframed().len()
    }

    /// Bytes not yet written to the chunk files (in a frame or not): readers do not see them.
    pub fn unwritten_bytes(&self) -> usize {
        self.json.unwritten_len() + self.keys.unwritten_len() + self.recs.unwritten_len()
    }

    /// Bytes of memory the buffers hold, used or not.
    pub fn retained_bytes(&self) -> usize {
        self.json.buf.capacity() + self.keys.buf.capacity() + self.recs.buf.capacity()
    }

    /// Gives the memory of the written-out buffers back, but for [`BUFFER_KEPT_BYTES_MAX`] each
    /// (or what they still hold, unwritten), so that an idle writer holds little however large
    /// its last transaction was.
    pub fn shrink_buffers(&mut self) {
        assert_eq!(self.unframed_bytes(), 0, "buffers are framed first");
        for appender in [&mut self.json, &mut self.keys, &mut self.recs] {
            appender.buf.shrink_to(BUFFER_KEPT_BYTES_MAX);
        }
    }

    /// Buffers one record with its JSON and key (both empty for a commit). A message's offset
    /// must be after every earlier message's, in this chunk or before it; a commit carries the
    /// offset of the last message (`LogOffset::ZERO` if there is none).
    pub fn push(
        &mut self,
        offset: LogOffset,
        kind: RecordKind,
        flags: u8,
        json: &[u8],
        key: &[u8],
    ) {
        match kind {
            RecordKind::Message(_) => {
                if let Some(last) = self.last_message {
                    assert!(
                        offset > last,
                        "message offsets must strictly increase: {offset} after {last}"
                    );
                }
                self.last_message = Some(offset);
            }
            RecordKind::Commit => assert_eq!(
                offset,
                self.last_message.unwrap_or(LogOffset::ZERO),
                "a commit carries the offset of the last message"
            ),
        }
        self.json.buf.extend_from_slice(json);
        self.keys.buf.extend_from_slice(key);
        let rec = Record {
            offset,
            json_end: self.json.len(),
            key_end: self.keys.len(),
            kind,
            flags,
        };
        self.recs.buf.extend_from_slice(&rec.encode(json, key));
        self.first.get_or_insert(offset);
        self.last = Some(offset);
        self.last_is_commit = kind == RecordKind::Commit;
    }

    /// Writes the buffers to the chunk files (JSON and keys before the records that point into
    /// them), then the bytes new since the last frame as one frame to the journal, or only to
    /// memory if `defer_journal` (for the group journal, [`OpenChunk::journal_write`]). Nothing
    /// is synced.
    pub fn write_out(&mut self, io: &Io, defer_journal: bool) -> Result<()> {
        self.write_out_as(io, defer_journal, Files::Write)
    }

    /// [`OpenChunk::write_out`], the chunk files as `files` says.
    pub(crate) fn write_out_as(
        &mut self,
        io: &Io,
        defer_journal: bool,
        files: Files,
    ) -> Result<()> {
        if self.buffered_bytes() == 0 {
            return Ok(());
        }
        let unframed = self.unframed_bytes();
        // The journal takes whole writes until it holds `journal_bytes_max` bytes since the
        // last sync: a small flush then costs one sync. Later writes stay in place and the next
        // sync covers the chunk files too, so a large flush is not written twice. Until every
        // sync is done nothing is reported durable, and record checksums catch in-place bytes
        // that did not survive.
        let in_place =
            files == Files::InPlace || self.journaled + unframed > self.journal_bytes_max;
        let write_files =
            in_place || files != Files::Defer || self.retained_bytes() > DEFERRED_BYTES_MAX;
        let frame = (unframed > 0).then(|| self.frame(in_place));
        if write_files {
            self.write_files(io)?;
        } else {
            assert!(!in_place, "bytes described in place are written");
        }
        if let Some(frame) = frame {
            if !in_place {
                self.journaled += frame.len();
            }
            self.journal.append(io, &frame, defer_journal)?;
            for appender in [&mut self.json, &mut self.keys, &mut self.recs] {
                appender.framed_all();
            }
            self.in_place_unsynced |= in_place;
            self.journal_unsynced = true;
        }
        Ok(())
    }

    /// The journal frame of the bytes not yet in one: holding them, or describing them in place.
    fn frame(&self, in_place: bool) -> Vec<u8> {
        let at = ChunkLens {
            json: self.json.framed,
            keys: self.keys.framed,
            recs: self.recs.framed,
        };
        let unframed = [
            self.recs.unframed(),
            self.keys.unframed(),
            self.json.unframed(),
        ];
        let len = ChunkLens {
            json: to_u64(unframed[2].len()),
            keys: to_u64(unframed[1].len()),
            recs: to_u64(unframed[0].len()),
        };
        let (flags, parts) = if in_place {
            (FRAME_JSON_IN_PLACE | FRAME_RECORDS_IN_PLACE, [&[][..]; 3])
        } else {
            (0, unframed)
        };
        let header = FrameHeader { at, len, flags }.encode(parts[0], parts[1], parts[2]);
        let mut frame =
            Vec::with_capacity(header.len() + parts.iter().map(|p| p.len()).sum::<usize>());
        frame.extend_from_slice(&header);
        for part in parts {
            frame.extend_from_slice(part);
        }
        frame
    }

    /// Writes the bytes not yet written to the chunk files (JSON and keys before the records
    /// that point into them), not synced, and not framed: bytes a frame does not hold yet
    /// stay in memory for the next one. Bytes framed earlier are durable through the journal.
    pub fn write_files(&mut self, io: &Io) -> Result<()> {
        if self.unwritten_bytes() == 0 {
            return Ok(());
        }
        self.json.write_out(io)?;
        self.keys.write_out(io)?;
        self.recs.write_out(io)?;
        self.files_unsynced = true;
        Ok(())
    }

    /// Writes the buffers when the chunk closes, its journal's last frame describing them in
    /// place: the chunk files are synced anyway ([`OpenChunk::files_to_sync_closed`]), since
    /// they must be durable before the chunk's index entry, and until then the journal must
    /// describe all of the chunk (recovery treats it as the tail).
    pub fn write_closing(&mut self, io: &Io) -> Result<()> {
        self.write_out_as(io, false, Files::InPlace)
    }

    /// What a closed chunk needs synced before its index entry is written: its three files and
    /// its journal (if written, or its header, since the last sync).
    pub fn files_to_sync_closed(&self) -> Result<Vec<(&File, &Path)>> {
        assert_eq!(self.buffered_bytes(), 0, "a closed chunk is written out");
        self.unsynced_files(true, true)
    }

    /// The files a flush syncs after [`OpenChunk::write_out`]: the journal if it was written
    /// and `with_journal` (or its header is not durable yet), and the chunk files if written
    /// in place since the last sync.
    pub fn files_to_sync(&self, with_journal: bool) -> Result<Vec<(&File, &Path)>> {
        self.unsynced_files(self.in_place_unsynced, with_journal)
    }

    /// The chunk files if `chunk_files`, and the journal if written since its last sync and
    /// `with_journal`.
    fn unsynced_files(&self, chunk_files: bool, with_journal: bool) -> Result<Vec<(&File, &Path)>> {
        let mut files: Vec<(&File, &Path)> = Vec::with_capacity(4);
        if chunk_files {
            for a in [&self.json, &self.keys, &self.recs] {
                files.push((a.file.get()?, a.file.path()));
            }
        }
        if (self.journal_unsynced && with_journal) || self.journal.header_unsynced {
            files.push((self.journal.file.get()?, self.journal.file.path()));
        }
        Ok(files)
    }

    /// The journal's frames written since its last sync, for the group journal to make
    /// durable instead of the journal's own sync; `None` if there are none.
    pub fn journal_write(&self) -> Option<JournalWrite<'_>> {
        self.journal_unsynced.then(|| self.journal.unsynced_write())
    }

    /// Records that the files of [`OpenChunk::files_to_sync`] were synced by the caller after
    /// [`OpenChunk::write_out`], and starts a new sync interval.
    pub fn synced(&mut self) {
        assert_eq!(self.unframed_bytes(), 0, "buffers are framed first");
        let chunk_files = self.in_place_unsynced;
        self.mark_synced(chunk_files);
    }

    /// Syncs the journal if it was written and the chunk files if `chunk_files` (all started
    /// together), and starts a new sync interval.
    fn sync(&mut self, io: &Io, chunk_files: bool) -> Result<()> {
        assert!(
            !self.journal.deferred,
            "frames only the group journal holds are made durable by it"
        );
        io.sync_data_all(&self.unsynced_files(chunk_files, true)?)?;
        self.mark_synced(chunk_files);
        Ok(())
    }

    /// Starts a new sync interval once the journal, and the chunk files if `chunk_files`, are
    /// synced.
    fn mark_synced(&mut self, chunk_files: bool) {
        self.journal.synced();
        self.in_place_unsynced = false;
        self.files_unsynced &= !chunk_files;
        self.journal_unsynced = false;
        self.journaled = 0;
    }

    /// The lengths of the chunk's files, written or buffered.
    pub fn lens(&self) -> ChunkLens {
        ChunkLens {
            json: self.json.len(),
            keys: self.keys.len(),
            recs: self.recs.len(),
        }
    }

    /// Ends the journal with `record` (not synced): the file is cut to end with it, so the next
    /// open finds it without reading the journal, and trusts the chunk files as it describes
    /// them, so they are first synced if written since their last sync (their bytes may be
    /// durable only through the journal, which that open does not replay). Only after a flush,
    /// with nothing buffered; the chunk takes no more writes. Returns whether the record was
    /// written: not when the file would end at a multiple of [`JOURNAL_ALLOCATE_BYTES`], where a
    /// frame's payload could end too (the next open then runs recovery).
    pub fn write_close_record(&mut self, io: &Io, record: &CloseRecord) -> Result<bool> {
        assert!(
            self.buffered_bytes() == 0 && !self.journal_unsynced && !self.in_place_unsynced,
            "a close record follows a flush"
        );
        assert_eq!(
            record.lens,
            self.lens(),
            "a close record describes the chunk"
        );
        let at = self.journal.len;
        let end = at + to_u64(CLOSE_RECORD_BYTES);
        if end.is_multiple_of(JOURNAL_ALLOCATE_BYTES) {
            return Ok(false);
        }
        if self.files_unsynced {
            self.sync(io, true)?;
        }
        let (file, path) = (self.journal.file.get()?, self.journal.file.path());
        io.write_at(file, path, at, &record.encode())?;
        io.set_len(file, path, end)?;
        self.journal.allocated = end;
        Ok(true)
    }

    /// Closes the chunk's four files and frees its buffers, once everything is written out
    /// (what is not synced yet stays to be synced, and the journal's frames since its last
    /// sync stay in memory for the group journal); any later use opens the files again.
    pub fn release(&mut self) {
        assert_eq!(
            self.buffered_bytes(),
            0,
            "a chunk is released once its buffers are written out"
        );
        assert!(
            !self.journal.deferred,
            "frames only the group journal will hold are not released before it does"
        );
        for appender in [&mut self.json, &mut self.keys, &mut self.recs] {
            appender.buf = Vec::new();
            appender.file.release();
        }
        self.journal.file.release();
    }

    /// Whether none of the chunk's files is open.
    pub fn files_closed(&self) -> bool {
        [&self.json, &self.keys, &self.recs]
            .iter()
            .all(|a| !a.file.is_open())
            && !self.journal.file.is_open()
    }

    /// Whether the chunk files were written in place since their last sync, so that the next
    /// sync needs them ([`OpenChunk::files_to_sync`]).
    pub fn chunk_files_unsynced(&self) -> bool {
        self.in_place_unsynced
    }

    /// Closes the chunk's files, keeping its buffers and everything else: they reopen as they
    /// are written.
    pub fn release_files(&mut self) {
        for appender in [&mut self.json, &mut self.keys, &mut self.recs] {
            appender.file.release();
        }
        self.journal.file.release();
    }

    /// Whether the chunk's files are as this writer left them when it released them: the
    /// journal still the one it wrote (any other writer that opened the chunk since either
    /// started a new journal or appended records) and each chunk file exactly as long as
    /// written. Opens the files again.
    pub fn unchanged_since_release(&self) -> Result<bool> {
        let mut head = [0u8; JOURNAL_HEADER_BYTES];
        self.journal
            .file
            .get()?
            .read_exact_at(&mut head, 0)
            .map_err(io_err(self.journal.file.path()))?;
        if JournalHeader::decode(&head).map(|h| h.id) != Some(self.journal.id) {
            return Ok(false);
        }
        for a in [&self.json, &self.keys, &self.recs] {
            let len = a
                .file
                .get()?
                .metadata()
                .map_err(io_err(a.file.path()))?
                .len();
            if len != a.written {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The index entry describing this chunk once it is closed.
    pub fn entry(&self, flags: u16) -> ChunkEntry {
        ChunkEntry {
            first: self.first.expect("a closed chunk has records"),
            last: self.last.expect("a closed chunk has records"),
            json_len: self.json.len(),
            record_count: self.record_count(),
            keys_len: self.keys.len(),
            gen: 0,
            flags,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Operation;

    const INSERT: RecordKind = RecordKind::Message(Operation::Insert);

    fn chunk(dir: &tempfile::TempDir, last_message: Option<LogOffset>) -> OpenChunk {
        OpenChunk::create(
            &Io::default(),
            (dir.path(), ChunkDir::Live),
            3,
            last_message,
            1024,
        )
        .unwrap()
    }

    #[test]
    fn messages_after_the_last_and_commits_at_it_are_taken() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = chunk(&dir, Some(LogOffset::new(4, 9)));
        c.push(LogOffset::new(5, 0), INSERT, 0, b"a", b"k");
        c.push(LogOffset::new(5, 1), INSERT, 0, b"b", b"k");
        c.push(LogOffset::new(5, 1), RecordKind::Commit, 0, b"", b"");
        assert_eq!(c.record_count(), 3);
    }

    #[test]
    #[should_panic(expected = "message offsets must strictly increase: 5_0 after 5_0")]
    fn a_repeated_offset_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = chunk(&dir, None);
        c.push(LogOffset::new(5, 0), INSERT, 0, b"a", b"k");
        c.push(LogOffset::new(5, 0), INSERT, 0, b"b", b"k");
    }

    #[test]
    #[should_panic(expected = "message offsets must strictly increase: 7_0 after 7_2")]
    fn an_offset_before_an_earlier_chunks_last_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = chunk(&dir, Some(LogOffset::new(7, 2)));
        c.push(LogOffset::new(7, 0), INSERT, 0, b"a", b"k");
    }

    #[test]
    #[should_panic(expected = "a commit carries the offset of the last message")]
    fn a_commit_at_another_offset_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = chunk(&dir, None);
        c.push(LogOffset::new(5, 0), INSERT, 0, b"a", b"k");
        c.push(LogOffset::new(6, 0), RecordKind::Commit, 0, b"", b"");
    }
}

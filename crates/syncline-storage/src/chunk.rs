//! The writer's open chunk: three append-only files fed through in-memory buffers, and the
//! chunk's journal, which receives the same bytes as one checksummed frame per write so that a
//! small flush needs a single `fdatasync` (a large one syncs the chunk files instead).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use syncline_core::LogOffset;

use crate::error::{io_err, Result};
use crate::format::{
    chunk_path, encode_journal_header, journal_path, ChunkEntry, ChunkFile, ChunkLens, FrameHeader,
    Record, RecordKind, FRAME_JSON_IN_PLACE, FRAME_RECORDS_IN_PLACE, JOURNAL_HEADER_BYTES,
    RECORD_BYTES,
};
use crate::io::Io;

/// One file of the open chunk with the bytes not yet written to it.
#[derive(Debug)]
struct Appender {
    path: PathBuf,
    file: File,
    /// Bytes already written to the file.
    written: u64,
    buf: Vec<u8>,
}

impl Appender {
    fn len(&self) -> u64 {
        self.written + self.buf.len() as u64
    }

    fn write_out(&mut self, io: &Io) -> Result<()> {
        io.write_at(&self.file, &self.path, self.written, &self.buf)?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }
}

/// The journal of the open chunk: a header, then one frame per write of the buffers.
#[derive(Debug)]
struct Journal {
    path: PathBuf,
    file: File,
    len: u64,
    /// The file's size: frames are written into this (sparse) space, so that a sync after a
    /// small write rarely has to commit a size change.
    allocated: u64,
}

/// Size a journal is extended to ahead of its frames (sparse: it costs no disk space).
const JOURNAL_ALLOCATE_BYTES: u64 = 1024 * 1024;

impl Journal {
    /// Starts a journal whose chunk files hold exactly `base` durable bytes, atomically
    /// replacing any previous journal of the chunk; the caller syncs the directory.
    fn start(io: &Io, dir: &Path, seq: u64, base: ChunkLens) -> Result<Journal> {
        let path = journal_path(dir, seq);
        let tmp = path.with_extension("journal.tmp");
        let file = io.create(&tmp)?;
        io.write_at(&file, &tmp, 0, &encode_journal_header(base))?;
        io.set_len(&file, &tmp, JOURNAL_ALLOCATE_BYTES)?;
        io.sync_data(&file, &tmp)?;
        io.rename(&tmp, &path)?;
        Ok(Journal {
            path,
            file,
            len: JOURNAL_HEADER_BYTES as u64,
            allocated: JOURNAL_ALLOCATE_BYTES,
        })
    }

    /// Appends a frame, first extending the file's size by whole steps if it would not fit.
    fn append(&mut self, io: &Io, frame: &[u8]) -> Result<()> {
        let end = self.len + frame.len() as u64;
        if end > self.allocated {
            self.allocated = end.next_multiple_of(JOURNAL_ALLOCATE_BYTES);
            io.set_len(&self.file, &self.path, self.allocated)?;
        }
        io.write_at(&self.file, &self.path, self.len, frame)?;
        self.len = end;
        Ok(())
    }
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
    /// Whether the journal was written since its last sync.
    journal_unsynced: bool,
    /// Whether the chunk files were written in place since they were last synced.
    in_place_unsynced: bool,
    /// Bytes the journal took since the last sync.
    journaled: usize,
    /// Bytes the journal takes between two syncs; later writes stay in place.
    journal_bytes_max: usize,
}

impl OpenChunk {
    /// Creates the three empty files of chunk `seq` and its journal; the caller syncs the
    /// directory.
    pub fn create(io: &Io, dir: &Path, seq: u64, journal_bytes_max: usize) -> Result<Self> {
        let make = |file| -> Result<Appender> {
            let path = chunk_path(dir, seq, 0, file);
            let file = io.create(&path)?;
            Ok(Appender {
                path,
                file,
                written: 0,
                buf: Vec::new(),
            })
        };
        Ok(OpenChunk {
            seq,
            json: make(ChunkFile::Json)?,
            keys: make(ChunkFile::Keys)?,
            recs: make(ChunkFile::Recs)?,
            journal: Journal::start(io, dir, seq, ChunkLens::default())?,
            first: None,
            last: None,
            last_is_commit: false,
            journal_unsynced: false,
            in_place_unsynced: false,
            journaled: 0,
            journal_bytes_max,
        })
    }

    /// Opens the existing files of chunk `seq`, which hold exactly `lens` durable bytes, and
    /// starts a fresh journal from there; the caller syncs the directory.
    pub fn open(
        io: &Io,
        dir: &Path,
        seq: u64,
        lens: ChunkLens,
        first: Option<LogOffset>,
        last: Option<(Record, bool)>,
        journal_bytes_max: usize,
    ) -> Result<Self> {
        let open = |file, written| -> Result<Appender> {
            let path = chunk_path(dir, seq, 0, file);
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(io_err(&path))?;
            Ok(Appender {
                path,
                file,
                written,
                buf: Vec::new(),
            })
        };
        Ok(OpenChunk {
            seq,
            json: open(ChunkFile::Json, lens.json)?,
            keys: open(ChunkFile::Keys, lens.keys)?,
            recs: open(ChunkFile::Recs, lens.recs)?,
            journal: Journal::start(io, dir, seq, lens)?,
            first,
            last: last.map(|(r, _)| r.offset),
            last_is_commit: last.is_some_and(|(r, _)| r.is_commit()),
            journal_unsynced: false,
            in_place_unsynced: false,
            journaled: 0,
            journal_bytes_max,
        })
    }

    /// Bytes of JSON in the chunk, written or buffered.
    pub fn json_len(&self) -> u64 {
        self.json.len()
    }

    /// Records in the chunk, written or buffered.
    pub fn record_count(&self) -> u64 {
        self.recs.len() / RECORD_BYTES as u64
    }

    /// Bytes held in memory, not yet written.
    pub fn buffered_bytes(&self) -> usize {
        self.json.buf.len() + self.keys.buf.len() + self.recs.buf.len()
    }

    /// Buffers one record with its JSON and key (both empty for a commit).
    pub fn push(
        &mut self,
        offset: LogOffset,
        kind: RecordKind,
        flags: u8,
        json: &[u8],
        key: &[u8],
    ) {
        if let Some(last) = self.last {
            assert!(
                offset >= last,
                "record offsets must not decrease: {offset} after {last}"
            );
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
    /// them), then the same bytes as one frame to the journal. Nothing is synced.
    pub fn write_out(&mut self, io: &Io) -> Result<()> {
        if self.buffered_bytes() == 0 {
            return Ok(());
        }
        let at = ChunkLens {
            json: self.json.written,
            keys: self.keys.written,
            recs: self.recs.written,
        };
        let len = ChunkLens {
            json: self.json.buf.len() as u64,
            keys: self.keys.buf.len() as u64,
            recs: self.recs.buf.len() as u64,
        };
        // The journal takes whole writes until it holds `journal_bytes_max` bytes since the
        // last sync: a small flush then costs one sync. Later writes stay in place and the next
        // sync covers the chunk files too, so a large flush is not written twice. Until every
        // sync is done nothing is reported durable, and record checksums catch in-place bytes
        // that did not survive.
        let in_place = self.journaled + self.buffered_bytes() > self.journal_bytes_max;
        let (flags, parts) = if in_place {
            (FRAME_JSON_IN_PLACE | FRAME_RECORDS_IN_PLACE, [&[][..]; 3])
        } else {
            (
                0,
                [&self.recs.buf[..], &self.keys.buf[..], &self.json.buf[..]],
            )
        };
        let header = FrameHeader { at, len, flags }.encode(parts[0], parts[1], parts[2]);
        let mut frame =
            Vec::with_capacity(header.len() + parts.iter().map(|p| p.len()).sum::<usize>());
        frame.extend_from_slice(&header);
        for part in parts {
            frame.extend_from_slice(part);
        }
        if !in_place {
            self.journaled += frame.len();
        }
        self.json.write_out(io)?;
        self.keys.write_out(io)?;
        self.recs.write_out(io)?;
        self.journal.append(io, &frame)?;
        self.in_place_unsynced |= in_place;
        self.journal_unsynced = true;
        Ok(())
    }

    /// Writes the buffers and makes them durable with one `fdatasync` of the journal, and of
    /// the chunk files if written in place since the last sync (all started together).
    pub fn write_and_sync_journal(&mut self, io: &Io) -> Result<()> {
        self.write_out(io)?;
        self.sync(io, self.in_place_unsynced)
    }

    /// Writes the buffers and makes the chunk files and the journal durable, when the chunk
    /// closes: its files must be durable before its index entry, and its journal must describe
    /// all of it while it is not yet indexed (recovery then treats it as the tail).
    pub fn write_and_sync_all(&mut self, io: &Io) -> Result<()> {
        self.write_out(io)?;
        self.sync(io, true)
    }

    /// Syncs the journal if it was written and the chunk files if `chunk_files` (all started
    /// together), and starts a new sync interval.
    fn sync(&mut self, io: &Io, chunk_files: bool) -> Result<()> {
        let mut files: Vec<(&File, &Path)> = Vec::with_capacity(4);
        if chunk_files {
            for a in [&self.json, &self.keys, &self.recs] {
                files.push((&a.file, a.path.as_path()));
            }
        }
        if self.journal_unsynced {
            files.push((&self.journal.file, self.journal.path.as_path()));
        }
        io.sync_data_all(&files)?;
        self.in_place_unsynced = false;
        self.journal_unsynced = false;
        self.journaled = 0;
        Ok(())
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

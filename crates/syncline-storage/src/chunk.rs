//! The writer's open chunk: three append-only files fed through in-memory buffers.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use syncline_core::LogOffset;

use crate::error::{io_err, Result};
use crate::format::{chunk_path, ChunkEntry, ChunkFile, Record, RecordKind, RECORD_BYTES};
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

    fn write_out(&mut self, io: &Io) -> Result<bool> {
        if self.buf.is_empty() {
            return Ok(false);
        }
        io.write_at(&self.file, &self.path, self.written, &self.buf)?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(true)
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
    /// Offset of the first record, if any.
    pub first: Option<LogOffset>,
    /// Offset of the last record, if any.
    pub last: Option<LogOffset>,
    /// Whether the last record is a commit.
    pub last_is_commit: bool,
    /// Whether bytes were written since the last sync.
    unsynced: bool,
}

/// Lengths of the three files of a chunk, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ChunkLens {
    pub json: u64,
    pub keys: u64,
    pub recs: u64,
}

impl OpenChunk {
    /// Creates the three empty files of chunk `seq`.
    pub fn create(io: &Io, dir: &Path, seq: u64) -> Result<Self> {
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
            first: None,
            last: None,
            last_is_commit: false,
            unsynced: false,
        })
    }

    /// Opens the existing files of chunk `seq` whose valid content has exactly `lens` bytes.
    pub fn open(
        dir: &Path,
        seq: u64,
        lens: ChunkLens,
        first: Option<LogOffset>,
        last: Option<(Record, bool)>,
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
            first,
            last: last.map(|(r, _)| r.offset),
            last_is_commit: last.is_some_and(|(r, _)| r.is_commit()),
            unsynced: false,
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

    /// Writes the buffers to the files, JSON and keys before the records that point into them.
    pub fn write_out(&mut self, io: &Io) -> Result<()> {
        for wrote in [
            self.json.write_out(io)?,
            self.keys.write_out(io)?,
            self.recs.write_out(io)?,
        ] {
            self.unsynced |= wrote;
        }
        Ok(())
    }

    /// Writes the buffers and makes the files durable (`fdatasync` each written file).
    pub fn write_and_sync(&mut self, io: &Io) -> Result<()> {
        self.write_out(io)?;
        if self.unsynced {
            for a in [&self.json, &self.keys, &self.recs] {
                io.sync_data(&a.file, &a.path)?;
            }
            self.unsynced = false;
        }
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

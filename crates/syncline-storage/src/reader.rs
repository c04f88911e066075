//! Reading a shape log through the files alone, in this process or any other.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use syncline_core::LogOffset;

use crate::error::{corrupt, io_err, Result};
use crate::format::{
    chunk_path, ChunkEntry, ChunkFile, Record, ENTRY_BYTES, FLAG_SNAPSHOT_DONE, INDEX_FILE,
    RECORD_BYTES,
};
use crate::index::decode_entries;

/// Records a search reads with one `pread` once its range is this small (4 KiB worth).
const SEARCH_RECORDS_MAX: u64 = 4 * 1024 / RECORD_BYTES as u64;
/// Records read with one `pread` when scanning back for the tail's last commit (64 KiB worth).
const SCAN_RECORDS_MAX: u64 = 64 * 1024 / RECORD_BYTES as u64;
/// Chunks whose open files a reader keeps.
const CACHED_CHUNKS_MAX: usize = 4;

/// A byte range of a chunk's JSON file: the body of a response, ready for `sendfile`.
#[derive(Debug, Clone)]
pub struct FileRange {
    /// The chunk's JSON file, open for reading.
    pub file: Arc<File>,
    /// First byte of the range.
    pub start: u64,
    /// Length of the range in bytes.
    pub len: u64,
}

impl FileRange {
    /// Reads the whole range into memory (for callers that cannot send from the file).
    pub fn read_to_vec(&self) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; usize::try_from(self.len).expect("range fits in memory")];
        self.file.read_exact_at(&mut buf, self.start)?;
        Ok(buf)
    }
}

/// The answer to a read: the JSON of the messages after the requested offset, up to the end of
/// one chunk or of the committed data, and the offset the client continues from.
#[derive(Debug, Clone)]
pub struct ReadResult {
    /// Concatenated JSON of the messages in the response; `None` when there are none.
    pub body: Option<FileRange>,
    /// The offset this response ends at (`None` only for an empty log read from the start).
    pub end_offset: Option<LogOffset>,
    /// The response ends at the end of a closed chunk: the same request always gets these bytes.
    pub chunk_closed: bool,
    /// The response reaches the end of the data committed and visible so far.
    pub up_to_date: bool,
    /// The initial snapshot was complete at `end_offset`.
    pub snapshot_complete: bool,
}

/// Open files of one chunk.
#[derive(Debug)]
struct ChunkFiles {
    seq: u64,
    gen: u16,
    json: Arc<File>,
    /// Opened only when a read must search the records.
    recs: Option<File>,
}

impl ChunkFiles {
    fn recs(&self) -> &File {
        self.recs
            .as_ref()
            .expect("records file opened for this read")
    }
}

/// Where the committed data of the tail chunk ends.
#[derive(Debug, Clone, Copy)]
struct TailEnd {
    record_count: u64,
    commit: Record,
}

/// Reads one shape log. Needs only read access to the shape's directory, holds no lock, and
/// sees what the writer has committed and written (the writer writes at flush, just before it
/// syncs). Compaction and deletion never break a read: open files stay readable.
#[derive(Debug)]
pub struct Reader {
    dir: PathBuf,
    entries: Vec<ChunkEntry>,
    /// Inode and length of the index file as last read; a new inode means compaction replaced it.
    index_seen: (u64, u64),
    cached: Vec<ChunkFiles>,
}

impl Reader {
    /// A reader of the shape stored in `dir` (checked by the caller to be a shape directory).
    pub(crate) fn new(dir: PathBuf) -> Self {
        Reader {
            dir,
            entries: Vec::new(),
            index_seen: (0, 0),
            cached: Vec::new(),
        }
    }

    /// The shape's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads from just after `from` (`None`: from the start): the chunk holding the first message
    /// after `from`, from that message to the chunk's end or the last visible commit.
    pub fn read(&mut self, from: Option<LogOffset>) -> Result<ReadResult> {
        self.refresh_index(false)?;
        if let Some(result) = self.read_once(from)? {
            return Ok(result);
        }
        // A chunk file vanished: compaction replaced it since we read the index.
        self.refresh_index(true)?;
        self.read_once(from)?
            .ok_or_else(|| corrupt(&self.dir, "chunk files missing after index reload"))
    }

    /// Closed chunks currently listed in the index.
    pub fn closed_chunks(&mut self) -> Result<usize> {
        self.refresh_index(false)?;
        Ok(self.entries.len())
    }

    fn read_once(&mut self, from: Option<LogOffset>) -> Result<Option<ReadResult>> {
        let i = from.map_or(0, |f| self.entries.partition_point(|e| e.last <= f));
        if let Some(&entry) = self.entries.get(i) {
            return self.read_closed(i as u64, entry, from);
        }
        self.read_tail(from)
    }

    fn read_closed(
        &mut self,
        seq: u64,
        entry: ChunkEntry,
        from: Option<LogOffset>,
    ) -> Result<Option<ReadResult>> {
        let dir = self.dir.clone();
        // Reading on from the previous chunk's end starts at this chunk's first byte.
        let from = from.filter(|&f| f >= entry.first);
        let Some(files) = self.chunk_files(seq, entry.gen, from.is_some())? else {
            return Ok(None);
        };
        let start = find_start(files, entry.record_count, from, &dir)?;
        assert!(
            start <= entry.json_len,
            "message start {start} past chunk end {}",
            entry.json_len
        );
        Ok(Some(ReadResult {
            body: range(&files.json, start, entry.json_len),
            end_offset: Some(entry.last),
            chunk_closed: true,
            up_to_date: false,
            snapshot_complete: entry.flags & u16::from(FLAG_SNAPSHOT_DONE) != 0,
        }))
    }

    fn read_tail(&mut self, from: Option<LogOffset>) -> Result<Option<ReadResult>> {
        let seq = self.entries.len() as u64;
        let dir = self.dir.clone();
        let Some(files) = self.chunk_files(seq, 0, true)? else {
            return Ok(None);
        };
        let nothing = ReadResult {
            body: None,
            end_offset: from,
            chunk_closed: false,
            up_to_date: true,
            snapshot_complete: false,
        };
        let Some(end) = tail_end(files.recs(), &dir, seq)? else {
            let snapshot_complete = self
                .entries
                .last()
                .is_some_and(|e| e.flags & u16::from(FLAG_SNAPSHOT_DONE) != 0);
            return Ok(Some(ReadResult {
                snapshot_complete,
                ..nothing
            }));
        };
        let snapshot_complete = end.commit.flags & FLAG_SNAPSHOT_DONE != 0;
        if from.is_some_and(|f| f >= end.commit.offset) {
            return Ok(Some(ReadResult {
                snapshot_complete,
                ..nothing
            }));
        }
        let start = find_start(files, end.record_count, from, &dir)?;
        let body = range(&files.json, start, end.commit.json_end);
        let end_offset = if body.is_some() {
            Some(end.commit.offset)
        } else {
            from
        };
        Ok(Some(ReadResult {
            body,
            end_offset,
            chunk_closed: false,
            up_to_date: true,
            snapshot_complete,
        }))
    }

    /// Re-reads the index if it grew or was replaced (or always, when `force`).
    fn refresh_index(&mut self, force: bool) -> Result<()> {
        let path = self.dir.join(INDEX_FILE);
        let meta = fs::metadata(&path).map_err(io_err(&path))?;
        let (ino, len) = (meta.ino(), meta.len());
        let known_len = (self.entries.len() * ENTRY_BYTES) as u64;
        if !force && (ino, len) == self.index_seen {
            return Ok(());
        }
        if force || ino != self.index_seen.0 || len < known_len {
            self.entries.clear();
            self.cached.clear();
        }
        let file = File::open(&path).map_err(io_err(&path))?;
        let from = (self.entries.len() * ENTRY_BYTES) as u64;
        let whole = (len.saturating_sub(from) / ENTRY_BYTES as u64) as usize * ENTRY_BYTES;
        let mut bytes = vec![0u8; whole];
        let got = read_at_most(&file, &mut bytes, from).map_err(io_err(&path))?;
        let new = decode_entries(
            &bytes[..got - got % ENTRY_BYTES],
            self.entries.last().copied(),
        );
        self.entries.extend(new);
        // Bytes past the decoded entries (an entry or group being written) are read again next
        // time, even if the file does not grow meanwhile.
        self.index_seen = (ino, (self.entries.len() * ENTRY_BYTES) as u64);
        Ok(())
    }

    /// The open files of a chunk (the records file only if `need_recs`), from the cache or
    /// freshly opened; `None` if they do not exist.
    fn chunk_files(&mut self, seq: u64, gen: u16, need_recs: bool) -> Result<Option<&ChunkFiles>> {
        let open = |file| {
            let path = chunk_path(&self.dir, seq, gen, file);
            match File::open(&path) {
                Ok(f) => Ok(Some(f)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io_err(&path)(e)),
            }
        };
        let pos = match self
            .cached
            .iter()
            .position(|c| c.seq == seq && c.gen == gen)
        {
            Some(pos) => pos,
            None => {
                let Some(json) = open(ChunkFile::Json)? else {
                    return Ok(None);
                };
                if self.cached.len() == CACHED_CHUNKS_MAX {
                    self.cached.remove(0);
                }
                self.cached.push(ChunkFiles {
                    seq,
                    gen,
                    json: Arc::new(json),
                    recs: None,
                });
                self.cached.len() - 1
            }
        };
        if need_recs && self.cached[pos].recs.is_none() {
            let Some(recs) = open(ChunkFile::Recs)? else {
                return Ok(None);
            };
            self.cached[pos].recs = Some(recs);
        }
        Ok(Some(&self.cached[pos]))
    }
}

fn range(json: &Arc<File>, start: u64, end: u64) -> Option<FileRange> {
    (start < end).then(|| FileRange {
        file: Arc::clone(json),
        start,
        len: end - start,
    })
}

/// The JSON position of the first message after `from` among the first `count` records.
fn find_start(files: &ChunkFiles, count: u64, from: Option<LogOffset>, dir: &Path) -> Result<u64> {
    let Some(from) = from else { return Ok(0) };
    let (mut lo, mut hi, mut start) = (0u64, count, 0u64);
    let mut buf = [0u8; RECORD_BYTES];
    while hi - lo > SEARCH_RECORDS_MAX {
        let mid = lo + (hi - lo) / 2;
        let rec = read_record(files, mid, &mut buf, dir)?;
        if rec.offset <= from {
            (lo, start) = (mid + 1, rec.json_end);
        } else {
            hi = mid;
        }
    }
    let mut block = vec![0u8; ((hi - lo) as usize) * RECORD_BYTES];
    files
        .recs()
        .read_exact_at(&mut block, lo * RECORD_BYTES as u64)
        .map_err(io_err(recs_path(dir, files)))?;
    let mut prev = None;
    for buf in block.chunks_exact(RECORD_BYTES) {
        let rec = Record::decode(buf)
            .ok_or_else(|| corrupt(recs_path(dir, files), "invalid record kind"))?;
        if let Some(p) = prev {
            assert!(
                rec.offset >= p,
                "records out of order on read: {} after {p}",
                rec.offset
            );
        }
        prev = Some(rec.offset);
        if rec.offset > from {
            break;
        }
        start = rec.json_end;
    }
    Ok(start)
}

fn read_record(
    files: &ChunkFiles,
    i: u64,
    buf: &mut [u8; RECORD_BYTES],
    dir: &Path,
) -> Result<Record> {
    files
        .recs()
        .read_exact_at(buf, i * RECORD_BYTES as u64)
        .map_err(|e| io_err(recs_path(dir, files))(e))?;
    Record::decode(buf).ok_or_else(|| corrupt(recs_path(dir, files), "invalid record kind"))
}

fn recs_path(dir: &Path, files: &ChunkFiles) -> PathBuf {
    chunk_path(dir, files.seq, files.gen, ChunkFile::Recs)
}

/// Finds the last intact commit record of the tail chunk, scanning back from its end.
fn tail_end(recs: &File, dir: &Path, seq: u64) -> Result<Option<TailEnd>> {
    let path = chunk_path(dir, seq, 0, ChunkFile::Recs);
    let len = recs.metadata().map_err(io_err(&path))?.len();
    let mut hi = len / RECORD_BYTES as u64;
    let mut block = Vec::new();
    while hi > 0 {
        let lo = hi.saturating_sub(SCAN_RECORDS_MAX);
        block.resize(((hi - lo) as usize) * RECORD_BYTES, 0);
        let got =
            read_at_most(recs, &mut block, lo * RECORD_BYTES as u64).map_err(io_err(&path))?;
        let whole = got / RECORD_BYTES;
        for (i, buf) in block[..whole * RECORD_BYTES]
            .chunks_exact(RECORD_BYTES)
            .enumerate()
            .rev()
        {
            let commit = Record::decode(buf)
                .filter(|r| r.is_commit() && Record::checksum_matches(buf, &[], &[]));
            if let Some(commit) = commit {
                return Ok(Some(TailEnd {
                    record_count: lo + i as u64 + 1,
                    commit,
                }));
            }
        }
        hi = lo;
    }
    Ok(None)
}

/// Reads as much of `buf` as the file holds at `pos` (a file may shrink under a reader only
/// through recovery of a crashed writer).
fn read_at_most(file: &File, buf: &mut [u8], pos: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], pos + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

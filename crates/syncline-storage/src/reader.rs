//! Reading a shape log through the files alone, in this process or any other.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use syncline_core::LogOffset;

use crate::error::{corrupt, io_err, Result};
use crate::format::{
    chunk_path, ChunkEntry, ChunkFile, Record, RecordKind, ENTRY_BYTES, FLAG_MERGED,
    FLAG_SNAPSHOT_DONE, INDEX_FILE, RECORD_BYTES,
};
use crate::index::decode_entries;
use crate::message::Operation;
use crate::num::{to_u64, to_usize};

/// [`RECORD_BYTES`] as a file length.
const RECORD_LEN: u64 = RECORD_BYTES as u64;
/// [`ENTRY_BYTES`] as a file length.
const ENTRY_LEN: u64 = ENTRY_BYTES as u64;
/// Records a search reads with one `pread` once its range is this small (4 KiB worth).
const SEARCH_RECORDS_MAX: u64 = 4 * 1024 / RECORD_LEN;
/// Records read with one `pread` when scanning back for the tail's last commit, or forward over
/// the messages of a response (64 KiB worth).
const SCAN_RECORDS_MAX: u64 = 64 * 1024 / RECORD_LEN;

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
        let mut buf = vec![0u8; to_usize(self.len)];
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
    /// The sequence number of the chunk read (chunks are numbered from 0 in log order).
    pub chunk: u64,
}

/// Where a log's committed data ends, as a reader sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogEnd {
    /// The last committed offset (`None`: nothing committed yet).
    pub last_committed: Option<LogOffset>,
    /// The initial snapshot was complete at that offset.
    pub snapshot_complete: bool,
}

/// One message of a response: its offset, its operation, and where its JSON lies in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageSpan {
    /// The message's offset.
    pub offset: LogOffset,
    /// What it does to its row.
    pub op: Operation,
    /// Compaction merged several updates into this one.
    pub merged: bool,
    /// Position of the message's first JSON byte in the body (0 is the body's first byte).
    pub start: u64,
    /// Position just after its last JSON byte in the body.
    pub end: u64,
}

impl MessageSpan {
    /// The message's JSON within `body`, the response body's bytes.
    pub fn json<'a>(&self, body: &'a [u8]) -> &'a [u8] {
        &body[to_usize(self.start)..to_usize(self.end)]
    }
}

/// The messages of one response, filled by [`Reader::read_messages`]: their offsets,
/// operations and places in the body, and their keys if asked for. Reuse one across reads: it
/// keeps its memory (40 bytes per message of the largest response, plus keys), so reading
/// allocates nothing per message.
#[derive(Debug, Clone, Default)]
pub struct Messages {
    spans: Vec<MessageSpan>,
    with_keys: bool,
    /// The keys of the messages, back to back (only `with_keys`).
    keys: Vec<u8>,
    /// Where each message's key ends in `keys` (only `with_keys`).
    key_ends: Vec<usize>,
}

impl Messages {
    /// Messages without their keys.
    pub fn new() -> Messages {
        Messages::default()
    }

    /// Messages with their keys (one more `pread` per response, of the keys file).
    pub fn with_keys() -> Messages {
        Messages {
            with_keys: true,
            ..Messages::default()
        }
    }

    /// The messages, in log order.
    pub fn spans(&self) -> &[MessageSpan] {
        &self.spans
    }

    /// The key of message `i`; `None` without keys or past the last message.
    pub fn key(&self, i: usize) -> Option<&[u8]> {
        if !self.with_keys {
            return None;
        }
        let end = *self.key_ends.get(i)?;
        let start = i.checked_sub(1).map_or(0, |p| self.key_ends[p]);
        Some(&self.keys[start..end])
    }

    /// How many messages the response holds.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether the response holds no message.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    fn clear(&mut self) {
        self.spans.clear();
        self.keys.clear();
        self.key_ends.clear();
    }
}

/// Files of one chunk, opened for one read.
#[derive(Debug)]
struct ChunkFiles {
    seq: u64,
    gen: u16,
    /// Opened only when the response has a body.
    json: Option<Arc<File>>,
    /// Opened only when a read must look at the records.
    recs: Option<File>,
}

impl ChunkFiles {
    fn recs(&self) -> &File {
        self.recs
            .as_ref()
            .expect("records file opened for this read")
    }

    fn path(&self, dir: &Path, file: ChunkFile) -> PathBuf {
        chunk_path(dir, self.seq, self.gen, file)
    }
}

/// Where the committed data of the tail chunk ends.
#[derive(Debug, Clone, Copy)]
struct TailEnd {
    record_count: u64,
    commit: Record,
}

/// Where a response starts in its chunk: the first record after the requested offset, and the
/// JSON and key positions of that record's message.
#[derive(Debug, Clone, Copy, Default)]
struct Start {
    record: u64,
    json: u64,
    key: u64,
}

/// What a response covers in its chunk, found before its body is cut.
struct Found {
    files: ChunkFiles,
    start: Start,
    /// Records up to here belong to the response.
    end_record: u64,
    /// The response's JSON ends here, at a chunk's end or the last visible commit.
    json_end: u64,
    /// No message of the response is after this offset (the chunk's last, or the last commit's).
    last_offset: Option<LogOffset>,
    /// The answer, but for its body.
    result: ReadResult,
}

/// Reads one shape log. Needs only read access to the shape's directory, holds no lock, and
/// sees what the writer has committed and written (the writer writes at flush, just before it
/// syncs). Compaction and deletion never break a read: open files stay readable.
///
/// Between reads a reader holds no file descriptor, only the index entries it has read: keep
/// one per shape for as long as you like. A read opens the chunk files it needs; the body's
/// [`FileRange`] keeps the JSON file open until it is dropped.
#[derive(Debug)]
pub struct Reader {
    dir: PathBuf,
    entries: Vec<ChunkEntry>,
    /// Inode and length of the index file as last read; a new inode means compaction replaced it.
    index_seen: (u64, u64),
}

impl Reader {
    /// A reader of the shape stored in `dir` (checked by the caller to be a shape directory).
    pub(crate) fn new(dir: PathBuf) -> Self {
        Reader {
            dir,
            entries: Vec::new(),
            index_seen: (0, 0),
        }
    }

    /// The shape's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads from just after `from` (`None`: from the start): the chunk holding the first message
    /// after `from`, from that message to the chunk's end or the last visible commit.
    pub fn read(&mut self, from: Option<LogOffset>) -> Result<ReadResult> {
        self.read_with(from, None)
    }

    /// Reads like [`Reader::read`], and fills `messages` with the response's messages: each
    /// one's offset, operation and byte range within the body (and key, if `messages` was made
    /// [`Messages::with_keys`]), from the records the writer stored, without parsing the JSON.
    pub fn read_messages(
        &mut self,
        from: Option<LogOffset>,
        messages: &mut Messages,
    ) -> Result<ReadResult> {
        self.read_with(from, Some(messages))
    }

    /// Closed chunks currently listed in the index.
    pub fn closed_chunks(&mut self) -> Result<usize> {
        self.refresh_index(false)?;
        Ok(self.entries.len())
    }

    /// The last offset of chunk `seq` if that chunk is closed (listed in the index).
    pub fn closed_chunk_last(&mut self, seq: u64) -> Result<Option<LogOffset>> {
        self.refresh_index(false)?;
        Ok(usize::try_from(seq)
            .ok()
            .and_then(|i| self.entries.get(i))
            .map(|e| e.last))
    }

    /// Where the committed data visible now ends: the last committed offset (`None` when
    /// nothing is committed yet) and whether the initial snapshot was complete there. Costs a
    /// `stat` of the index and one read of the tail's last records.
    pub fn end(&mut self) -> Result<LogEnd> {
        self.refresh_index(false)?;
        let end = match self.tail_end()? {
            Some(end) => end,
            None => {
                // The tail moved on since the index was read: a chunk closed meanwhile.
                self.refresh_index(true)?;
                self.tail_end()?
                    .ok_or_else(|| corrupt(&self.dir, "tail chunk files missing"))?
            }
        };
        Ok(end)
    }

    /// [`Reader::end`] from the index as read; `None` if the tail chunk's files are gone.
    fn tail_end(&self) -> Result<Option<LogEnd>> {
        let seq = to_u64(self.entries.len());
        let Some(files) = self.open_chunk(seq, 0, false, true)? else {
            return Ok(None);
        };
        let end = match tail_end(files.recs(), &self.dir, seq)? {
            Some(end) => LogEnd {
                last_committed: Some(end.commit.offset),
                snapshot_complete: end.commit.flags & FLAG_SNAPSHOT_DONE != 0,
            },
            None => LogEnd {
                last_committed: self.entries.last().map(|e| e.last),
                snapshot_complete: self
                    .entries
                    .last()
                    .is_some_and(|e| e.flags & u16::from(FLAG_SNAPSHOT_DONE) != 0),
            },
        };
        Ok(Some(end))
    }

    fn read_with(
        &mut self,
        from: Option<LogOffset>,
        mut messages: Option<&mut Messages>,
    ) -> Result<ReadResult> {
        let want_records = messages.is_some();
        if let Some(messages) = messages.as_deref_mut() {
            messages.clear();
        }
        self.refresh_index(false)?;
        let found = match self.find(from, want_records)? {
            Some(found) => found,
            None => {
                // A chunk file vanished: compaction replaced it since we read the index.
                self.refresh_index(true)?;
                self.find(from, want_records)?
                    .ok_or_else(|| corrupt(&self.dir, "chunk files missing after index reload"))?
            }
        };
        if let Some(messages) = messages {
            self.fill(&found, from, messages)?;
        }
        let Found {
            files,
            start,
            json_end,
            mut result,
            ..
        } = found;
        assert!(
            start.json <= json_end,
            "response starts at {} past its end {json_end}",
            start.json
        );
        if start.json < json_end {
            result.body = Some(FileRange {
                file: files
                    .json
                    .expect("the JSON file of a response with a body is open"),
                start: start.json,
                len: json_end - start.json,
            });
        }
        Ok(result)
    }

    /// Locates the response to a read from `from`; `None` if a chunk file named by the index is
    /// gone.
    fn find(&self, from: Option<LogOffset>, want_records: bool) -> Result<Option<Found>> {
        let i = from.map_or(0, |f| self.entries.partition_point(|e| e.last <= f));
        match self.entries.get(i) {
            Some(&entry) => self.find_closed(to_u64(i), entry, from, want_records),
            None => self.find_tail(from),
        }
    }

    fn find_closed(
        &self,
        seq: u64,
        entry: ChunkEntry,
        from: Option<LogOffset>,
        want_records: bool,
    ) -> Result<Option<Found>> {
        // Reading on from the previous chunk's end starts at this chunk's first byte.
        let from = from.filter(|&f| f >= entry.first);
        let need_recs = from.is_some() || want_records;
        let Some(files) = self.open_chunk(seq, entry.gen, true, need_recs)? else {
            return Ok(None);
        };
        let start = find_start(&files, entry.record_count, from, &self.dir)?;
        // A response from a closed chunk ends exactly at the chunk's end, never past it.
        assert!(
            start.json <= entry.json_len && start.record <= entry.record_count,
            "response from chunk {seq} starts past the chunk's end"
        );
        Ok(Some(Found {
            files,
            start,
            end_record: entry.record_count,
            json_end: entry.json_len,
            last_offset: Some(entry.last),
            result: ReadResult {
                body: None,
                end_offset: Some(entry.last),
                chunk_closed: true,
                up_to_date: false,
                snapshot_complete: entry.flags & u16::from(FLAG_SNAPSHOT_DONE) != 0,
                chunk: seq,
            },
        }))
    }

    fn find_tail(&self, from: Option<LogOffset>) -> Result<Option<Found>> {
        let seq = to_u64(self.entries.len());
        // The JSON file is opened only once there is something to answer (a live read that finds
        // nothing new opens one file).
        let Some(mut files) = self.open_chunk(seq, 0, false, true)? else {
            return Ok(None);
        };
        let nothing = |files: ChunkFiles, snapshot_complete: bool| Found {
            files,
            start: Start::default(),
            end_record: 0,
            json_end: 0,
            last_offset: None,
            result: ReadResult {
                body: None,
                end_offset: from,
                chunk_closed: false,
                up_to_date: true,
                snapshot_complete,
                chunk: seq,
            },
        };
        let Some(end) = tail_end(files.recs(), &self.dir, seq)? else {
            let snapshot_complete = self
                .entries
                .last()
                .is_some_and(|e| e.flags & u16::from(FLAG_SNAPSHOT_DONE) != 0);
            return Ok(Some(nothing(files, snapshot_complete)));
        };
        let snapshot_complete = end.commit.flags & FLAG_SNAPSHOT_DONE != 0;
        if from.is_some_and(|f| f >= end.commit.offset) {
            return Ok(Some(nothing(files, snapshot_complete)));
        }
        let start = find_start(&files, end.record_count, from, &self.dir)?;
        let json_end = end.commit.json_end;
        let end_offset = if start.json < json_end {
            let Some(json) = self.open_file(seq, 0, ChunkFile::Json)? else {
                return Ok(None);
            };
            files.json = Some(Arc::new(json));
            Some(end.commit.offset)
        } else {
            from
        };
        Ok(Some(Found {
            files,
            start,
            end_record: end.record_count,
            json_end,
            last_offset: Some(end.commit.offset),
            result: ReadResult {
                body: None,
                end_offset,
                chunk_closed: false,
                up_to_date: true,
                snapshot_complete,
                chunk: seq,
            },
        }))
    }

    /// Fills `messages` from the records of a located response, checking that they tile its
    /// body exactly, in strictly increasing offsets after `from` and up to its end offset.
    fn fill(&self, found: &Found, from: Option<LogOffset>, messages: &mut Messages) -> Result<()> {
        let Found {
            files,
            start,
            end_record,
            json_end,
            last_offset,
            ..
        } = found;
        let path = files.path(&self.dir, ChunkFile::Recs);
        let mut block = Vec::new();
        let (mut json_pos, mut key_pos) = (start.json, start.key);
        let mut last = from;
        let mut at = start.record;
        while at < *end_record {
            let n = (*end_record - at).min(SCAN_RECORDS_MAX);
            block.resize(to_usize(n * RECORD_LEN), 0);
            files
                .recs()
                .read_exact_at(&mut block, at * RECORD_LEN)
                .map_err(io_err(&path))?;
            for buf in block.chunks_exact(RECORD_BYTES) {
                let rec =
                    Record::decode(buf).ok_or_else(|| corrupt(&path, "invalid record kind"))?;
                assert!(
                    json_pos <= rec.json_end && rec.json_end <= *json_end && key_pos <= rec.key_end,
                    "record {} in {} leaves the response's range",
                    rec.offset,
                    path.display()
                );
                let op = match rec.kind {
                    RecordKind::Commit => {
                        assert_eq!(rec.json_end, json_pos, "a commit record holds no JSON");
                        continue;
                    }
                    RecordKind::Message(op) => op,
                };
                assert!(
                    last.is_none_or(|l| rec.offset > l)
                        && last_offset.is_some_and(|e| rec.offset <= e),
                    "message {} out of order or past the response's end in {}",
                    rec.offset,
                    path.display()
                );
                messages.spans.push(MessageSpan {
                    offset: rec.offset,
                    op,
                    merged: rec.flags & FLAG_MERGED != 0,
                    start: json_pos - start.json,
                    end: rec.json_end - start.json,
                });
                if messages.with_keys {
                    messages.key_ends.push(to_usize(rec.key_end - start.key));
                }
                (json_pos, key_pos, last) = (rec.json_end, rec.key_end, Some(rec.offset));
            }
            at += n;
        }
        assert_eq!(
            json_pos,
            *json_end,
            "the messages of a response from {} tile its body",
            path.display()
        );
        if messages.with_keys && key_pos > start.key {
            let keys_path = files.path(&self.dir, ChunkFile::Keys);
            let keys = File::open(&keys_path).map_err(io_err(&keys_path))?;
            messages.keys.resize(to_usize(key_pos - start.key), 0);
            keys.read_exact_at(&mut messages.keys, start.key)
                .map_err(io_err(&keys_path))?;
        }
        Ok(())
    }

    /// Re-reads the index if it grew or was replaced (or always, when `force`).
    fn refresh_index(&mut self, force: bool) -> Result<()> {
        let path = self.dir.join(INDEX_FILE);
        let meta = fs::metadata(&path).map_err(io_err(&path))?;
        let (ino, len) = (meta.ino(), meta.len());
        if !force && (ino, len) == self.index_seen {
            return Ok(());
        }
        if force || ino != self.index_seen.0 || len < self.known_index_len() {
            self.entries.clear();
        }
        let file = File::open(&path).map_err(io_err(&path))?;
        let from = self.known_index_len();
        let whole = len.saturating_sub(from) / ENTRY_LEN * ENTRY_LEN;
        let mut bytes = vec![0u8; to_usize(whole)];
        let got = read_at_most(&file, &mut bytes, from).map_err(io_err(&path))?;
        let new = decode_entries(
            &bytes[..got - got % ENTRY_BYTES],
            self.entries.last().copied(),
        );
        self.entries.extend(new);
        // Bytes past the decoded entries (an entry or group being written) are read again next
        // time, even if the file does not grow meanwhile.
        self.index_seen = (ino, self.known_index_len());
        Ok(())
    }

    /// Bytes of the index the entries held came from.
    fn known_index_len(&self) -> u64 {
        to_u64(self.entries.len()) * ENTRY_LEN
    }

    /// Opens one file of a chunk; `None` if it does not exist.
    fn open_file(&self, seq: u64, gen: u16, file: ChunkFile) -> Result<Option<File>> {
        let path = chunk_path(&self.dir, seq, gen, file);
        match File::open(&path) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(&path)(e)),
        }
    }

    /// Opens the files of a chunk, the JSON file if `need_json` and the records file if
    /// `need_recs`; `None` if one of them does not exist.
    fn open_chunk(
        &self,
        seq: u64,
        gen: u16,
        need_json: bool,
        need_recs: bool,
    ) -> Result<Option<ChunkFiles>> {
        let mut files = ChunkFiles {
            seq,
            gen,
            json: None,
            recs: None,
        };
        if need_json {
            let Some(json) = self.open_file(seq, gen, ChunkFile::Json)? else {
                return Ok(None);
            };
            files.json = Some(Arc::new(json));
        }
        if need_recs {
            let Some(recs) = self.open_file(seq, gen, ChunkFile::Recs)? else {
                return Ok(None);
            };
            files.recs = Some(recs);
        }
        Ok(Some(files))
    }
}

/// Where the response starts among the first `count` records: just after the last record at or
/// before `from`.
fn find_start(
    files: &ChunkFiles,
    count: u64,
    from: Option<LogOffset>,
    dir: &Path,
) -> Result<Start> {
    let Some(from) = from else {
        return Ok(Start::default());
    };
    let path = files.path(dir, ChunkFile::Recs);
    let after = |i: u64, rec: &Record| Start {
        record: i + 1,
        json: rec.json_end,
        key: rec.key_end,
    };
    let (mut lo, mut hi, mut start) = (0u64, count, Start::default());
    let mut buf = [0u8; RECORD_BYTES];
    while hi - lo > SEARCH_RECORDS_MAX {
        let mid = lo + (hi - lo) / 2;
        files
            .recs()
            .read_exact_at(&mut buf, mid * RECORD_LEN)
            .map_err(io_err(&path))?;
        let rec = Record::decode(&buf).ok_or_else(|| corrupt(&path, "invalid record kind"))?;
        if rec.offset <= from {
            (lo, start) = (mid + 1, after(mid, &rec));
        } else {
            hi = mid;
        }
    }
    let mut block = vec![0u8; to_usize((hi - lo) * RECORD_LEN)];
    files
        .recs()
        .read_exact_at(&mut block, lo * RECORD_LEN)
        .map_err(io_err(&path))?;
    let mut prev = None;
    for (i, buf) in (lo..).zip(block.chunks_exact(RECORD_BYTES)) {
        let rec = Record::decode(buf).ok_or_else(|| corrupt(&path, "invalid record kind"))?;
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
        start = after(i, &rec);
    }
    Ok(start)
}

/// Finds the last intact commit record of the tail chunk, scanning back from its end.
fn tail_end(recs: &File, dir: &Path, seq: u64) -> Result<Option<TailEnd>> {
    let path = chunk_path(dir, seq, 0, ChunkFile::Recs);
    let len = recs.metadata().map_err(io_err(&path))?.len();
    let mut hi = len / RECORD_LEN;
    let mut block = Vec::new();
    while hi > 0 {
        let lo = hi.saturating_sub(SCAN_RECORDS_MAX);
        block.resize(to_usize((hi - lo) * RECORD_LEN), 0);
        let got = read_at_most(recs, &mut block, lo * RECORD_LEN).map_err(io_err(&path))?;
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
                    record_count: lo + to_u64(i) + 1,
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
        match file.read_at(&mut buf[got..], pos + to_u64(got)) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

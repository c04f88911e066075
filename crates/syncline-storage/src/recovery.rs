//! Opening a shape for writing: take the lock, then cut the log back to its last durable commit.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use syncline_core::LogOffset;

use crate::chunk::{JournalStart, OpenChunk, TailState};
use crate::error::{corrupt, io_err, Result};
use crate::format::{
    chunk_path, journal_path, parse_chunk_name, parse_journal_name, ChunkEntry, ChunkFile,
    ChunkLens, CloseRecord, FrameHeader, JournalHeader, Record, ShapeMeta, CLOSE_RECORD_BYTES,
    ENTRY_BYTES, FLAG_SNAPSHOT_DONE, FRAME_HEADER_BYTES, INDEX_FILE, INDEX_TMP_FILE,
    JOURNAL_ALLOCATE_BYTES, JOURNAL_HEADER_BYTES, META_BYTES, META_FILE, RECORD_BYTES,
};
use crate::index::decode_entries;
use crate::io::Io;
use crate::lazy_file::LazyFile;
use crate::num::{to_u64, to_usize};
use crate::options::WriterOptions;
use crate::shape_lock::lock_only;
use crate::writer::Writer;

/// What the scan of the tail chunk kept.
struct TailScan {
    lens: ChunkLens,
    first: Option<LogOffset>,
    /// The last kept record, always a commit when present.
    last_commit: Option<Record>,
    /// The offset of the last message the kept commits cover, if the tail holds any.
    last_message: Option<LogOffset>,
}

/// What a clean close left: its record, the journal it ends, and the tail's first record's
/// offset and last record (a commit).
struct Clean {
    record: CloseRecord,
    journal: File,
    header: JournalHeader,
    close_at: u64,
    first: Option<LogOffset>,
    last_commit: Option<Record>,
}

/// The writer's state once the tail is open: the tail, the last committed offset, and whether
/// the snapshot is complete.
type Opened = (OpenChunk, Option<LogOffset>, bool);

/// Opens the shape in `dir` for writing: resumes it as a clean close left it, or else recovers
/// it (see "Recovery" in the format doc), first running `before_recovery` (which writes into
/// the shape's journals the frames only the live group journal holds).
pub(crate) fn open_writer(
    dir: &Path,
    shape: &str,
    options: &WriterOptions,
    before_recovery: impl FnOnce() -> Result<()>,
) -> Result<Writer> {
    let io = Io::new(options.fault_plan.clone());
    let (lock, meta) = lock_shape(dir, shape)?;
    let (index, index_path) = open_index(dir)?;
    let bytes = fs::read(&index_path).map_err(io_err(&index_path))?;
    let indexed = decode_entries(&bytes, None);
    let clean = if bytes.len() == indexed.len() * ENTRY_BYTES {
        closed_cleanly(dir, to_u64(indexed.len()), indexed.last().map(|e| e.last))?
    } else {
        None
    };
    let opened = match clean {
        Some(clean) => reopen_clean(&io, dir, &indexed, clean, options.journal_bytes_max)?,
        None => {
            before_recovery()?;
            recover(&io, dir, &index, &indexed, options.journal_bytes_max)?
        }
    };
    Ok(writer(
        dir,
        io,
        (lock, meta),
        index,
        indexed,
        opened,
        options,
    ))
}

/// The writer of the shape `create_shape` just made in `dir`, from the files it created and
/// still holds: `lock` (its `shape.meta`, locked), the empty index, and the first chunk.
/// Nothing is opened or read again.
pub(crate) fn created(
    dir: &Path,
    io: Io,
    lock: (File, ShapeMeta),
    index: File,
    tail: OpenChunk,
    options: &WriterOptions,
) -> Writer {
    assert!(
        tail.seq == 0 && tail.first.is_none(),
        "a new shape's log starts with an empty first chunk"
    );
    writer(
        dir,
        io,
        lock,
        index,
        Vec::new(),
        (tail, None, false),
        options,
    )
}

/// The index file, open for reading and writing, and its path.
fn open_index(dir: &Path) -> Result<(File, PathBuf)> {
    let path = dir.join(INDEX_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(io_err(&path))?;
    Ok((file, path))
}

/// A writer resuming from `opened`.
fn writer(
    dir: &Path,
    io: Io,
    (lock, meta): (File, ShapeMeta),
    index: File,
    indexed: Vec<ChunkEntry>,
    (tail, last_committed, snapshot_done): Opened,
    options: &WriterOptions,
) -> Writer {
    Writer {
        dir: dir.to_path_buf(),
        io,
        lock: Some(lock),
        chunk_bytes_max: meta.chunk_bytes_max,
        write_buffer_bytes_max: options.write_buffer_bytes_max,
        journal_bytes_max: options.journal_bytes_max,
        index: LazyFile::opened(dir.join(INDEX_FILE), index),
        indexed,
        tail,
        closed_pending: Vec::new(),
        closed_committed: Vec::new(),
        last_appended: last_committed,
        last_committed,
        durable: last_committed,
        files_commit: last_committed,
        deferring: false,
        txn_open: false,
        snapshot_done,
        dir_dirty: false,
        closed_unsynced: None,
        created_unsynced: false,
        poisoned: false,
        parked_index: None,
        group: None,
    }
}

/// Recovery proper (steps 2 to 6 of "Recovery" in the format doc): cuts the index, the
/// chunks and the tail back to the last intact commit and starts a fresh journal.
fn recover(
    io: &Io,
    dir: &Path,
    index: &File,
    indexed: &[ChunkEntry],
    journal_bytes_max: usize,
) -> Result<Opened> {
    let index_path = dir.join(INDEX_FILE);
    let valid_len = to_u64(indexed.len() * ENTRY_BYTES);
    if file_len(index, &index_path)? != valid_len {
        io.truncate(index, &index_path, valid_len)?;
    }
    remove_unreferenced_files(io, dir, indexed)?;
    let seq = to_u64(indexed.len());
    let prev_last = indexed.last().map(|e| e.last);
    replay_journal(io, dir, seq)?;
    let scan = scan_tail(dir, seq, prev_last)?;
    cut_tail(io, dir, seq, scan.lens)?;
    let last_commit = scan.last_commit;
    let last_committed = scan.last_message.or(prev_last);
    let state = TailState {
        lens: scan.lens,
        first: scan.first,
        last_commit,
        last_message: last_committed,
    };
    let tail = OpenChunk::open(io, dir, seq, state, JournalStart::Fresh, journal_bytes_max)?;
    io.sync_dir(dir)?;
    let snapshot_done = match (last_commit, indexed.last()) {
        (Some(r), _) => r.flags & FLAG_SNAPSHOT_DONE != 0,
        (None, Some(e)) => e.flags & u16::from(FLAG_SNAPSHOT_DONE) != 0,
        (None, None) => false,
    };
    Ok((tail, last_committed, snapshot_done))
}

/// The tail as a clean close left it, if the journal of tail `seq` ends with a close record for
/// it (its size no multiple of [`JOURNAL_ALLOCATE_BYTES`]) and the tail's files still hold what
/// the record says: each at least its length, the records ending with a commit at the JSON and
/// key lengths and at the last committed offset; an empty tail's last committed offset is the
/// last indexed chunk's end (`indexed_last`), if any. `None` otherwise: recovery runs. Reads
/// only.
fn closed_cleanly(dir: &Path, seq: u64, indexed_last: Option<LogOffset>) -> Result<Option<Clean>> {
    let path = journal_path(dir, seq);
    let journal = match OpenOptions::new().read(true).write(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(&path)(e)),
    };
    let len = file_len(&journal, &path)?;
    let close_at = len.checked_sub(to_u64(CLOSE_RECORD_BYTES)).filter(|&at| {
        at >= to_u64(JOURNAL_HEADER_BYTES) && !len.is_multiple_of(JOURNAL_ALLOCATE_BYTES)
    });
    let Some(close_at) = close_at else {
        return Ok(None);
    };
    let mut buf = [0u8; CLOSE_RECORD_BYTES];
    journal
        .read_exact_at(&mut buf, close_at)
        .map_err(io_err(&path))?;
    let Some(record) = CloseRecord::decode(&buf).filter(|r| r.seq == seq) else {
        return Ok(None);
    };
    let mut head = [0u8; JOURNAL_HEADER_BYTES];
    journal.read_exact_at(&mut head, 0).map_err(io_err(&path))?;
    let Some(header) = JournalHeader::decode(&head) else {
        return Ok(None);
    };
    let lens = record.lens;
    for (file, want) in [
        (ChunkFile::Json, lens.json),
        (ChunkFile::Keys, lens.keys),
        (ChunkFile::Recs, lens.recs),
    ] {
        let p = chunk_path(dir, seq, 0, file);
        match fs::metadata(&p) {
            Ok(m) if m.len() >= want => {}
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&p)(e)),
        }
    }
    let record_len = to_u64(RECORD_BYTES);
    if lens.recs % record_len != 0 {
        return Ok(None);
    }
    if lens.recs == 0 {
        let empty = lens.json == 0 && lens.keys == 0 && record.last_committed == indexed_last;
        return Ok(empty.then_some(Clean {
            record,
            journal,
            header,
            close_at,
            first: None,
            last_commit: None,
        }));
    }
    let recs_path = chunk_path(dir, seq, 0, ChunkFile::Recs);
    let recs = File::open(&recs_path).map_err(io_err(&recs_path))?;
    let mut first = [0u8; RECORD_BYTES];
    recs.read_exact_at(&mut first, 0)
        .map_err(io_err(&recs_path))?;
    let mut last = [0u8; RECORD_BYTES];
    recs.read_exact_at(&mut last, lens.recs - record_len)
        .map_err(io_err(&recs_path))?;
    let first = Record::decode(&first).map(|r| r.offset);
    let last_commit = Record::decode(&last).filter(|r| {
        r.is_commit()
            && Record::checksum_matches(&last, &[], &[])
            && r.json_end == lens.json
            && r.key_end == lens.keys
            && r.offset == record.last_committed.unwrap_or(LogOffset::ZERO)
    });
    if first.is_none() || last_commit.is_none() {
        return Ok(None);
    }
    Ok(Some(Clean {
        record,
        journal,
        header,
        close_at,
        first,
        last_commit,
    }))
}

/// Resumes the tail a clean close left, without scanning it and, normally, without writing:
/// only what a later session left and never made durable is undone (files of chunks it
/// created, bytes it appended in place), as recovery would.
fn reopen_clean(
    io: &Io,
    dir: &Path,
    indexed: &[ChunkEntry],
    clean: Clean,
    journal_bytes_max: usize,
) -> Result<Opened> {
    remove_unreferenced_files(io, dir, indexed)?;
    let seq = to_u64(indexed.len());
    let record = clean.record;
    cut_tail(io, dir, seq, record.lens)?;
    let state = TailState {
        lens: record.lens,
        first: clean.first,
        last_commit: clean.last_commit,
        last_message: record.last_committed,
    };
    let journal = JournalStart::Resume {
        file: clean.journal,
        header: clean.header,
        close_at: clean.close_at,
    };
    let tail = OpenChunk::open(io, dir, seq, state, journal, journal_bytes_max)?;
    Ok((tail, record.last_committed, record.snapshot_done))
}

/// Reads the header and takes the shape's exclusive writer lock.
pub(crate) fn lock_shape(dir: &Path, shape: &str) -> Result<(File, ShapeMeta)> {
    let file = lock_only(dir, shape)?;
    let meta = read_meta(&dir.join(META_FILE))?;
    Ok((file, meta))
}

/// Reads and checks a shape header.
pub(crate) fn read_meta(path: &Path) -> Result<ShapeMeta> {
    let bytes = fs::read(path).map_err(io_err(path))?;
    if bytes.len() != META_BYTES {
        return Err(corrupt(
            path,
            format!("{} bytes, expected {META_BYTES}", bytes.len()),
        ));
    }
    ShapeMeta::decode(&bytes).map_err(|reason| corrupt(path, reason))
}

/// Removes chunk files no index entry or tail refers to: leftovers of a compaction or of chunks
/// closed by a transaction that never became durable.
fn remove_unreferenced_files(io: &Io, dir: &Path, indexed: &[ChunkEntry]) -> Result<()> {
    let tail_seq = to_u64(indexed.len());
    let mut removed = false;
    for dirent in fs::read_dir(dir).map_err(io_err(dir))? {
        let dirent = dirent.map_err(io_err(dir))?;
        let name = dirent.file_name().to_string_lossy().into_owned();
        let referenced = match (parse_chunk_name(&name), parse_journal_name(&name)) {
            (Some((seq, gen)), _) if seq < tail_seq => indexed[to_usize(seq)].gen == gen,
            (Some((seq, gen)), _) => seq == tail_seq && gen == 0,
            (None, Some(seq)) => seq == tail_seq,
            (None, None) => name != INDEX_TMP_FILE && !name.ends_with(".tmp"),
        };
        if !referenced {
            io.remove_file(&dirent.path())?;
            removed = true;
        }
    }
    for (seq, e) in indexed.iter().enumerate() {
        let path = chunk_path(dir, to_u64(seq), e.gen, ChunkFile::Recs);
        if !path.exists() {
            return Err(corrupt(path, "indexed chunk file is missing"));
        }
    }
    if removed {
        io.sync_dir(dir)?;
    }
    Ok(())
}

/// Rebuilds the tail chunk's files from its journal: the bytes below the journal's base are
/// durable in the files; every intact frame after it is written back; the files are cut to the
/// end of the last intact frame and synced.
fn replay_journal(io: &Io, dir: &Path, seq: u64) -> Result<()> {
    let path = journal_path(dir, seq);
    let bytes = fs::read(&path).map_err(io_err(&path))?;
    let base = bytes
        .get(..JOURNAL_HEADER_BYTES)
        .and_then(JournalHeader::decode)
        .map(|h| h.base)
        .ok_or_else(|| corrupt(&path, "missing or damaged journal header"))?;
    let open = |file| {
        let p = chunk_path(dir, seq, 0, file);
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .map(|f| (f, p.clone()))
            .map_err(io_err(&p))
    };
    let (json, keys, recs) = (
        open(ChunkFile::Json)?,
        open(ChunkFile::Keys)?,
        open(ChunkFile::Recs)?,
    );
    let mut pos = base;
    let mut at = JOURNAL_HEADER_BYTES;
    while let Some(header) = bytes
        .get(at..at + FRAME_HEADER_BYTES)
        .and_then(FrameHeader::decode)
    {
        // Lengths that overflow belong to a damaged header: the replay ends there.
        let total = header.payload_len().and_then(|n| usize::try_from(n).ok());
        let (Some(total), Some(end)) = (total, pos.checked_add(header.len)) else {
            break;
        };
        let payload_at = at + FRAME_HEADER_BYTES;
        let Some(payload) = payload_at
            .checked_add(total)
            .and_then(|payload_end| bytes.get(payload_at..payload_end))
        else {
            break;
        };
        let (r, k, j) = if header.records_in_place() {
            (&[][..], &[][..], payload)
        } else {
            let (r, rest) = payload.split_at(to_usize(header.len.recs));
            let (k, j) = rest.split_at(to_usize(header.len.keys));
            (r, k, j)
        };
        // Bytes kept in place must at least be there; record checksums verify them next.
        let reaches = |(file, path): &(File, PathBuf), end: u64| -> Result<bool> {
            Ok(file_len(file, path)? >= end)
        };
        let in_place_present = (!header.json_in_place() || reaches(&json, end.json)?)
            && (!header.records_in_place()
                || (reaches(&recs, end.recs)? && reaches(&keys, end.keys)?));
        if header.at != pos
            || !in_place_present
            || !FrameHeader::checksum_matches(&bytes[at..at + FRAME_HEADER_BYTES], r, k, j)
        {
            break;
        }
        io.write_at(&recs.0, &recs.1, pos.recs, r)?;
        io.write_at(&keys.0, &keys.1, pos.keys, k)?;
        io.write_at(&json.0, &json.1, pos.json, j)?;
        pos = end;
        at = payload_at + total;
    }
    for ((file, p), len) in [(&json, pos.json), (&keys, pos.keys), (&recs, pos.recs)] {
        io.truncate(file, p, len)?;
    }
    Ok(())
}

fn file_len(file: &File, path: &Path) -> Result<u64> {
    Ok(file.metadata().map_err(io_err(path))?.len())
}

/// Reads the tail chunk and finds the end of its last valid commit record.
fn scan_tail(dir: &Path, seq: u64, prev_last: Option<LogOffset>) -> Result<TailScan> {
    let read = |file| {
        let path = chunk_path(dir, seq, 0, file);
        fs::read(&path).map_err(io_err(&path))
    };
    let (json, keys, recs) = (
        read(ChunkFile::Json)?,
        read(ChunkFile::Keys)?,
        read(ChunkFile::Recs)?,
    );
    let mut scan = TailScan {
        lens: ChunkLens::default(),
        first: None,
        last_commit: None,
        last_message: None,
    };
    let (mut json_pos, mut key_pos) = (0u64, 0u64);
    let mut last_message = prev_last;
    let mut first = None;
    let mut first_message_seen = false;
    for (i, buf) in recs.chunks_exact(RECORD_BYTES).enumerate() {
        let Some(rec) = Record::decode(buf) else {
            break;
        };
        let in_bounds = json_pos <= rec.json_end
            && rec.json_end <= to_u64(json.len())
            && key_pos <= rec.key_end
            && rec.key_end <= to_u64(keys.len());
        if !in_bounds {
            break;
        }
        let json_bytes = &json[to_usize(json_pos)..to_usize(rec.json_end)];
        let key_bytes = &keys[to_usize(key_pos)..to_usize(rec.key_end)];
        if !Record::checksum_matches(buf, json_bytes, key_bytes) {
            break;
        }
        if rec.is_commit() {
            if rec.json_end != json_pos || rec.key_end != key_pos {
                break;
            }
            scan.lens = ChunkLens {
                json: rec.json_end,
                keys: rec.key_end,
                recs: to_u64((i + 1) * RECORD_BYTES),
            };
            scan.first = first;
            scan.last_commit = Some(rec);
            scan.last_message = last_message.filter(|_| first_message_seen);
        } else {
            if last_message.is_some_and(|l| rec.offset <= l) {
                break;
            }
            last_message = Some(rec.offset);
            first_message_seen = true;
        }
        first.get_or_insert(rec.offset);
        json_pos = rec.json_end;
        key_pos = rec.key_end;
    }
    Ok(scan)
}

/// Truncates the tail chunk's files to the kept lengths, syncing each one cut.
fn cut_tail(io: &Io, dir: &Path, seq: u64, lens: ChunkLens) -> Result<()> {
    for (file, len) in [
        (ChunkFile::Json, lens.json),
        (ChunkFile::Keys, lens.keys),
        (ChunkFile::Recs, lens.recs),
    ] {
        let path = chunk_path(dir, seq, 0, file);
        let f = OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(io_err(&path))?;
        let actual = f.metadata().map_err(io_err(&path))?.len();
        if actual != len {
            io.truncate(&f, &path, len)?;
        }
    }
    Ok(())
}

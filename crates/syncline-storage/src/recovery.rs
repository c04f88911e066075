//! Opening a shape for writing: take the lock, then cut the log back to its last durable commit.

use std::fs::{self, File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use syncline_core::LogOffset;

use crate::chunk::OpenChunk;
use crate::error::{corrupt, io_err, Result, StorageError};
use crate::format::{
    chunk_path, decode_journal_header, journal_path, parse_chunk_name, parse_journal_name,
    ChunkEntry, ChunkFile, ChunkLens, FrameHeader, Record, ShapeMeta, ENTRY_BYTES,
    FLAG_SNAPSHOT_DONE, FRAME_HEADER_BYTES, INDEX_FILE, INDEX_TMP_FILE, JOURNAL_HEADER_BYTES,
    META_BYTES, META_FILE, RECORD_BYTES,
};
use crate::index::decode_entries;
use crate::io::Io;
use crate::writer::Writer;
use crate::WriterOptions;

/// What the scan of the tail chunk kept.
struct TailScan {
    lens: ChunkLens,
    first: Option<LogOffset>,
    /// The last kept record, always a commit when present.
    last_commit: Option<Record>,
    /// The offset of the last message the kept commits cover, if the tail holds any.
    last_message: Option<LogOffset>,
}

/// Opens the shape in `dir` for writing and recovers it (see "Recovery" in the format doc).
pub(crate) fn open_writer(dir: &Path, shape: &str, options: &WriterOptions) -> Result<Writer> {
    let io = Io::new(options.fault_plan.clone());
    let (lock, meta) = lock_shape(dir, shape)?;
    let index_path = dir.join(INDEX_FILE);
    let index = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&index_path)
        .map_err(io_err(&index_path))?;
    let bytes = fs::read(&index_path).map_err(io_err(&index_path))?;
    let indexed = decode_entries(&bytes, None);
    let valid_len = (indexed.len() * ENTRY_BYTES) as u64;
    if bytes.len() as u64 != valid_len {
        io.truncate(&index, &index_path, valid_len)?;
    }
    remove_unreferenced_files(&io, dir, &indexed)?;
    let seq = indexed.len() as u64;
    let prev_last = indexed.last().map(|e| e.last);
    replay_journal(&io, dir, seq)?;
    let scan = scan_tail(dir, seq, prev_last)?;
    cut_tail(&io, dir, seq, scan.lens)?;
    let last = scan.last_commit.map(|r| (r, true));
    let tail = OpenChunk::open(
        &io,
        dir,
        seq,
        scan.lens,
        scan.first,
        last,
        options.journal_bytes_max,
    )?;
    io.sync_dir(dir)?;
    let scan = Some(scan);
    let last_commit = scan.as_ref().and_then(|s| s.last_commit);
    let last_committed = scan.and_then(|s| s.last_message).or(prev_last);
    let snapshot_done = match (last_commit, indexed.last()) {
        (Some(r), _) => r.flags & FLAG_SNAPSHOT_DONE != 0,
        (None, Some(e)) => e.flags & u16::from(FLAG_SNAPSHOT_DONE) != 0,
        (None, None) => false,
    };
    Ok(Writer {
        dir: dir.to_path_buf(),
        io,
        _lock: lock,
        chunk_bytes_max: meta.chunk_bytes_max,
        write_buffer_bytes_max: options.write_buffer_bytes_max,
        journal_bytes_max: options.journal_bytes_max,
        index,
        indexed,
        tail,
        closed_pending: Vec::new(),
        closed_committed: Vec::new(),
        last_appended: last_committed,
        last_committed,
        durable: last_committed,
        txn_open: false,
        snapshot_done,
        dir_dirty: false,
        poisoned: false,
    })
}

/// Reads the header and takes the shape's exclusive writer lock.
pub(crate) fn lock_shape(dir: &Path, shape: &str) -> Result<(File, ShapeMeta)> {
    let path = dir.join(META_FILE);
    let file = match OpenOptions::new().read(true).write(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StorageError::ShapeNotFound(shape.into()))
        }
        Err(e) => return Err(io_err(&path)(e)),
    };
    // SAFETY: flock on a file descriptor we own; no memory is involved.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Err(StorageError::WriterBusy(shape.into()));
        }
        return Err(io_err(&path)(err));
    }
    let meta = read_meta(&path)?;
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
    let tail_seq = indexed.len() as u64;
    let mut removed = false;
    for dirent in fs::read_dir(dir).map_err(io_err(dir))? {
        let dirent = dirent.map_err(io_err(dir))?;
        let name = dirent.file_name().to_string_lossy().into_owned();
        let referenced = match (parse_chunk_name(&name), parse_journal_name(&name)) {
            (Some((seq, gen)), _) if seq < tail_seq => indexed[seq as usize].gen == gen,
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
        let path = chunk_path(dir, seq as u64, e.gen, ChunkFile::Recs);
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
        .and_then(decode_journal_header)
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
        let total = header.payload_len() as usize;
        let Some(payload) = bytes.get(at + FRAME_HEADER_BYTES..at + FRAME_HEADER_BYTES + total)
        else {
            break;
        };
        let (r, k, j) = if header.records_in_place() {
            (&[][..], &[][..], payload)
        } else {
            let (r, rest) = payload.split_at(header.len.recs as usize);
            let (k, j) = rest.split_at(header.len.keys as usize);
            (r, k, j)
        };
        // Bytes kept in place must at least be there; record checksums verify them next.
        let reaches = |(file, path): &(File, PathBuf), end: u64| -> Result<bool> {
            Ok(file_len(file, path)? >= end)
        };
        let in_place_present = (!header.json_in_place()
            || reaches(&json, pos.json + header.len.json)?)
            && (!header.records_in_place()
                || (reaches(&recs, pos.recs + header.len.recs)?
                    && reaches(&keys, pos.keys + header.len.keys)?));
        if header.at != pos
            || !in_place_present
            || !FrameHeader::checksum_matches(&bytes[at..at + FRAME_HEADER_BYTES], r, k, j)
        {
            break;
        }
        io.write_at(&recs.0, &recs.1, pos.recs, r)?;
        io.write_at(&keys.0, &keys.1, pos.keys, k)?;
        io.write_at(&json.0, &json.1, pos.json, j)?;
        pos = ChunkLens {
            json: pos.json + header.len.json,
            keys: pos.keys + header.len.keys,
            recs: pos.recs + header.len.recs,
        };
        at += FRAME_HEADER_BYTES + total;
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
            && rec.json_end <= json.len() as u64
            && key_pos <= rec.key_end
            && rec.key_end <= keys.len() as u64;
        if !in_bounds {
            break;
        }
        let json_bytes = &json[json_pos as usize..rec.json_end as usize];
        let key_bytes = &keys[key_pos as usize..rec.key_end as usize];
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
                recs: ((i + 1) * RECORD_BYTES) as u64,
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

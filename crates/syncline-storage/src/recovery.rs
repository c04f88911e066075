//! Opening a shape for writing: take the lock, then cut the log back to its last durable commit.

use std::fs::{self, File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::Path;

use syncline_core::LogOffset;

use crate::chunk::{ChunkLens, OpenChunk};
use crate::error::{corrupt, io_err, Result, StorageError};
use crate::format::{
    chunk_path, parse_chunk_name, ChunkEntry, ChunkFile, Record, ShapeMeta, ENTRY_BYTES,
    FLAG_SNAPSHOT_DONE, INDEX_FILE, INDEX_TMP_FILE, META_BYTES, META_FILE, RECORD_BYTES,
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
    let (tail, scan) = if chunk_path(dir, seq, 0, ChunkFile::Recs).exists() {
        let scan = scan_tail(dir, seq, prev_last)?;
        cut_tail(&io, dir, seq, scan.lens)?;
        let last = scan.last_commit.map(|r| (r, true));
        (
            OpenChunk::open(dir, seq, scan.lens, scan.first, last)?,
            Some(scan),
        )
    } else {
        let tail = OpenChunk::create(&io, dir, seq)?;
        io.sync_dir(dir)?;
        (tail, None)
    };
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
        let referenced = match parse_chunk_name(&name) {
            Some((seq, gen)) if seq < tail_seq => indexed[seq as usize].gen == gen,
            Some((seq, gen)) => seq == tail_seq && gen == 0,
            None => name != INDEX_TMP_FILE,
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

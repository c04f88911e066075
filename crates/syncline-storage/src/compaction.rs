//! Compaction: merging successive updates of one key in the older closed chunks.
//!
//! Between an insert and the next delete of a key, a run of two or more updates becomes one
//! update at the position of the run's last one, its JSON the caller's merge of the run. Inserts
//! and deletes are never merged or moved, so every offset keeps its meaning: a reader at any old
//! offset gets the same final state. Rewritten chunks keep their offset range and index slot and
//! get new files (the next generation), swapped in through an atomically renamed index.

use std::collections::HashMap;
use std::fs::{self, File};
use std::os::unix::fs::FileExt;

use crate::error::{corrupt, io_err, Result};
use crate::format::{
    chunk_path, ChunkEntry, ChunkFile, Record, RecordKind, ENTRY_BYTES, FLAG_MERGED, INDEX_FILE,
    INDEX_TMP_FILE, RECORD_BYTES,
};
use crate::lazy_file::LazyFile;
use crate::message::Operation;
use crate::num::{to_u64, to_usize};
use crate::writer::Writer;

/// Closed chunks at the end of the log that compaction leaves untouched by default.
pub const COMPACTION_KEEP_CHUNKS_DEFAULT: usize = 2;

/// Merges two update messages, `(older, newer)`, into the JSON of one equivalent update.
pub type MergeFn<'a> = dyn FnMut(&[u8], &[u8]) -> Vec<u8> + 'a;

/// What one compaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactionStats {
    /// Chunks rewritten with new files.
    pub chunks_rewritten: usize,
    /// Update messages removed because a later update of the same run carries them.
    pub messages_removed: usize,
    /// JSON bytes of the rewritten chunks before compaction.
    pub json_bytes_before: u64,
    /// JSON bytes of the rewritten chunks after compaction.
    pub json_bytes_after: u64,
}

/// One message of the compacted region.
struct Msg {
    seq: usize,
    record: Record,
    json_start: u64,
    key: Vec<u8>,
    /// Merged JSON replacing the original bytes; `None` keeps them.
    merged: Option<Vec<u8>>,
    removed: bool,
}

impl Msg {
    fn op(&self) -> Operation {
        match self.record.kind {
            RecordKind::Message(op) => op,
            RecordKind::Commit => unreachable!("commit records are not loaded as messages"),
        }
    }
}

impl Writer {
    /// Compacts every closed, indexed chunk but the newest `keep_chunks` ones (the open tail is
    /// never touched). `merge(older, newer)` returns the JSON of one update equivalent to
    /// applying `older` then `newer`; it is called once per additional update of a run.
    ///
    /// The region's records and keys are held in memory while compacting.
    pub fn compact(
        &mut self,
        keep_chunks: usize,
        merge: &mut MergeFn<'_>,
    ) -> Result<CompactionStats> {
        self.guarded(|w| {
            let region = w.indexed.len().saturating_sub(keep_chunks);
            let files = (0..region)
                .map(|seq| w.open_json(seq))
                .collect::<Result<Vec<_>>>()?;
            let mut msgs = Vec::new();
            for seq in 0..region {
                w.load_chunk(seq, &mut msgs)?;
            }
            let removed = plan_merges(&mut msgs, &files, merge).map_err(io_err(&w.dir))?;
            let mut stats = CompactionStats {
                messages_removed: removed,
                ..CompactionStats::default()
            };
            let mut rewritten = Vec::new();
            for chunk in msgs.chunk_by(|a, b| a.seq == b.seq) {
                if chunk.iter().all(|m| !m.removed && m.merged.is_none()) {
                    continue;
                }
                let seq = chunk[0].seq;
                let old = w.indexed[seq];
                let new = w.rewrite_chunk(seq, old, chunk, &files[seq])?;
                stats.json_bytes_before += old.json_len;
                stats.json_bytes_after += new.json_len;
                rewritten.push((seq, old, new));
            }
            stats.chunks_rewritten = rewritten.len();
            if !rewritten.is_empty() {
                w.swap_index(&rewritten)?;
            }
            Ok(stats)
        })
    }

    fn open_json(&self, seq: usize) -> Result<File> {
        let path = chunk_path(
            &self.dir,
            to_u64(seq),
            self.indexed[seq].gen,
            ChunkFile::Json,
        );
        File::open(&path).map_err(io_err(&path))
    }

    /// Appends the messages of closed chunk `seq` (commit records are dropped).
    fn load_chunk(&self, seq: usize, msgs: &mut Vec<Msg>) -> Result<()> {
        let entry = self.indexed[seq];
        let read = |file| {
            let path = chunk_path(&self.dir, to_u64(seq), entry.gen, file);
            fs::read(&path).map_err(io_err(&path))
        };
        let (recs, keys) = (read(ChunkFile::Recs)?, read(ChunkFile::Keys)?);
        let recs_path = || chunk_path(&self.dir, to_u64(seq), entry.gen, ChunkFile::Recs);
        if to_u64(recs.len()) != entry.record_count * to_u64(RECORD_BYTES)
            || to_u64(keys.len()) != entry.keys_len
        {
            return Err(corrupt(
                recs_path(),
                "chunk files do not match their index entry",
            ));
        }
        let (mut json_pos, mut key_pos) = (0u64, 0usize);
        for buf in recs.chunks_exact(RECORD_BYTES) {
            let record =
                Record::decode(buf).ok_or_else(|| corrupt(recs_path(), "invalid record kind"))?;
            let key_end = to_usize(record.key_end);
            if record.json_end < json_pos || key_end < key_pos || key_end > keys.len() {
                return Err(corrupt(
                    recs_path(),
                    "record positions go backwards or past the end",
                ));
            }
            if !record.is_commit() {
                let key = keys[key_pos..key_end].to_vec();
                msgs.push(Msg {
                    seq,
                    record,
                    json_start: json_pos,
                    key,
                    merged: None,
                    removed: false,
                });
            }
            (json_pos, key_pos) = (record.json_end, key_end);
        }
        Ok(())
    }

    /// Writes the next generation of a chunk with `msgs` and syncs its files.
    fn rewrite_chunk(
        &self,
        seq: usize,
        old: ChunkEntry,
        msgs: &[Msg],
        json_file: &File,
    ) -> Result<ChunkEntry> {
        let gen = old
            .gen
            .checked_add(1)
            .expect("fewer than 65536 compactions of one chunk");
        let (mut json, mut keys, mut recs) = (Vec::new(), Vec::new(), Vec::new());
        for m in msgs.iter().filter(|m| !m.removed) {
            let bytes = match &m.merged {
                Some(merged) => merged.clone(),
                None => read_json(json_file, m).map_err(io_err(&self.dir))?,
            };
            json.extend_from_slice(&bytes);
            keys.extend_from_slice(&m.key);
            let flags = m.record.flags | if m.merged.is_some() { FLAG_MERGED } else { 0 };
            let record = Record {
                json_end: to_u64(json.len()),
                key_end: to_u64(keys.len()),
                flags,
                ..m.record
            };
            recs.extend_from_slice(&record.encode(&bytes, &m.key));
        }
        for (file, bytes) in [
            (ChunkFile::Json, &json),
            (ChunkFile::Keys, &keys),
            (ChunkFile::Recs, &recs),
        ] {
            let path = chunk_path(&self.dir, to_u64(seq), gen, file);
            let f = self.io.create(&path)?;
            self.io.write_at(&f, &path, 0, bytes)?;
            self.io.sync_data(&f, &path)?;
        }
        Ok(ChunkEntry {
            json_len: to_u64(json.len()),
            record_count: to_u64(recs.len() / RECORD_BYTES),
            keys_len: to_u64(keys.len()),
            gen,
            ..old
        })
    }

    /// Makes the rewritten chunks current: new index renamed over the old, then old files removed.
    fn swap_index(&mut self, rewritten: &[(usize, ChunkEntry, ChunkEntry)]) -> Result<()> {
        self.io.sync_dir(&self.dir)?;
        let mut entries = self.indexed.clone();
        for &(seq, _, new) in rewritten {
            entries[seq] = new;
        }
        let bytes: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
        assert_eq!(bytes.len(), entries.len() * ENTRY_BYTES);
        let (tmp, path) = (self.dir.join(INDEX_TMP_FILE), self.dir.join(INDEX_FILE));
        let f = self.io.create(&tmp)?;
        self.io.write_at(&f, &tmp, 0, &bytes)?;
        self.io.sync_data(&f, &tmp)?;
        self.io.rename(&tmp, &path)?;
        self.io.sync_dir(&self.dir)?;
        self.index = LazyFile::new(path);
        self.indexed = entries;
        for &(seq, old, _) in rewritten {
            for file in ChunkFile::ALL {
                self.io
                    .remove_file(&chunk_path(&self.dir, to_u64(seq), old.gen, file))?;
            }
        }
        self.io.sync_dir(&self.dir)
    }
}

fn read_json(file: &File, m: &Msg) -> std::io::Result<Vec<u8>> {
    let len = to_usize(m.record.json_end - m.json_start);
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, m.json_start)?;
    Ok(buf)
}

/// Finds runs of updates per key and marks them merged into their last update; returns how
/// many messages were removed.
fn plan_merges(
    msgs: &mut [Msg],
    files: &[File],
    merge: &mut MergeFn<'_>,
) -> std::io::Result<usize> {
    let mut runs: Vec<Vec<usize>> = Vec::new();
    let mut open: HashMap<&[u8], Vec<usize>> = HashMap::new();
    for (i, m) in msgs.iter().enumerate() {
        match m.op() {
            Operation::Update => open.entry(&m.key).or_default().push(i),
            Operation::Insert | Operation::Delete => runs.extend(open.remove(m.key.as_slice())),
        }
    }
    runs.extend(open.into_values());
    let mut removed = 0;
    for run in runs.into_iter().filter(|r| r.len() >= 2) {
        let mut acc = read_json(&files[msgs[run[0]].seq], &msgs[run[0]])?;
        for &i in &run[1..] {
            let next = read_json(&files[msgs[i].seq], &msgs[i])?;
            acc = merge(&acc, &next);
        }
        for &i in &run[..run.len() - 1] {
            msgs[i].removed = true;
        }
        removed += run.len() - 1;
        msgs[*run.last().unwrap()].merged = Some(acc);
    }
    Ok(removed)
}

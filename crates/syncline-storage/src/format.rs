//! The on-disk encoding: fixed-width records, chunk index entries, the shape header, file names.
//!
//! `docs/storage-format.md` is the specification; this module is its only encoder and decoder.
//! All integers are little-endian.

use std::path::{Path, PathBuf};

use syncline_core::LogOffset;

use crate::message::Operation;

/// Bytes of one record in a chunk's `.recs` file.
pub const RECORD_BYTES: usize = 40;
/// Bytes of one entry in a shape's `index` file.
pub const ENTRY_BYTES: usize = 64;
/// Bytes of a shape's `shape.meta` header.
pub const META_BYTES: usize = 64;
/// First eight bytes of `shape.meta`.
pub const META_MAGIC: [u8; 8] = *b"SYNCLSHP";
/// Version of the layout described in `docs/storage-format.md`.
pub const FORMAT_VERSION: u32 = 1;

/// Name of the shape header file (also the writer's lock file).
pub const META_FILE: &str = "shape.meta";
/// Name of the sparse chunk index file.
pub const INDEX_FILE: &str = "index";
/// Name compaction writes the next index to before renaming it over [`INDEX_FILE`].
pub const INDEX_TMP_FILE: &str = "index.tmp";

/// Bytes of the header at the start of a tail chunk's journal.
pub const JOURNAL_HEADER_BYTES: usize = 64;
/// Bytes of the header of each journal frame.
pub const FRAME_HEADER_BYTES: usize = 64;
/// Frame flag: the frame's JSON bytes are not in the journal; they are synced in place in the
/// chunk's `.json` file by the flush that syncs the frame.
pub const FRAME_JSON_IN_PLACE: u32 = 1;
/// Frame flag: the frame's records and keys are not in the journal; they are synced in place in
/// the chunk's `.recs` and `.keys` files by the flush that syncs the frame.
pub const FRAME_RECORDS_IN_PLACE: u32 = 2;
/// Version of the journal layout: 2 added [`FRAME_RECORDS_IN_PLACE`]. Version 1 journals (which
/// never set it) are still replayed; older code refuses version 2 rather than misread it.
pub const JOURNAL_VERSION: u32 = 2;
/// First eight bytes of a journal.
pub const JOURNAL_MAGIC: [u8; 8] = *b"SYNCLJNL";
/// First four bytes of a journal frame.
pub const FRAME_MAGIC: [u8; 4] = *b"SJFR";
/// A journal's size is a multiple of this, extended ahead of its frames (sparse: it costs no
/// disk space), except just after a clean close, which cuts it to end with its close record.
pub const JOURNAL_ALLOCATE_BYTES: u64 = 1024 * 1024;

/// Record flag: this update was produced by merging several updates (compaction).
pub const FLAG_MERGED: u8 = 1;
/// Record and entry flag: the initial snapshot is complete at this point of the log.
pub const FLAG_SNAPSHOT_DONE: u8 = 2;
/// Entry flag: appended together with the next entry in one write; the entry counts only once
/// that one is intact too (a torn write never lists part of a transaction's chunks).
pub const ENTRY_CONTINUED: u16 = 1;

/// What a record stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// A message with this operation.
    Message(Operation),
    /// The end of a transaction: everything before it is committed.
    Commit,
}

impl RecordKind {
    fn to_byte(self) -> u8 {
        match self {
            RecordKind::Message(Operation::Insert) => 1,
            RecordKind::Message(Operation::Update) => 2,
            RecordKind::Message(Operation::Delete) => 3,
            RecordKind::Commit => 4,
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            1 => RecordKind::Message(Operation::Insert),
            2 => RecordKind::Message(Operation::Update),
            3 => RecordKind::Message(Operation::Delete),
            4 => RecordKind::Commit,
            _ => return None,
        })
    }
}

/// One fixed-width record of a `.recs` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// The message's offset; for a commit, the offset of the transaction's last message.
    pub offset: LogOffset,
    /// Position in the chunk's `.json` file just after this message's bytes.
    pub json_end: u64,
    /// Position in the chunk's `.keys` file just after this message's key.
    pub key_end: u64,
    /// Message or commit.
    pub kind: RecordKind,
    /// `FLAG_*` bits.
    pub flags: u8,
}

impl Record {
    /// Encodes the record; its checksum covers the header, `json` and `key` (empty for commits).
    pub fn encode(&self, json: &[u8], key: &[u8]) -> [u8; RECORD_BYTES] {
        let mut buf = [0u8; RECORD_BYTES];
        buf[0..8].copy_from_slice(&self.offset.tx.to_le_bytes());
        buf[8..16].copy_from_slice(&self.offset.op.to_le_bytes());
        buf[16..24].copy_from_slice(&self.json_end.to_le_bytes());
        buf[24..32].copy_from_slice(&self.key_end.to_le_bytes());
        buf[32] = self.kind.to_byte();
        buf[33] = self.flags;
        let crc = record_crc(&buf, json, key);
        buf[36..40].copy_from_slice(&crc.to_le_bytes());
        buf
    }

    /// Decodes a record without checking its checksum; `None` if the kind byte is invalid.
    pub fn decode(buf: &[u8]) -> Option<Record> {
        assert_eq!(buf.len(), RECORD_BYTES);
        Some(Record {
            offset: LogOffset::new(u64_at(buf, 0), u64_at(buf, 8)),
            json_end: u64_at(buf, 16),
            key_end: u64_at(buf, 24),
            kind: RecordKind::from_byte(buf[32])?,
            flags: buf[33],
        })
    }

    /// Whether the encoded record's checksum matches its header, `json` and `key`.
    pub fn checksum_matches(buf: &[u8], json: &[u8], key: &[u8]) -> bool {
        record_crc(buf, json, key) == u32::from_le_bytes(buf[36..40].try_into().unwrap())
    }

    /// Whether this record is a commit.
    pub fn is_commit(&self) -> bool {
        self.kind == RecordKind::Commit
    }
}

fn record_crc(buf: &[u8], json: &[u8], key: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&buf[0..36]);
    h.update(json);
    h.update(key);
    h.finalize()
}

/// One fixed-width entry of the sparse `index`: a closed, committed, immutable chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkEntry {
    /// Offset of the chunk's first message when it was written.
    pub first: LogOffset,
    /// Offset of the chunk's last message when it was written; reads of it end here.
    pub last: LogOffset,
    /// Bytes in the chunk's `.json` file.
    pub json_len: u64,
    /// Records in the chunk's `.recs` file.
    pub record_count: u64,
    /// Bytes in the chunk's `.keys` file.
    pub keys_len: u64,
    /// Rewrite generation: 0 as appended, +1 per compaction; part of the file names.
    pub gen: u16,
    /// `FLAG_SNAPSHOT_DONE` if the snapshot was complete at the chunk's end; `ENTRY_CONTINUED`
    /// on every entry but the last of a group appended at once.
    pub flags: u16,
}

impl ChunkEntry {
    /// Encodes the entry with its checksum.
    pub fn encode(&self) -> [u8; ENTRY_BYTES] {
        let mut buf = [0u8; ENTRY_BYTES];
        buf[0..8].copy_from_slice(&self.first.tx.to_le_bytes());
        buf[8..16].copy_from_slice(&self.first.op.to_le_bytes());
        buf[16..24].copy_from_slice(&self.last.tx.to_le_bytes());
        buf[24..32].copy_from_slice(&self.last.op.to_le_bytes());
        buf[32..40].copy_from_slice(&self.json_len.to_le_bytes());
        buf[40..48].copy_from_slice(&self.record_count.to_le_bytes());
        buf[48..56].copy_from_slice(&self.keys_len.to_le_bytes());
        buf[56..58].copy_from_slice(&self.gen.to_le_bytes());
        buf[58..60].copy_from_slice(&self.flags.to_le_bytes());
        let crc = crc32fast::hash(&buf[0..60]);
        buf[60..64].copy_from_slice(&crc.to_le_bytes());
        buf
    }

    /// Decodes an entry; `None` if its checksum does not match or its offsets are reversed.
    pub fn decode(buf: &[u8]) -> Option<ChunkEntry> {
        assert_eq!(buf.len(), ENTRY_BYTES);
        if crc32fast::hash(&buf[0..60]) != u32::from_le_bytes(buf[60..64].try_into().unwrap()) {
            return None;
        }
        let entry = ChunkEntry {
            first: LogOffset::new(u64_at(buf, 0), u64_at(buf, 8)),
            last: LogOffset::new(u64_at(buf, 16), u64_at(buf, 24)),
            json_len: u64_at(buf, 32),
            record_count: u64_at(buf, 40),
            keys_len: u64_at(buf, 48),
            gen: u16::from_le_bytes(buf[56..58].try_into().unwrap()),
            flags: u16::from_le_bytes(buf[58..60].try_into().unwrap()),
        };
        (entry.first <= entry.last).then_some(entry)
    }
}

/// The shape header: format version and the chunk threshold the shape was created with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShapeMeta {
    /// Chunks close once their JSON reaches this many bytes.
    pub chunk_bytes_max: u64,
}

impl ShapeMeta {
    /// Encodes the header with magic, version and checksum.
    pub fn encode(&self) -> [u8; META_BYTES] {
        let mut buf = [0u8; META_BYTES];
        buf[0..8].copy_from_slice(&META_MAGIC);
        buf[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        buf[16..24].copy_from_slice(&self.chunk_bytes_max.to_le_bytes());
        let crc = crc32fast::hash(&buf[0..60]);
        buf[60..64].copy_from_slice(&crc.to_le_bytes());
        buf
    }

    /// Decodes a header, or says what is wrong with it.
    pub fn decode(buf: &[u8]) -> Result<ShapeMeta, String> {
        if buf.len() != META_BYTES {
            return Err(format!(
                "header is {} bytes, expected {META_BYTES}",
                buf.len()
            ));
        }
        if buf[0..8] != META_MAGIC {
            return Err("bad magic".into());
        }
        if crc32fast::hash(&buf[0..60]) != u32::from_le_bytes(buf[60..64].try_into().unwrap()) {
            return Err("header checksum mismatch".into());
        }
        let version = u32::from_le_bytes(buf[8..12].try_into().unwrap());
        if version != FORMAT_VERSION {
            return Err(format!(
                "format version {version}, expected {FORMAT_VERSION}"
            ));
        }
        let chunk_bytes_max = u64_at(buf, 16);
        if chunk_bytes_max == 0 {
            return Err("chunk_bytes_max is 0".into());
        }
        Ok(ShapeMeta { chunk_bytes_max })
    }
}

/// Lengths of the three files of a chunk, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkLens {
    /// Bytes of `.json`.
    pub json: u64,
    /// Bytes of `.keys`.
    pub keys: u64,
    /// Bytes of `.recs`.
    pub recs: u64,
}

impl ChunkLens {
    /// The lengths after `more` bytes of each file; `None` if one overflows.
    pub fn checked_add(self, more: ChunkLens) -> Option<ChunkLens> {
        Some(ChunkLens {
            json: self.json.checked_add(more.json)?,
            keys: self.keys.checked_add(more.keys)?,
            recs: self.recs.checked_add(more.recs)?,
        })
    }
}

/// A journal's header: the chunk lengths that were durable when it started, and its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalHeader {
    /// Bytes of the chunk files durable when the journal started.
    pub base: ChunkLens,
    /// Random, new for every journal started: the group journal's entries name the journal
    /// they belong to by path and id, so a later journal at the same path never takes them
    /// (0 in journals written before ids existed).
    pub id: u64,
}

impl JournalHeader {
    /// Encodes the header.
    pub fn encode(&self) -> [u8; JOURNAL_HEADER_BYTES] {
        let mut buf = [0u8; JOURNAL_HEADER_BYTES];
        buf[0..8].copy_from_slice(&JOURNAL_MAGIC);
        buf[8..12].copy_from_slice(&JOURNAL_VERSION.to_le_bytes());
        buf[16..24].copy_from_slice(&self.base.json.to_le_bytes());
        buf[24..32].copy_from_slice(&self.base.keys.to_le_bytes());
        buf[32..40].copy_from_slice(&self.base.recs.to_le_bytes());
        buf[40..48].copy_from_slice(&self.id.to_le_bytes());
        let crc = crc32fast::hash(&buf[0..60]);
        buf[60..64].copy_from_slice(&crc.to_le_bytes());
        buf
    }

    /// Decodes a header; `None` if it is damaged or of an unknown version.
    pub fn decode(buf: &[u8]) -> Option<JournalHeader> {
        let ok = buf.len() == JOURNAL_HEADER_BYTES
            && buf[0..8] == JOURNAL_MAGIC
            && (1..=JOURNAL_VERSION).contains(&u32::from_le_bytes(buf[8..12].try_into().unwrap()))
            && crc32fast::hash(&buf[0..60]) == u32::from_le_bytes(buf[60..64].try_into().unwrap());
        ok.then(|| JournalHeader {
            base: ChunkLens {
                json: u64_at(buf, 16),
                keys: u64_at(buf, 24),
                recs: u64_at(buf, 32),
            },
            id: u64_at(buf, 40),
        })
    }
}

/// Name prefix of a store's group journal files (a dot name: never a shape's).
pub const GROUP_JOURNAL_PREFIX: &str = ".group-journal-";
/// First four bytes of a group journal entry.
pub const GROUP_ENTRY_MAGIC: [u8; 4] = *b"SGJE";
/// Bytes of a group journal entry's header.
pub const GROUP_ENTRY_HEADER_BYTES: usize = 48;

/// One entry of the group journal: bytes of a log journal at their place there, borrowed from
/// the bytes the entry is encoded in or from the frames of a group flush (the only type of
/// entry: encoding and decoding copy nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupEntry<'a> {
    /// The group journal's epoch: a replay stops at the first entry of another epoch.
    pub epoch: u64,
    /// The log journal's path, relative to the store root (`<shape-id>/<seq:010>.journal`).
    pub path: &'a str,
    /// The log journal's id ([`JournalHeader::id`]).
    pub journal_id: u64,
    /// Position of the bytes in the log journal.
    pub at: u64,
    /// The log journal's size after the write (it grows in sparse steps).
    pub file_len: u64,
    /// The bytes.
    pub bytes: &'a [u8],
}

impl<'a> GroupEntry<'a> {
    /// Appends the encoded entry to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let mut h = [0u8; GROUP_ENTRY_HEADER_BYTES];
        h[0..4].copy_from_slice(&GROUP_ENTRY_MAGIC);
        h[8..16].copy_from_slice(&self.epoch.to_le_bytes());
        h[16..24].copy_from_slice(&self.journal_id.to_le_bytes());
        h[24..32].copy_from_slice(&self.at.to_le_bytes());
        h[32..40].copy_from_slice(&self.file_len.to_le_bytes());
        let path_len = u32::try_from(self.path.len()).expect("a journal path is short");
        let bytes_len = u32::try_from(self.bytes.len()).expect("a journal write is under 4 GiB");
        h[40..44].copy_from_slice(&path_len.to_le_bytes());
        h[44..48].copy_from_slice(&bytes_len.to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&h[8..]);
        crc.update(self.path.as_bytes());
        crc.update(self.bytes);
        h[4..8].copy_from_slice(&crc.finalize().to_le_bytes());
        out.extend_from_slice(&h);
        out.extend_from_slice(self.path.as_bytes());
        out.extend_from_slice(self.bytes);
    }

    /// Decodes the entry at the start of `buf` and its encoded length; `None` if none is there
    /// intact (torn, damaged, or zeros).
    pub fn decode(buf: &'a [u8]) -> Option<(GroupEntry<'a>, usize)> {
        let h = buf.get(..GROUP_ENTRY_HEADER_BYTES)?;
        if h[0..4] != GROUP_ENTRY_MAGIC {
            return None;
        }
        let path_len = usize::try_from(u32::from_le_bytes(h[40..44].try_into().unwrap())).ok()?;
        let bytes_len = usize::try_from(u32::from_le_bytes(h[44..48].try_into().unwrap())).ok()?;
        let end = GROUP_ENTRY_HEADER_BYTES
            .checked_add(path_len)?
            .checked_add(bytes_len)?;
        let body = buf.get(GROUP_ENTRY_HEADER_BYTES..end)?;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&h[8..]);
        crc.update(body);
        if crc.finalize() != u32::from_le_bytes(h[4..8].try_into().unwrap()) {
            return None;
        }
        let path = std::str::from_utf8(&body[..path_len]).ok()?;
        Some((
            GroupEntry {
                epoch: u64_at(h, 8),
                path,
                journal_id: u64_at(h, 16),
                at: u64_at(h, 24),
                file_len: u64_at(h, 32),
                bytes: &body[path_len..],
            },
            end,
        ))
    }
}

/// Bytes of the close record a clean close leaves at the end of the tail's journal.
pub const CLOSE_RECORD_BYTES: usize = 64;
/// First four bytes of a close record.
pub const CLOSE_MAGIC: [u8; 4] = *b"SJCL";
/// Close record flag: the log holds a committed message (`last_committed` is set).
const CLOSE_HAS_COMMITTED: u32 = 1;
/// Close record flag: the initial snapshot is complete.
const CLOSE_SNAPSHOT_DONE: u32 = 2;

/// What a clean close leaves as the last 64 bytes of the tail's journal (the file then ends
/// with it, its size no multiple of [`JOURNAL_ALLOCATE_BYTES`]): the state recovery would
/// otherwise find by scanning the tail, so that the next open skips the scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseRecord {
    /// The tail chunk's number (the index's entry count).
    pub seq: u64,
    /// Durable lengths of the tail's files; each ends with a commit record (or is empty).
    pub lens: ChunkLens,
    /// The last committed message's offset.
    pub last_committed: Option<LogOffset>,
    /// Whether the initial snapshot is complete.
    pub snapshot_done: bool,
}

impl CloseRecord {
    /// Encodes the record with its magic and checksum.
    pub fn encode(&self) -> [u8; CLOSE_RECORD_BYTES] {
        let mut buf = [0u8; CLOSE_RECORD_BYTES];
        buf[0..4].copy_from_slice(&CLOSE_MAGIC);
        let last = self.last_committed.unwrap_or(LogOffset::ZERO);
        let fields = [
            self.seq,
            self.lens.json,
            self.lens.keys,
            self.lens.recs,
            last.tx,
            last.op,
        ];
        for (i, v) in fields.iter().enumerate() {
            buf[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        let mut flags = 0;
        if self.last_committed.is_some() {
            flags |= CLOSE_HAS_COMMITTED;
        }
        if self.snapshot_done {
            flags |= CLOSE_SNAPSHOT_DONE;
        }
        buf[56..60].copy_from_slice(&flags.to_le_bytes());
        let crc = crc32fast::hash(&buf[8..CLOSE_RECORD_BYTES]);
        buf[4..8].copy_from_slice(&crc.to_le_bytes());
        buf
    }

    /// Decodes a record; `None` without the magic or with a checksum that does not match.
    pub fn decode(buf: &[u8]) -> Option<CloseRecord> {
        assert_eq!(buf.len(), CLOSE_RECORD_BYTES);
        let intact = buf[0..4] == CLOSE_MAGIC
            && crc32fast::hash(&buf[8..CLOSE_RECORD_BYTES])
                == u32::from_le_bytes(buf[4..8].try_into().unwrap());
        if !intact {
            return None;
        }
        let flags = u32::from_le_bytes(buf[56..60].try_into().unwrap());
        Some(CloseRecord {
            seq: u64_at(buf, 8),
            lens: ChunkLens {
                json: u64_at(buf, 16),
                keys: u64_at(buf, 24),
                recs: u64_at(buf, 32),
            },
            last_committed: (flags & CLOSE_HAS_COMMITTED != 0)
                .then(|| LogOffset::new(u64_at(buf, 40), u64_at(buf, 48))),
            snapshot_done: flags & CLOSE_SNAPSHOT_DONE != 0,
        })
    }
}

/// The header of one journal frame: where its bytes go in the chunk files, and how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Chunk file positions the frame's bytes start at.
    pub at: ChunkLens,
    /// Bytes of each file the frame covers (records, keys, JSON follow the header in that order).
    pub len: ChunkLens,
    /// `FRAME_*` bits.
    pub flags: u32,
}

impl FrameHeader {
    /// Whether the frame's JSON was synced in place rather than carried in the journal.
    pub fn json_in_place(&self) -> bool {
        self.flags & FRAME_JSON_IN_PLACE != 0
    }

    /// Whether the frame's records and keys were synced in place rather than carried in the
    /// journal.
    pub fn records_in_place(&self) -> bool {
        self.flags & FRAME_RECORDS_IN_PLACE != 0
    }

    /// Bytes of payload following the header in the journal; `None` if they overflow (a
    /// damaged header).
    pub fn payload_len(&self) -> Option<u64> {
        let records = if self.records_in_place() {
            0
        } else {
            self.len.recs.checked_add(self.len.keys)?
        };
        let json = if self.json_in_place() {
            0
        } else {
            self.len.json
        };
        records.checked_add(json)
    }

    /// Encodes the header; the checksum covers it and the frame's payload (empty slices for
    /// the parts that are in place).
    pub fn encode(&self, recs: &[u8], keys: &[u8], json: &[u8]) -> [u8; FRAME_HEADER_BYTES] {
        let mut buf = [0u8; FRAME_HEADER_BYTES];
        buf[0..4].copy_from_slice(&FRAME_MAGIC);
        let fields = [
            self.at.json,
            self.at.keys,
            self.at.recs,
            self.len.json,
            self.len.keys,
            self.len.recs,
        ];
        for (i, v) in fields.iter().enumerate() {
            buf[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        buf[56..60].copy_from_slice(&self.flags.to_le_bytes());
        let crc = frame_crc(&buf, recs, keys, json);
        buf[4..8].copy_from_slice(&crc.to_le_bytes());
        buf
    }

    /// Decodes a header without checking its checksum; `None` without the frame magic.
    pub fn decode(buf: &[u8]) -> Option<FrameHeader> {
        assert_eq!(buf.len(), FRAME_HEADER_BYTES);
        (buf[0..4] == FRAME_MAGIC).then(|| FrameHeader {
            at: ChunkLens {
                json: u64_at(buf, 8),
                keys: u64_at(buf, 16),
                recs: u64_at(buf, 24),
            },
            len: ChunkLens {
                json: u64_at(buf, 32),
                keys: u64_at(buf, 40),
                recs: u64_at(buf, 48),
            },
            flags: u32::from_le_bytes(buf[56..60].try_into().unwrap()),
        })
    }

    /// Whether an encoded header's checksum matches it and the payload.
    pub fn checksum_matches(buf: &[u8], recs: &[u8], keys: &[u8], json: &[u8]) -> bool {
        frame_crc(buf, recs, keys, json) == u32::from_le_bytes(buf[4..8].try_into().unwrap())
    }
}

fn frame_crc(buf: &[u8], recs: &[u8], keys: &[u8], json: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&buf[8..FRAME_HEADER_BYTES]);
    h.update(recs);
    h.update(keys);
    h.update(json);
    h.finalize()
}

/// Path of the journal of tail chunk `seq`: `<seq:010>.journal`.
pub fn journal_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:010}.journal"))
}

/// Parses a journal file name back into its chunk number.
pub fn parse_journal_name(name: &str) -> Option<u64> {
    let seq = name.strip_suffix(".journal")?;
    (seq.len() == 10).then(|| seq.parse().ok())?
}

/// The three files of one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkFile {
    /// Concatenated JSON bytes of the chunk's messages.
    Json,
    /// Fixed-width records.
    Recs,
    /// Concatenated message keys.
    Keys,
}

impl ChunkFile {
    /// All three, in the order a flush writes them (records last).
    pub const ALL: [ChunkFile; 3] = [ChunkFile::Json, ChunkFile::Keys, ChunkFile::Recs];

    fn extension(self) -> &'static str {
        match self {
            ChunkFile::Json => "json",
            ChunkFile::Recs => "recs",
            ChunkFile::Keys => "keys",
        }
    }
}

/// Path of one file of chunk `seq`, generation `gen`: `<seq:010>-<gen>.<ext>`.
pub fn chunk_path(dir: &Path, seq: u64, gen: u16, file: ChunkFile) -> PathBuf {
    dir.join(format!("{seq:010}-{gen}.{}", file.extension()))
}

/// Parses a chunk file name back into `(seq, gen)`; `None` for any other name.
pub fn parse_chunk_name(name: &str) -> Option<(u64, u16)> {
    let (stem, ext) = name.rsplit_once('.')?;
    if !["json", "recs", "keys"].contains(&ext) {
        return None;
    }
    let (seq, gen) = stem.split_once('-')?;
    if seq.len() != 10 {
        return None;
    }
    Some((seq.parse().ok()?, gen.parse().ok()?))
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_and_detects_damage() {
        let rec = Record {
            offset: LogOffset::new(7, 3),
            json_end: 120,
            key_end: 9,
            kind: RecordKind::Message(Operation::Update),
            flags: FLAG_MERGED,
        };
        let buf = rec.encode(b"{\"a\":1}", b"k");
        assert_eq!(Record::decode(&buf), Some(rec));
        assert!(Record::checksum_matches(&buf, b"{\"a\":1}", b"k"));
        assert!(!Record::checksum_matches(&buf, b"{\"a\":2}", b"k"));
        let mut torn = buf;
        torn[5] ^= 1;
        assert!(!Record::checksum_matches(&torn, b"{\"a\":1}", b"k"));
    }

    #[test]
    fn entry_round_trips_and_rejects_bad_checksum() {
        let entry = ChunkEntry {
            first: LogOffset::new(1, 0),
            last: LogOffset::new(5, 8),
            json_len: 10_000,
            record_count: 60,
            keys_len: 300,
            gen: 2,
            flags: u16::from(FLAG_SNAPSHOT_DONE),
        };
        let mut buf = entry.encode();
        assert_eq!(ChunkEntry::decode(&buf), Some(entry));
        buf[33] ^= 0x40;
        assert_eq!(ChunkEntry::decode(&buf), None);
    }

    #[test]
    fn meta_round_trips() {
        let meta = ShapeMeta {
            chunk_bytes_max: 10_000,
        };
        assert_eq!(ShapeMeta::decode(&meta.encode()), Ok(meta));
        assert!(ShapeMeta::decode(&[0u8; META_BYTES]).is_err());
    }

    #[test]
    fn journal_header_and_frames_round_trip() {
        let base = ChunkLens {
            json: 10,
            keys: 2,
            recs: 40,
        };
        let header = JournalHeader {
            base,
            id: 0x1234_5678,
        };
        assert_eq!(JournalHeader::decode(&header.encode()), Some(header));
        let frame = FrameHeader {
            at: base,
            len: ChunkLens {
                json: 3,
                keys: 1,
                recs: 40,
            },
            flags: 0,
        };
        let buf = frame.encode(&[7; 40], b"k", b"abc");
        assert_eq!(FrameHeader::decode(&buf), Some(frame));
        assert_eq!(frame.payload_len(), Some(44));
        assert!(FrameHeader::checksum_matches(&buf, &[7; 40], b"k", b"abc"));
        assert!(!FrameHeader::checksum_matches(&buf, &[7; 40], b"k", b"abd"));
        let in_place = FrameHeader {
            flags: FRAME_JSON_IN_PLACE | FRAME_RECORDS_IN_PLACE,
            ..frame
        };
        assert!(in_place.json_in_place() && in_place.records_in_place());
        assert_eq!(in_place.payload_len(), Some(0));
        let huge = FrameHeader {
            len: ChunkLens {
                json: 1,
                keys: 1,
                recs: u64::MAX,
            },
            ..frame
        };
        assert_eq!(huge.payload_len(), None);
        assert_eq!(base.checked_add(huge.len), None);
        assert_eq!(base.checked_add(frame.len).map(|l| l.recs), Some(80));
        let mut v1 = JournalHeader { base, id: 0 }.encode();
        v1[8..12].copy_from_slice(&1u32.to_le_bytes());
        let crc = crc32fast::hash(&v1[0..60]);
        v1[60..64].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(JournalHeader::decode(&v1).map(|h| h.base), Some(base));
        assert_eq!(parse_journal_name("0000000003.journal"), Some(3));
        assert_eq!(parse_journal_name("3.journal"), None);
    }

    #[test]
    fn group_entries_round_trip_and_refuse_damage() {
        let entry = GroupEntry {
            epoch: 3,
            path: "shape-1/0000000002.journal",
            journal_id: 99,
            at: 64,
            file_len: JOURNAL_ALLOCATE_BYTES,
            bytes: b"frame bytes",
        };
        let mut buf = Vec::new();
        entry.encode_into(&mut buf);
        let len = buf.len();
        buf.extend_from_slice(&[0; 16]);
        assert_eq!(GroupEntry::decode(&buf), Some((entry, len)));
        assert_eq!(GroupEntry::decode(&buf[..len - 1]), None);
        assert_eq!(GroupEntry::decode(&[0; 64]), None);
        buf[len - 1] ^= 1;
        assert_eq!(GroupEntry::decode(&buf), None);
    }

    #[test]
    fn chunk_names_round_trip() {
        let path = chunk_path(Path::new("/x"), 42, 3, ChunkFile::Recs);
        assert_eq!(path, Path::new("/x/0000000042-3.recs"));
        assert_eq!(parse_chunk_name("0000000042-3.recs"), Some((42, 3)));
        assert_eq!(parse_chunk_name("index"), None);
        assert_eq!(parse_chunk_name("42-3.recs"), None);
    }
}

//! The API end to end: create, append, commit, flush, read, reopen, list, delete.

mod common;

use common::{lines_of, read_all, Owned};
use syncline_storage::{
    FaultPlan, LogOffset, Operation, StorageError, Store, WriterOptions,
    IDLE_WRITER_BUFFER_BYTES_MAX,
};

fn small_chunks() -> WriterOptions {
    WriterOptions {
        chunk_bytes_max: 10_000,
        ..WriterOptions::default()
    }
}

fn txn(tx: u64, ops: u64) -> Vec<Owned> {
    (0..ops)
        .map(|op| {
            let kind = if op % 3 == 0 {
                Operation::Insert
            } else {
                Operation::Update
            };
            Owned::new(
                LogOffset::new(tx, op * 2),
                &format!("\"public\".\"items\"/\"{}\"", op % 7),
                kind,
                &"x".repeat(150),
            )
        })
        .collect()
}

/// `n` snapshot inserts (offsets `0_0`, `0_1`, …), keys `k<i>`, each with `value`.
fn snapshot_rows(n: u64, value: &str) -> Vec<Owned> {
    (0..n)
        .map(|i| {
            Owned::new(
                LogOffset::new(0, i),
                &format!("k{i}"),
                Operation::Insert,
                value,
            )
        })
        .collect()
}

#[test]
fn reads_back_exactly_what_was_committed_across_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store.create_shape("s1", &small_chunks()).unwrap();
    let mut all = Vec::new();
    for tx in 1..=40 {
        let msgs = txn(tx, 1 + tx % 9);
        let refs: Vec<_> = msgs.iter().map(Owned::as_message).collect();
        w.append(&refs).unwrap();
        w.commit().unwrap();
        all.extend(msgs);
        if tx % 5 == 0 {
            assert_eq!(w.flush().unwrap(), Some(all.last().unwrap().offset));
        }
    }
    let mut r = store.open_reader("s1").unwrap();
    let (lines, responses) = read_all(&mut r, None);
    assert_eq!(lines, lines_of(&all));
    assert!(
        responses > 3,
        "10,000-byte chunks split the log: {responses} responses"
    );
    assert!(r.closed_chunks().unwrap() >= 3);
    for (i, m) in all.iter().enumerate().step_by(13) {
        let (lines, _) = read_all(&mut r, Some(m.offset));
        assert_eq!(lines, lines_of(&all[i + 1..]), "from {}", m.offset);
    }
}

#[test]
fn uncommitted_and_unflushed_data_is_invisible() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store.create_shape("s", &WriterOptions::default()).unwrap();
    let mut r = store.open_reader("s").unwrap();
    let first = txn(5, 3);
    w.append(&first.iter().map(Owned::as_message).collect::<Vec<_>>())
        .unwrap();
    w.flush().unwrap();
    let empty = r.read(None).unwrap();
    assert!(empty.body.is_none() && empty.up_to_date && empty.end_offset.is_none());
    w.commit().unwrap();
    assert!(
        r.read(None).unwrap().body.is_none(),
        "committed but not flushed"
    );
    assert_eq!(w.flush().unwrap(), Some(LogOffset::new(5, 4)));
    let got = r.read(None).unwrap();
    assert_eq!(got.end_offset, Some(LogOffset::new(5, 4)));
    assert_eq!(
        got.body.unwrap().read_to_vec().unwrap(),
        first
            .iter()
            .flat_map(|m| m.json.clone())
            .collect::<Vec<_>>()
    );
    let at_end = r.read(Some(LogOffset::new(5, 4))).unwrap();
    assert!(at_end.body.is_none() && at_end.up_to_date);
    assert_eq!(at_end.end_offset, Some(LogOffset::new(5, 4)));
}

#[test]
fn reopen_continues_after_the_last_commit_and_drops_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store.create_shape("s", &small_chunks()).unwrap();
    let mut committed = Vec::new();
    for tx in 1..=30 {
        let msgs = txn(tx, 4);
        w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
            .unwrap();
        w.commit().unwrap();
        committed.extend(msgs);
    }
    let open_txn = txn(31, 4);
    w.append(&open_txn.iter().map(Owned::as_message).collect::<Vec<_>>())
        .unwrap();
    w.flush().unwrap();
    drop(w);
    let mut w = store.open_writer("s", &WriterOptions::default()).unwrap();
    assert_eq!(w.durable_offset(), Some(LogOffset::new(30, 6)));
    let again = txn(31, 2);
    w.append(&again.iter().map(Owned::as_message).collect::<Vec<_>>())
        .unwrap();
    w.commit().unwrap();
    w.flush().unwrap();
    committed.extend(again);
    let (lines, _) = read_all(&mut store.open_reader("s").unwrap(), None);
    assert_eq!(lines, lines_of(&committed));
}

#[test]
fn one_writer_per_shape_and_offsets_must_increase() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store.create_shape("s", &WriterOptions::default()).unwrap();
    assert!(matches!(
        store.open_writer("s", &WriterOptions::default()),
        Err(StorageError::WriterBusy(_))
    ));
    assert!(matches!(
        store.delete_shape("s"),
        Err(StorageError::WriterBusy(_))
    ));
    let m = Owned::new(LogOffset::new(3, 0), "k", Operation::Insert, "v");
    w.append(&[m.as_message()]).unwrap();
    let back = Owned::new(LogOffset::new(2, 0), "k", Operation::Insert, "v");
    assert!(matches!(
        w.append(&[back.as_message()]),
        Err(StorageError::OffsetNotIncreasing { .. })
    ));
    assert!(matches!(
        store.create_shape("s", &WriterOptions::default()),
        Err(StorageError::ShapeExists(_))
    ));
    assert!(matches!(
        store.open_reader("../x"),
        Err(StorageError::InvalidShapeId(_))
    ));
    let zero = WriterOptions {
        chunk_bytes_max: 0,
        ..WriterOptions::default()
    };
    assert!(matches!(
        store.create_shape("z", &zero),
        Err(StorageError::InvalidOptions(_))
    ));
}

#[test]
fn lists_and_deletes_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    for id in ["b", "a", "c-1"] {
        drop(store.create_shape(id, &WriterOptions::default()).unwrap());
    }
    assert_eq!(store.list_shapes().unwrap(), ["a", "b", "c-1"]);
    store.delete_shape("b").unwrap();
    assert_eq!(store.list_shapes().unwrap(), ["a", "c-1"]);
    assert!(matches!(
        store.open_reader("b"),
        Err(StorageError::ShapeNotFound(_))
    ));
    assert!(matches!(
        store.open_writer("b", &WriterOptions::default()),
        Err(StorageError::ShapeNotFound(_))
    ));
    // A deletion a crash interrupted is finished when the store is next opened, and a creation
    // it cut short before the rename is removed.
    let leftover = dir.path().join(".deleting-a-1");
    std::fs::create_dir(&leftover).unwrap();
    std::fs::write(leftover.join("index"), b"").unwrap();
    let unborn = dir.path().join(".creating-d");
    std::fs::create_dir(&unborn).unwrap();
    std::fs::write(unborn.join("shape.meta"), b"").unwrap();
    let store = Store::open(dir.path()).unwrap();
    assert!(!leftover.exists());
    assert!(!unborn.exists());
    assert_eq!(store.list_shapes().unwrap(), ["a", "c-1"]);
}

#[test]
fn snapshot_chunks_are_readable_while_being_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store.create_shape("s", &small_chunks()).unwrap();
    let mut r = store.open_reader("s").unwrap();
    let rows = snapshot_rows(300, &"r".repeat(100));
    let mut seen = Vec::new();
    let mut at = None;
    for batch in rows.chunks(50) {
        w.append(&batch.iter().map(Owned::as_message).collect::<Vec<_>>())
            .unwrap();
        w.commit().unwrap();
        w.flush().unwrap();
        let (lines, _) = read_all(&mut r, at);
        assert!(!r.read(at).unwrap().snapshot_complete);
        at = lines.last().map(|l| common::parse_line(l).0).or(at);
        seen.extend(lines);
    }
    let end = Owned::new(LogOffset::new(0, 300), "", Operation::Insert, "end");
    w.complete_snapshot(&end.as_message()).unwrap();
    w.flush().unwrap();
    assert!(r.read(at).unwrap().snapshot_complete);
    let (lines, _) = read_all(&mut r, at);
    assert_eq!(lines, lines_of(std::slice::from_ref(&end)));
    assert_eq!(seen, lines_of(&rows));
    drop(w);
    assert!(store
        .open_writer("s", &WriterOptions::default())
        .unwrap()
        .snapshot_complete());
}

#[test]
fn a_huge_transaction_streams_through_bounded_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let options = WriterOptions {
        chunk_bytes_max: 10_000,
        write_buffer_bytes_max: 4096,
        ..WriterOptions::default()
    };
    let mut w = store.create_shape("s", &options).unwrap();
    let mut r = store.open_reader("s").unwrap();
    let mut all = Vec::new();
    for piece in 0..50u64 {
        let msgs: Vec<Owned> = (0..20)
            .map(|i| {
                Owned::new(
                    LogOffset::new(9, piece * 20 + i),
                    &format!("k{i}"),
                    Operation::Insert,
                    &"z".repeat(200),
                )
            })
            .collect();
        w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
            .unwrap();
        assert!(w.buffered_bytes() < 4096 + 512, "buffer stays bounded");
        all.extend(msgs);
    }
    w.flush().unwrap();
    assert!(
        read_all(&mut r, None).0.is_empty(),
        "nothing visible before commit"
    );
    w.commit().unwrap();
    w.flush().unwrap();
    assert_eq!(read_all(&mut r, None).0, lines_of(&all));
}

/// A reader that found the index's last entry torn (being written) reads it again on the next
/// read, even when the file's length does not change meanwhile.
#[test]
fn a_torn_index_entry_is_read_again_once_complete() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store.create_shape("s", &small_chunks()).unwrap();
    for tx in 1..=20 {
        let msgs = txn(tx, 9);
        w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
            .unwrap();
        w.commit().unwrap();
        w.flush().unwrap();
    }
    let index = w.dir().join("index");
    let complete = std::fs::read(&index).unwrap();
    let entries = complete.len() / 64;
    assert!(entries >= 2);
    let mut torn = complete.clone();
    torn[complete.len() - 10] ^= 0xff;
    std::fs::write(&index, &torn).unwrap();
    let mut r = store.open_reader("s").unwrap();
    assert_eq!(r.closed_chunks().unwrap(), entries - 1);
    std::fs::write(&index, &complete).unwrap();
    assert_eq!(r.closed_chunks().unwrap(), entries);
}

#[test]
fn the_snapshot_ends_its_own_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store.create_shape("s", &small_chunks()).unwrap();
    let rows = snapshot_rows(3, "r");
    w.append(&rows.iter().map(Owned::as_message).collect::<Vec<_>>())
        .unwrap();
    let end = Owned::new(LogOffset::new(0, 3), "", Operation::Insert, "end");
    w.complete_snapshot(&end.as_message()).unwrap();
    w.flush().unwrap();
    let mut r = store.open_reader("s").unwrap();
    let first = r.read(None).unwrap();
    assert_eq!(
        (first.chunk, first.end_offset),
        (0, Some(LogOffset::new(0, 3)))
    );
    assert_eq!(
        r.closed_chunk_last(0).unwrap(),
        Some(LogOffset::new(0, 3)),
        "the snapshot's chunk closed with it"
    );
    let empty = r.read(Some(LogOffset::new(0, 3))).unwrap();
    assert!(empty.body.is_none() && empty.up_to_date);

    let change = Owned::new(LogOffset::new(77, 0), "k0", Operation::Update, "u");
    w.append(&[change.as_message()]).unwrap();
    w.commit().unwrap();
    w.flush().unwrap();
    let snapshot = r.read(None).unwrap();
    assert!(snapshot.chunk_closed);
    assert_eq!(
        (snapshot.chunk, snapshot.end_offset),
        (0, Some(LogOffset::new(0, 3)))
    );
    let log = r.read(Some(LogOffset::new(0, 3))).unwrap();
    assert_eq!(
        (log.chunk, log.end_offset),
        (1, Some(LogOffset::new(77, 0)))
    );
    assert_eq!(
        common::parse_line(&log.body.unwrap().read_to_vec().unwrap()).0,
        LogOffset::new(77, 0),
        "the log's first chunk holds only the log"
    );
}

/// Write buffers grow with a transaction (up to the write-buffer bound) and give their memory
/// back at the flush: an idle writer keeps a small, bounded buffer.
#[test]
fn an_idle_writer_keeps_little_buffer_memory() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store.create_shape("s", &WriterOptions::default()).unwrap();
    assert!(w.retained_bytes() <= IDLE_WRITER_BUFFER_BYTES_MAX);
    for (tx, rows) in [(1, 500), (2, 3_000), (3, 1)] {
        let msgs = txn(tx, rows);
        w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
            .unwrap();
        w.commit().unwrap();
        if rows == 500 {
            assert!(
                w.retained_bytes() > 500 * 150,
                "the buffers hold the transaction: {} bytes",
                w.retained_bytes()
            );
        }
        w.flush().unwrap();
        assert!(
            w.retained_bytes() <= IDLE_WRITER_BUFFER_BYTES_MAX,
            "{} bytes kept after a flush of {rows} rows",
            w.retained_bytes()
        );
    }
}

/// Appends transactions `txns` (of `txn(tx, 3)`) and commits each.
fn append_txns(
    w: &mut syncline_storage::Writer,
    txns: std::ops::RangeInclusive<u64>,
) -> Vec<Owned> {
    let mut all = Vec::new();
    for tx in txns {
        let msgs = txn(tx, 3);
        w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
            .unwrap();
        w.commit().unwrap();
        all.extend(msgs);
    }
    all
}

/// Options counting the writer's write boundaries (every write, sync, create, rename...).
fn counted(plan: &std::sync::Arc<FaultPlan>) -> WriterOptions {
    WriterOptions {
        fault_plan: Some(plan.clone()),
        ..small_chunks()
    }
}

/// A clean close leaves a close record: the next open resumes the log without recovery and
/// without writing anything, and the log goes on as if it had never been closed.
#[test]
fn a_cleanly_closed_log_reopens_without_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store.create_shape("s", &small_chunks()).unwrap();
    let mut all = append_txns(&mut w, 1..=30);
    assert_eq!(w.close().unwrap(), Some(all.last().unwrap().offset));
    for round in 0..3u64 {
        let plan = FaultPlan::unlimited();
        let mut w = store.open_writer("s", &counted(&plan)).unwrap();
        assert_eq!(plan.boundaries(), 0, "a clean reopen writes nothing");
        assert_eq!(w.durable_offset(), Some(all.last().unwrap().offset));
        assert_eq!(w.last_appended(), w.durable_offset());
        let first = 31 + round * 20;
        all.extend(append_txns(&mut w, first..=first + 19));
        if round == 1 {
            let last = all.last().unwrap().offset;
            let end = Owned::new(
                LogOffset::new(last.tx, last.op + 1),
                "",
                Operation::Insert,
                "end",
            );
            w.complete_snapshot(&end.as_message()).unwrap();
            all.push(end);
        }
        assert_eq!(w.close().unwrap(), Some(all.last().unwrap().offset));
    }
    let plan = FaultPlan::unlimited();
    let w = store.open_writer("s", &counted(&plan)).unwrap();
    assert_eq!(plan.boundaries(), 0);
    assert!(
        w.snapshot_complete(),
        "the snapshot flag survives the close"
    );
    drop(w);
    let mut r = store.open_reader("s").unwrap();
    assert!(r.closed_chunks().unwrap() >= 3, "the log spans chunks");
    assert_eq!(read_all(&mut r, None).0, lines_of(&all));
    // A writer dropped before it wrote anything leaves the log as closed; one dropped after a
    // flush leaves a journal without a close record, and the next open recovers.
    let mut w = store.open_writer("s", &small_chunks()).unwrap();
    all.extend(append_txns(&mut w, 91..=91));
    w.flush().unwrap();
    drop(w);
    let plan = FaultPlan::unlimited();
    let w = store.open_writer("s", &counted(&plan)).unwrap();
    assert!(
        plan.boundaries() > 0,
        "a writer that was dropped is recovered"
    );
    assert_eq!(w.durable_offset(), Some(all.last().unwrap().offset));
}

/// Closing a writer whose transaction is open discards the transaction, as a crash would; the
/// next open recovers the last commit. An empty log closes and reopens cleanly too.
#[test]
fn a_close_discards_an_open_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let w = store.create_shape("empty", &small_chunks()).unwrap();
    assert_eq!(w.close().unwrap(), None);
    let plan = FaultPlan::unlimited();
    let w = store.open_writer("empty", &counted(&plan)).unwrap();
    assert_eq!((plan.boundaries(), w.durable_offset()), (0, None));

    let mut w = store.create_shape("s", &small_chunks()).unwrap();
    let committed = append_txns(&mut w, 1..=10);
    assert!(!w.in_transaction());
    let open = txn(11, 200);
    w.append(&open.iter().map(Owned::as_message).collect::<Vec<_>>())
        .unwrap();
    assert!(w.in_transaction());
    assert_eq!(w.close().unwrap(), Some(committed.last().unwrap().offset));
    let plan = FaultPlan::unlimited();
    let mut w = store.open_writer("s", &counted(&plan)).unwrap();
    assert!(plan.boundaries() > 0, "recovery ran");
    assert_eq!(w.last_appended(), Some(committed.last().unwrap().offset));
    let again = append_txns(&mut w, 11..=12);
    w.close().unwrap();
    let (lines, _) = read_all(&mut store.open_reader("s").unwrap(), None);
    assert_eq!(lines, lines_of(&[committed, again].concat()));
}

#[test]
fn a_read_only_store_reads_beside_the_writer_and_refuses_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store.create_shape("s", &small_chunks()).unwrap();
    let reader_store = Store::open_read_only(dir.path()).unwrap();
    let mut r = reader_store.open_reader("s").unwrap();
    assert_eq!(
        r.end().unwrap().last_committed,
        None,
        "nothing committed yet"
    );
    let mut all = Vec::new();
    for tx in 1..=80 {
        let msgs = txn(tx, 5);
        let refs: Vec<_> = msgs.iter().map(Owned::as_message).collect();
        w.append(&refs).unwrap();
        w.commit().unwrap();
        all.extend(msgs);
        w.flush().unwrap();
        let end = r.end().unwrap();
        assert_eq!(end.last_committed, Some(all.last().unwrap().offset));
        assert!(!end.snapshot_complete);
    }
    assert!(
        r.closed_chunks().unwrap() >= 2,
        "the end is found past closed chunks"
    );
    let refused = |e: StorageError| matches!(e, StorageError::ReadOnly(_));
    assert!(refused(
        reader_store.create_shape("t", &small_chunks()).unwrap_err()
    ));
    assert!(refused(
        reader_store.open_writer("s", &small_chunks()).unwrap_err()
    ));
    assert!(refused(reader_store.delete_shape("s").unwrap_err()));
    drop(w);
    assert!(refused(
        reader_store.open_writer("s", &small_chunks()).unwrap_err()
    ));
    assert!(dir.path().join("s").exists());
}

/// A snapshot that closes its chunk before any flush (the common small shape) writes its bytes
/// once: the chunk files are synced at the close, so the journal describes them in place rather
/// than holding a second copy.
#[test]
fn a_closing_chunk_writes_its_bytes_once() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store.create_shape("s", &WriterOptions::default()).unwrap();
    let rows = snapshot_rows(500, &"r".repeat(200));
    w.append(&rows.iter().map(Owned::as_message).collect::<Vec<_>>())
        .unwrap();
    w.commit().unwrap();
    let end = Owned::new(LogOffset::new(0, 500), "", Operation::Insert, "end");
    w.complete_snapshot(&end.as_message()).unwrap();
    let json_bytes = std::fs::metadata(dir.path().join("s/0000000000-0.json"))
        .unwrap()
        .len();
    assert!(json_bytes > 100_000, "the snapshot is in its chunk file");
    let journal = std::fs::metadata(dir.path().join("s/0000000000.journal")).unwrap();
    let journal_disk_bytes = journal.blocks() * 512;
    assert!(
        journal_disk_bytes < 16 * 1024,
        "the closed chunk's journal holds {journal_disk_bytes} bytes on disk, not a copy of its {json_bytes} JSON bytes"
    );
    w.flush().unwrap();
    let mut r = store.open_reader("s").unwrap();
    let (lines, _) = read_all(&mut r, None);
    let mut all = rows;
    all.push(end);
    assert_eq!(lines, lines_of(&all));
}

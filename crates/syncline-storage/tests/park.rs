//! Parked writers: an idle writer releases its descriptors and lock without I/O and resumes
//! where it was, and refuses to resume over a log another writer changed meanwhile.

mod common;

use common::{lines_of, read_all, workload_txn, Owned};
use syncline_storage::{flush_all, GroupSync, StorageError, Store, Writer, WriterOptions};

fn small_chunks() -> WriterOptions {
    WriterOptions {
        chunk_bytes_max: 2_000,
        ..WriterOptions::default()
    }
}

/// Appends and commits workload transaction `t`.
fn write_txn(w: &mut Writer, t: u64) -> Vec<Owned> {
    let msgs = workload_txn(t);
    w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
        .unwrap();
    w.commit().unwrap();
    msgs
}

/// Only an idle writer parks; a parked one resumes on its next write, across chunk ends and
/// index appends, and the log holds every transaction once.
#[test]
fn a_parked_writer_resumes_where_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store.create_shape("s", &small_chunks()).unwrap();
    let mut committed = Vec::new();
    for t in 1..=40 {
        committed.extend(write_txn(&mut w, t));
        assert!(!w.park(), "a commit not yet durable keeps the writer open");
        w.flush().unwrap();
        assert!(w.park(), "an idle writer parks");
        assert!(w.is_parked());
        assert!(
            w.park(),
            "parking a parked writer changes nothing and says so"
        );
    }
    let msgs = workload_txn(41);
    w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
        .unwrap();
    assert!(!w.is_parked(), "a write takes the writer back");
    assert!(!w.park(), "an open transaction keeps the writer open");
    w.commit().unwrap();
    committed.extend(msgs);
    assert_eq!(w.close().unwrap(), committed.last().map(|m| m.offset));
    let (lines, responses) = read_all(&mut store.open_reader("s").unwrap(), None);
    assert!(responses > 3, "the log spans chunks: {responses} responses");
    assert_eq!(lines, lines_of(&committed));
    let w = store.open_writer("s", &small_chunks()).unwrap();
    assert_eq!(w.durable_offset(), committed.last().map(|m| m.offset));
}

/// A parked writer holds no lock: another writer may open the log, and once it did anything
/// (recovery's new journal, or records appended after a clean reopen) the parked writer refuses
/// to resume. While the other one holds the lock, resuming finds it busy.
#[test]
fn a_parked_writer_refuses_a_log_another_writer_changed() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store.create_shape("s", &small_chunks()).unwrap();
    write_txn(&mut w, 1);
    w.flush().unwrap();
    assert!(w.park());
    let other = store.open_writer("s", &small_chunks()).unwrap();
    let mut busy = w;
    let msgs = workload_txn(2);
    assert!(matches!(
        busy.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>()),
        Err(StorageError::WriterBusy(_))
    ));
    drop(busy);
    other.close().unwrap();

    // Resumed from a clean close, its journal still ends with the close record: a second
    // writer resumes the same journal, and only the records it appends tell.
    let mut w = store.open_writer("s", &small_chunks()).unwrap();
    assert!(w.park());
    let mut other = store.open_writer("s", &small_chunks()).unwrap();
    write_txn(&mut other, 2);
    other.close().unwrap();
    let msgs = workload_txn(3);
    assert!(matches!(
        w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>()),
        Err(StorageError::Changed(_))
    ));

    // Recovery's new journal tells too, even when it wrote no record.
    let mut w = store.open_writer("s", &small_chunks()).unwrap();
    write_txn(&mut w, 3);
    w.flush().unwrap();
    assert!(w.park());
    drop(store.open_writer("s", &small_chunks()).unwrap());
    assert!(matches!(w.flush(), Err(StorageError::Changed(_))));
}

/// Writers parked after a group flush (durable through the group journal alone) resume and
/// flush together again.
#[test]
fn writers_parked_after_a_group_flush_flush_together_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut writers: Vec<Writer> = (0..4)
        .map(|i| {
            store
                .create_shape(&format!("s{i}"), &small_chunks())
                .unwrap()
        })
        .collect();
    let mut committed = Vec::new();
    for t in 1..=12 {
        let mut msgs = Vec::new();
        for w in &mut writers {
            msgs = write_txn(w, t);
        }
        committed.extend(msgs);
        let mut refs: Vec<&mut Writer> = writers.iter_mut().collect();
        for result in flush_all(&mut refs, GroupSync::Journal) {
            result.unwrap();
        }
        for w in &mut writers {
            assert!(w.park());
        }
    }
    for (i, w) in writers.into_iter().enumerate() {
        w.close().unwrap();
        let (lines, _) = read_all(&mut store.open_reader(&format!("s{i}")).unwrap(), None);
        assert_eq!(lines, lines_of(&committed));
    }
}

/// A compaction by another writer replaces only the index and closed chunks: the index's
/// identity tells.
#[test]
fn a_parked_writer_refuses_a_log_another_writer_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store.create_shape("s", &small_chunks()).unwrap();
    for t in 1..=30 {
        write_txn(&mut w, t);
    }
    w.close().unwrap();
    let mut w = store.open_writer("s", &small_chunks()).unwrap();
    assert!(w.park());
    let mut other = store.open_writer("s", &small_chunks()).unwrap();
    let stats = other.compact(1, &mut |_, newer| newer.to_vec()).unwrap();
    assert!(stats.chunks_rewritten > 0, "{stats:?}");
    other.close().unwrap();
    assert!(matches!(w.flush(), Err(StorageError::Changed(_))));
}

/// A store opened for writing while another live store still holds its group journal (a
/// server taking over from one that has not yet let go) waits for that journal to be let go
/// and replays it: a parked log's commits made durable only there are not lost.
#[test]
fn a_store_taking_over_waits_for_the_group_journal_another_still_holds() {
    let dir = tempfile::tempdir().unwrap();
    let old = Store::open(dir.path()).unwrap();
    let mut writers: Vec<Writer> = ["a", "b"]
        .iter()
        .map(|s| old.create_shape(s, &small_chunks()).unwrap())
        .collect();
    let mut committed = Vec::new();
    for (i, w) in writers.iter_mut().enumerate() {
        committed.push(write_txn(w, i as u64 + 1));
    }
    let mut all: Vec<&mut Writer> = writers.iter_mut().collect();
    for result in flush_all(&mut all, GroupSync::Journal) {
        result.unwrap();
    }
    for w in &mut writers {
        assert!(w.park(), "an idle writer parks, its lock released");
    }
    assert!(matches!(
        Store::open_within(dir.path(), std::time::Duration::from_millis(100)),
        Err(StorageError::GroupJournalHeld(_))
    ));
    let root = dir.path().to_owned();
    let taking_over = std::thread::spawn(move || Store::open(root).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        !taking_over.is_finished(),
        "the new store waits while the old one holds its group journal"
    );
    drop(writers);
    drop(old);
    let new = taking_over.join().unwrap();
    for (shape, msgs) in ["a", "b"].iter().zip(&committed) {
        let w = new.open_writer(shape, &small_chunks()).unwrap();
        assert_eq!(w.durable_offset(), msgs.last().map(|m| m.offset), "{shape}");
        drop(w);
        let (lines, _) = read_all(&mut new.open_reader(shape).unwrap(), None);
        assert_eq!(lines, lines_of(msgs), "{shape}");
    }
}

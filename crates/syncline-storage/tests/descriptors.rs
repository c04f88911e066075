//! File descriptors: what readers and writers hold, counted in `/proc/self/fd`, and which files
//! a read opens. The tests of this binary take turns (one lock), so that each counts only its
//! own descriptors.

mod common;

use std::sync::{Mutex, MutexGuard, PoisonError};

use common::{read_all, workload_txn, Owned};
use syncline_storage::{flush_all, GroupSync, Store, WriterOptions};

/// Held by each test while it opens files, so that the others count only their own.
static COUNTING: Mutex<()> = Mutex::new(());

/// Takes [`COUNTING`] (also after another test failed holding it).
fn counting() -> MutexGuard<'static, ()> {
    COUNTING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Descriptors this process has open.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn small_chunks() -> WriterOptions {
    WriterOptions {
        chunk_bytes_max: 2_000,
        ..WriterOptions::default()
    }
}

#[test]
fn a_reader_holds_no_descriptor_between_reads() {
    let _counting = counting();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store.create_shape("s", &small_chunks()).unwrap();
    for t in 1..=40 {
        let msgs = workload_txn(t);
        w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
            .unwrap();
        w.commit().unwrap();
        w.flush().unwrap();
    }
    drop(w);
    let before = open_fds();
    let mut reader = store.open_reader("s").unwrap();
    assert_eq!(open_fds(), before, "an opened reader holds nothing");
    let (lines, responses) = read_all(&mut reader, None);
    assert!(responses > 3, "the log spans chunks: {responses} responses");
    for line in lines.iter().step_by(7) {
        let from = Some(common::parse_line(line).0);
        read_all(&mut reader, from);
    }
    assert_eq!(open_fds(), before, "nothing is held between reads");
    let response = reader.read(None).unwrap();
    assert_eq!(open_fds(), before + 1, "a body holds its chunk's JSON file");
    drop(response);
    assert_eq!(open_fds(), before);
}

/// An open writer holds six descriptors (the locked header, the index, the tail's three files
/// and its journal); a closed one holds none, and reopening a cleanly closed log takes the same
/// six again.
#[test]
fn a_closed_writer_holds_no_descriptor() {
    let _counting = counting();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let before = open_fds();
    let mut w = store.create_shape("s", &small_chunks()).unwrap();
    assert_eq!(open_fds(), before + 6);
    for t in 1..=30 {
        let msgs = workload_txn(t);
        w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
            .unwrap();
        w.commit().unwrap();
    }
    w.close().unwrap();
    assert_eq!(open_fds(), before);
    let w = store.open_writer("s", &small_chunks()).unwrap();
    assert_eq!(open_fds(), before + 6);
    w.close().unwrap();
    assert_eq!(open_fds(), before);
}

/// A parked writer holds no descriptor; resuming takes the locked header, the tail's three
/// files and its journal again (the index only when a chunk closes).
#[test]
fn a_parked_writer_holds_no_descriptor() {
    let _counting = counting();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let before = open_fds();
    let mut w = store.create_shape("s", &small_chunks()).unwrap();
    let msgs = workload_txn(1);
    w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
        .unwrap();
    w.commit().unwrap();
    w.flush().unwrap();
    assert!(w.park());
    assert_eq!(open_fds(), before);
    w.flush().unwrap();
    assert_eq!(open_fds(), before + 5);
    assert!(w.park());
    assert_eq!(open_fds(), before);
    drop(w);
}

/// A writer that closed its files mid-transaction holds only its lock, and goes on: the rest
/// of the transaction and a flush reopen what they need.
#[test]
fn a_writer_mid_transaction_can_close_its_files() {
    let _counting = counting();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let before = open_fds();
    let mut w = store.create_shape("s", &small_chunks()).unwrap();
    let msgs = workload_txn(1);
    let (first, rest) = msgs.split_at(msgs.len() / 2);
    w.append(&first.iter().map(Owned::as_message).collect::<Vec<_>>())
        .unwrap();
    w.close_files().unwrap();
    assert_eq!(open_fds(), before + 1, "only the lock stays open");
    w.append(&rest.iter().map(Owned::as_message).collect::<Vec<_>>())
        .unwrap();
    w.commit().unwrap();
    w.close_files().unwrap();
    assert_eq!(w.flush().unwrap(), msgs.last().map(|m| m.offset));
    w.close().unwrap();
    assert_eq!(open_fds(), before);
    let (lines, _) = read_all(&mut store.open_reader("s").unwrap(), None);
    assert_eq!(lines, common::lines_of(&msgs));
}

/// Bytes of the shape's chunk JSON files on disk.
fn json_bytes(shape_dir: &std::path::Path) -> u64 {
    std::fs::read_dir(shape_dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

/// An idle writer closes its files too, keeping its lock; a small transaction appended then is
/// kept in memory and opens nothing, and closing the files again writes nothing: the flush
/// opens and writes the files once.
#[test]
fn a_held_writer_opens_its_files_only_to_flush() {
    let _counting = counting();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let before = open_fds();
    let mut w = store.create_shape("s", &WriterOptions::default()).unwrap();
    let first = workload_txn(1);
    w.append(&first.iter().map(Owned::as_message).collect::<Vec<_>>())
        .unwrap();
    w.commit().unwrap();
    w.flush().unwrap();
    w.close_files().unwrap();
    assert_eq!(open_fds(), before + 1, "an idle held writer keeps its lock");
    let written = json_bytes(&dir.path().join("s"));
    let second = workload_txn(2);
    w.append(&second.iter().map(Owned::as_message).collect::<Vec<_>>())
        .unwrap();
    w.commit().unwrap();
    w.close_files().unwrap();
    assert_eq!(open_fds(), before + 1, "appending opened nothing");
    assert_eq!(
        json_bytes(&dir.path().join("s")),
        written,
        "a small transaction stays in memory"
    );
    assert_eq!(w.flush().unwrap(), second.last().map(|m| m.offset));
    assert!(json_bytes(&dir.path().join("s")) > written);
    w.close().unwrap();
    assert_eq!(open_fds(), before);
    let (lines, _) = read_all(&mut store.open_reader("s").unwrap(), None);
    let all: Vec<Owned> = first.into_iter().chain(second).collect();
    assert_eq!(lines, common::lines_of(&all));
}

/// A group flush of held writers (files closed, lock kept) leaves them held: each closes the
/// files it wrote, so a flush reaching thousands of held logs never holds three descriptors
/// for each.
#[test]
fn a_group_flush_leaves_held_writers_held() {
    const LOGS: usize = 12;
    let _counting = counting();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut writers: Vec<_> = (0..LOGS)
        .map(|i| {
            store
                .create_shape(&format!("s{i}"), &WriterOptions::default())
                .unwrap()
        })
        .collect();
    let flush = |writers: &mut Vec<syncline_storage::Writer>, t: u64| {
        let msgs = workload_txn(t);
        for w in writers.iter_mut() {
            w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
                .unwrap();
            w.commit().unwrap();
            w.close_files().unwrap();
        }
        let mut group: Vec<&mut syncline_storage::Writer> = writers.iter_mut().collect();
        for reported in flush_all(&mut group, GroupSync::Journal) {
            assert_eq!(reported.unwrap(), msgs.last().map(|m| m.offset));
        }
    };
    flush(&mut writers, 1);
    for w in writers.iter_mut() {
        w.close_files().unwrap();
    }
    let held = open_fds();
    flush(&mut writers, 2);
    assert_eq!(open_fds(), held, "the flush closed what it opened");
    for w in writers {
        w.close().unwrap();
    }
    let expected = common::lines_of(
        &workload_txn(1)
            .into_iter()
            .chain(workload_txn(2))
            .collect::<Vec<_>>(),
    );
    for i in 0..LOGS {
        let (lines, _) = read_all(&mut store.open_reader(&format!("s{i}")).unwrap(), None);
        assert_eq!(lines, expected);
    }
}

/// A live read that finds nothing new opens only the tail's records file, not its JSON file
/// (here removed to prove it); a read with a body needs it.
#[test]
fn a_read_that_finds_nothing_new_opens_only_the_records() {
    let _counting = counting();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store.create_shape("s", &small_chunks()).unwrap();
    let msgs = workload_txn(1);
    w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
        .unwrap();
    w.commit().unwrap();
    w.close().unwrap();
    std::fs::remove_file(dir.path().join("s").join("0000000000-0.json")).unwrap();
    let mut reader = store.open_reader("s").unwrap();
    let end = msgs.last().map(|m| m.offset);
    let at_end = reader.read(end).unwrap();
    assert!(at_end.up_to_date && at_end.body.is_none());
    assert_eq!(at_end.end_offset, end);
    assert!(reader.read(None).is_err(), "a body needs the JSON file");
}

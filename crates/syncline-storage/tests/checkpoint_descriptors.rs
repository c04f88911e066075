//! A checkpoint of the group journal that reaches many logs stays within the process's
//! open-files limit: it keeps at most an eighth of the limit of log journals open at once
//! (its own test binary, since it lowers the limit for the whole process).

mod common;

use common::{limit_open_files, lines_of, read_all, workload_txn, Owned};
use syncline_storage::{flush_all, GroupSync, Store, Writer, WriterOptions};

/// The open-files limit the test runs under.
const OPEN_FILES_MAX: libc::rlim_t = 512;
/// Held logs (one descriptor each): with a journal open for each as well, the process would
/// need more than [`OPEN_FILES_MAX`].
const LOGS: usize = 300;

#[test]
fn a_checkpoint_of_many_held_logs_stays_within_the_open_files_limit() {
    limit_open_files(OPEN_FILES_MAX);
    let dir = tempfile::tempdir().unwrap();
    let shapes: Vec<String> = (0..LOGS).map(|i| format!("s{i}")).collect();
    // Created and given a first transaction under the default bound, a few at a time (a new
    // shape's first flush syncs its directory and files), then closed.
    let store = Store::open(dir.path()).unwrap();
    for some in shapes.chunks(16) {
        let mut writers: Vec<Writer> = some
            .iter()
            .map(|s| store.create_shape(s, &WriterOptions::default()).unwrap())
            .collect();
        append_and_commit(&mut writers, 1);
        flush(&mut writers, 1);
        for w in writers {
            w.close().unwrap();
        }
    }
    drop(store);
    // Reopened held under a bound of one byte: the next group flush checkpoints, reaching
    // every log's journal in one batch.
    let store = Store::open(dir.path())
        .unwrap()
        .with_group_journal_bytes_max(1);
    let mut writers: Vec<Writer> = shapes
        .iter()
        .map(|s| {
            let mut w = store.open_writer(s, &WriterOptions::default()).unwrap();
            w.close_files().unwrap();
            w
        })
        .collect();
    append_and_commit(&mut writers, 2);
    flush(&mut writers, 2);
    for w in writers {
        w.close().unwrap();
    }
    let expected = lines_of(&(1..=2).flat_map(workload_txn).collect::<Vec<_>>());
    for shape in &shapes {
        let (lines, _) = read_all(&mut store.open_reader(shape).unwrap(), None);
        assert_eq!(lines, expected);
    }
}

/// Appends the workload's transaction `t` to every writer and commits it, leaving each held.
fn append_and_commit(writers: &mut [Writer], t: u64) {
    let msgs = workload_txn(t);
    for w in writers {
        w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
            .unwrap();
        w.commit().unwrap();
        w.close_files().unwrap();
    }
}

/// Flushes every writer in one group flush through the group journal; each reports
/// transaction `t` durable.
fn flush(writers: &mut [Writer], t: u64) {
    let last = workload_txn(t).last().map(|m| m.offset);
    let mut group: Vec<&mut Writer> = writers.iter_mut().collect();
    for reported in flush_all(&mut group, GroupSync::Journal) {
        assert_eq!(reported.unwrap(), last);
    }
}

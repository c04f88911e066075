//! Readers racing a writer in the same process: every read is a committed prefix, never torn,
//! and what a reader sees never goes backwards.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{committed_prefix, read_all, workload_txn, Owned};
use syncline_storage::{Store, WriterOptions};

/// Transactions the writer appends while the readers read.
const TXNS: u64 = 1_500;
const READERS: usize = 2;

#[test]
fn readers_racing_the_writer_see_growing_committed_prefixes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let options = WriterOptions {
        chunk_bytes_max: 10_000,
        write_buffer_bytes_max: 1_500,
        ..WriterOptions::default()
    };
    let mut writer = store.create_shape("race", &options).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let (store, done) = (store.clone(), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut reader = store.open_reader("race").unwrap();
                let (mut seen, mut reads) = (0, 0);
                while !done.load(Ordering::Acquire) {
                    let visible = committed_prefix(&read_all(&mut reader, None).0);
                    assert!(
                        visible >= seen,
                        "a reader's view went backwards: {visible} < {seen}"
                    );
                    (seen, reads) = (visible, reads + 1);
                }
                reads
            })
        })
        .collect();
    for t in 1..=TXNS {
        let msgs = workload_txn(t);
        for piece in msgs.chunks(2) {
            writer
                .append(&piece.iter().map(Owned::as_message).collect::<Vec<_>>())
                .unwrap();
        }
        writer.commit().unwrap();
        if t % 10 == 0 {
            writer.flush().unwrap();
        }
    }
    writer.flush().unwrap();
    done.store(true, Ordering::Release);
    for r in readers {
        assert!(
            r.join().unwrap() > 0,
            "every reader read while the writer wrote"
        );
    }
    let (lines, _) = read_all(&mut store.open_reader("race").unwrap(), None);
    assert_eq!(committed_prefix(&lines), TXNS);
}

//! Idle shapes hold no file descriptors: with this process's open-file limit lowered far below
//! what the shapes would need if each held its files, every shape is created, written, closed,
//! reopened and read, and a reader is kept for each.
//!
//! `SYNCLINE_TEST_IDLE_SHAPES` sets the number of shapes (default 1,000; each costs a few
//! `fdatasync`s, so 20,000 take minutes).

mod common;

use common::{limit_open_files, Owned};
use syncline_storage::{LogOffset, Operation, Reader, Store, WriterOptions};

/// Shapes the test makes unless `SYNCLINE_TEST_IDLE_SHAPES` says otherwise.
const SHAPES_DEFAULT: usize = 1_000;
/// The open-file limit the test runs under: an open writer holds six descriptors, so at most
/// ten shapes could stay open.
const OPEN_FILES_MAX: libc::rlim_t = 64;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn message(shape: usize, tx: u64) -> Owned {
    Owned::new(
        LogOffset::new(tx, 0),
        &format!("k{shape}"),
        Operation::Insert,
        &format!("shape {shape} tx {tx}"),
    )
}

/// Appends and commits one message.
fn write(w: &mut syncline_storage::Writer, m: &Owned) {
    w.append(&[m.as_message()]).unwrap();
    w.commit().unwrap();
}

/// Everything a reader reads from the start.
fn read(reader: &mut Reader) -> Vec<u8> {
    let response = reader.read(None).unwrap();
    assert!(response.up_to_date);
    response
        .body
        .map_or_else(Vec::new, |b| b.read_to_vec().unwrap())
}

#[test]
fn many_more_idle_shapes_than_open_files() {
    let shapes = std::env::var("SYNCLINE_TEST_IDLE_SHAPES")
        .map_or(SHAPES_DEFAULT, |n| n.parse().expect("a number of shapes"));
    limit_open_files(OPEN_FILES_MAX);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let options = WriterOptions::default();
    let before = open_fds();
    let mut readers = Vec::with_capacity(shapes);
    for shape in 0..shapes {
        let id = format!("shape-{shape}");
        let mut w = store.create_shape(&id, &options).unwrap();
        write(&mut w, &message(shape, 1));
        w.close().unwrap();
        let mut reader = store.open_reader(&id).unwrap();
        assert_eq!(read(&mut reader), message(shape, 1).json);
        readers.push(reader);
    }
    assert_eq!(open_fds(), before, "idle shapes hold no descriptor");
    // Every shape is usable again: its writer reopens (a clean reopen), its reader goes on.
    for (shape, reader) in readers.iter_mut().enumerate().step_by(7) {
        let mut w = store
            .open_writer(&format!("shape-{shape}"), &options)
            .unwrap();
        write(&mut w, &message(shape, 2));
        w.close().unwrap();
        let both = [message(shape, 1).json, message(shape, 2).json].concat();
        assert_eq!(read(reader), both);
    }
    assert_eq!(open_fds(), before);
}

//! `Reader::read_messages` allocates nothing per message: with a reused `Messages`, a response
//! of thousands of messages costs as many allocations as a response of one.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::Owned;
use syncline_storage::{LogOffset, Messages, Operation, Reader, Store, WriterOptions};

/// The system allocator, counting the allocations of the current thread.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's guarantees for `layout` are the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by one `read_messages` from `from`, and the messages it returned.
fn allocations(
    reader: &mut Reader,
    from: Option<LogOffset>,
    messages: &mut Messages,
) -> (u64, usize) {
    let before = ALLOCATIONS.with(Cell::get);
    let response = reader.read_messages(from, messages).unwrap();
    let after = ALLOCATIONS.with(Cell::get);
    drop(response);
    (after - before, messages.len())
}

#[test]
fn listing_messages_allocates_nothing_per_message() {
    const MESSAGES: u64 = 3_000;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store.create_shape("s", &WriterOptions::default()).unwrap();
    let msgs: Vec<Owned> = (0..MESSAGES)
        .map(|i| {
            let offset = LogOffset::new(1 + i / 10, i % 10);
            Owned::new(offset, &format!("k{i}"), Operation::Insert, "v")
        })
        .collect();
    w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
        .unwrap();
    w.commit().unwrap();
    w.flush().unwrap();
    let mut reader = store.open_reader("s").unwrap();
    for mut messages in [Messages::new(), Messages::with_keys()] {
        let warm = allocations(&mut reader, None, &mut messages);
        assert_eq!(warm.1, msgs.len());
        let (all, n) = allocations(&mut reader, None, &mut messages);
        assert_eq!(n, msgs.len());
        let last_two = Some(msgs[msgs.len() - 3].offset);
        let (two, n) = allocations(&mut reader, last_two, &mut messages);
        assert_eq!(n, 2);
        assert!(
            all <= two,
            "{all} allocations for {MESSAGES} messages, {two} for 2"
        );
        assert!(all < 64, "{all} allocations per read");
    }
}

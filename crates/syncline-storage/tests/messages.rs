//! `Reader::read_messages`: each message's offset, operation, key and place in the body, from
//! the records alone; and the assertions that keep a response inside its chunk.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{merge_updates, resolve_intent, Owned};
use syncline_storage::{LogOffset, Messages, Operation, ReadResult, Reader, Store, WriterOptions};

fn small_chunks() -> WriterOptions {
    WriterOptions {
        chunk_bytes_max: 400,
        ..WriterOptions::default()
    }
}

/// A log of updates, inserts and deletes over a few keys, in transactions of 1 to 5 messages.
fn workload() -> Vec<Owned> {
    let mut present = std::collections::BTreeSet::new();
    let mut msgs = Vec::new();
    for t in 1..=60u64 {
        for i in 0..t % 5 + 1 {
            let small = |v: u64| u8::try_from(v % 251).unwrap();
            let intent = (small(t * 7 + i) % 6, (t + i) % 9 == 0, vec![(1, small(t))]);
            msgs.push(resolve_intent(
                &mut present,
                LogOffset::new(t, 2 * i),
                &intent,
            ));
        }
    }
    msgs
}

fn write(store: &Store, msgs: &[Owned]) {
    let mut w = store.create_shape("s", &small_chunks()).unwrap();
    for txn in msgs.chunk_by(|a, b| a.offset.tx == b.offset.tx) {
        w.append(&txn.iter().map(Owned::as_message).collect::<Vec<_>>())
            .unwrap();
        w.commit().unwrap();
        w.flush().unwrap();
    }
}

/// A message as listed: offset, operation, merged flag, key (if asked for) and JSON.
type Listed = (LogOffset, Operation, bool, Option<Vec<u8>>, Vec<u8>);

/// Reads from `from` to the end with `read_messages`, checking each response against a plain
/// `read`; returns every message.
fn read_all_messages(
    reader: &mut Reader,
    from: Option<LogOffset>,
    messages: &mut Messages,
) -> Vec<Listed> {
    let mut out = Vec::new();
    let mut at = from;
    loop {
        let r = reader.read_messages(at, messages).unwrap();
        let plain = reader.read(at).unwrap();
        assert_same(&r, &plain);
        let body = r
            .body
            .as_ref()
            .map_or_else(Vec::new, |b| b.read_to_vec().unwrap());
        let mut pos = 0;
        for (i, span) in messages.spans().iter().enumerate() {
            assert_eq!(span.start, pos, "messages tile the body");
            pos = span.end;
            assert!(at.is_none_or(|a| span.offset > a));
            assert!(r.end_offset.is_some_and(|e| span.offset <= e));
            let key = messages.key(i).map(<[u8]>::to_vec);
            out.push((
                span.offset,
                span.op,
                span.merged,
                key,
                span.json(&body).to_vec(),
            ));
        }
        assert_eq!(pos, body.len() as u64, "the last message ends the body");
        assert_eq!(messages.len(), messages.spans().len());
        if r.up_to_date {
            return out;
        }
        at = r.end_offset;
    }
}

fn assert_same(a: &ReadResult, b: &ReadResult) {
    let range = |r: &ReadResult| r.body.as_ref().map(|b| (b.start, b.len));
    assert_eq!(range(a), range(b));
    assert_eq!(
        (
            a.end_offset,
            a.chunk_closed,
            a.up_to_date,
            a.snapshot_complete
        ),
        (
            b.end_offset,
            b.chunk_closed,
            b.up_to_date,
            b.snapshot_complete
        )
    );
}

#[test]
fn messages_are_found_from_the_records_without_parsing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let msgs = workload();
    write(&store, &msgs);
    let mut reader = store.open_reader("s").unwrap();
    assert!(reader.closed_chunks().unwrap() >= 5);
    let expected = |from: usize, keys: bool| -> Vec<_> {
        msgs[from..]
            .iter()
            .map(|m| {
                let key = keys.then(|| m.key.clone());
                (m.offset, m.op, false, key, m.json.clone())
            })
            .collect()
    };
    let mut with_keys = Messages::with_keys();
    let mut without = Messages::new();
    assert_eq!(
        read_all_messages(&mut reader, None, &mut with_keys),
        expected(0, true)
    );
    for i in (0..msgs.len()).step_by(5) {
        let from = Some(msgs[i].offset);
        assert_eq!(
            read_all_messages(&mut reader, from, &mut with_keys),
            expected(i + 1, true),
            "from {from:?}"
        );
        assert_eq!(
            read_all_messages(&mut reader, from, &mut without),
            expected(i + 1, false),
            "from {from:?}"
        );
    }
    let at_end = reader
        .read_messages(msgs.last().map(|m| m.offset), &mut with_keys)
        .unwrap();
    assert!(at_end.body.is_none() && with_keys.is_empty() && with_keys.key(0).is_none());
}

#[test]
fn compacted_messages_are_flagged_merged() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let msgs = workload();
    write(&store, &msgs);
    let mut w = store.open_writer("s", &small_chunks()).unwrap();
    let stats = w.compact(1, &mut merge_updates).unwrap();
    assert!(stats.messages_removed > 0);
    let mut reader = store.open_reader("s").unwrap();
    let read = read_all_messages(&mut reader, None, &mut Messages::with_keys());
    assert_eq!(read.len(), msgs.len() - stats.messages_removed);
    let original: BTreeMap<LogOffset, &Owned> = msgs.iter().map(|m| (m.offset, m)).collect();
    let mut merged = 0;
    for (offset, op, is_merged, key, json) in read {
        let m = original[&offset];
        assert_eq!((op, key.as_deref()), (m.op, Some(&m.key[..])));
        if is_merged {
            assert_eq!(op, Operation::Update);
            merged += 1;
        } else {
            assert_eq!(json, m.json);
        }
    }
    assert!(merged > 0, "some updates were merged");
}

/// Moves the JSON end of record `i` of chunk 0 by `delta` bytes (records are not checksummed
/// against reads, so only the reader's assertions stand in the way).
fn damage_record(shape_dir: &Path, i: u64, delta: u64) {
    use std::os::unix::fs::FileExt;
    let path = shape_dir.join("0000000000-0.recs");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut end = [0u8; 8];
    file.read_exact_at(&mut end, i * 40 + 16).unwrap();
    let moved = u64::from_le_bytes(end) + delta;
    file.write_all_at(&moved.to_le_bytes(), i * 40 + 16)
        .unwrap();
}

fn damaged_log(i: u64) -> (tempfile::TempDir, Store, Vec<Owned>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let msgs = workload();
    write(&store, &msgs);
    damage_record(&dir.path().join("s"), i, 100_000);
    (dir, store, msgs)
}

#[test]
#[should_panic(expected = "leaves the response's range")]
fn a_message_past_its_chunk_end_is_caught_when_listing_messages() {
    let (_dir, store, _) = damaged_log(1);
    let mut reader = store.open_reader("s").unwrap();
    let _ = reader.read_messages(None, &mut Messages::new());
}

#[test]
#[should_panic(expected = "starts past the chunk's end")]
fn a_response_starting_past_its_chunk_end_is_caught() {
    let (_dir, store, msgs) = damaged_log(0);
    let mut reader = store.open_reader("s").unwrap();
    let _ = reader.read(Some(msgs[0].offset));
}

//! Compaction: from any offset, applying the compacted log gives the same final state as the
//! original; inserts and deletes are never moved; the newest chunks are untouched; readers
//! holding old files keep working.

mod common;

use common::{apply, lines_of, merge_updates, parse_line, read_all, resolve_intent, Owned, State};
use proptest::prelude::*;
use syncline_storage::{LogOffset, Operation, Store, WriterOptions};

/// A random message intent: key index, whether to delete (if the row exists), columns to set.
type Intent = (u8, bool, Vec<(u8, u8)>);

/// Turns intents into valid messages: insert when the row is absent, else update or delete.
fn messages(txns: &[Vec<Intent>]) -> Vec<Vec<Owned>> {
    let mut present = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (t, intents) in txns.iter().enumerate() {
        let mut txn = Vec::new();
        for (i, intent) in intents.iter().enumerate() {
            let offset = LogOffset::new(t as u64 + 1, 2 * i as u64);
            txn.push(resolve_intent(&mut present, offset, intent));
        }
        out.push(txn);
    }
    out
}

fn intents() -> impl Strategy<Value = Vec<Vec<Intent>>> {
    let intent = (
        0u8..6,
        prop::bool::weighted(0.15),
        prop::collection::vec((0u8..4, 0u8..50), 1..3),
    );
    prop::collection::vec(prop::collection::vec(intent, 1..6), 5..60)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn compacted_log_gives_the_same_final_state_from_every_offset(txns in intents(), keep in 0usize..3) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut w = store.create_shape("s", &WriterOptions { chunk_bytes_max: 300, ..WriterOptions::default() }).unwrap();
        let txns = messages(&txns);
        for txn in &txns {
            w.append(&txn.iter().map(Owned::as_message).collect::<Vec<_>>()).unwrap();
            w.commit().unwrap();
        }
        w.flush().unwrap();
        let all: Vec<Owned> = txns.into_iter().flatten().collect();
        let original = lines_of(&all);
        let mut reader = store.open_reader("s").unwrap();
        let closed = reader.closed_chunks().unwrap();
        prop_assert_eq!(&read_all(&mut reader, None).0, &original);
        let before = responses(&mut reader);

        let stats = w.compact(keep, &mut merge_updates).unwrap();
        let compacted = read_all(&mut reader, None).0;
        let mut final_state = State::new();
        apply(&mut final_state, &original);

        prop_assert_eq!(original.len() - compacted.len(), stats.messages_removed);
        let mut starts: Vec<Option<LogOffset>> = vec![None];
        starts.extend(all.iter().map(|m| Some(m.offset)));
        for (n, from) in starts.iter().enumerate() {
            let mut state = State::new();
            apply(&mut state, &original[..n]);
            apply(&mut state, &read_all(&mut reader, *from).0);
            prop_assert_eq!(&state, &final_state, "from {:?}", from);
        }
        // Inserts and deletes keep their place; response ends never move; the newest `keep`
        // closed chunks and the tail are untouched.
        let structural = |lines: &[Vec<u8>]| -> Vec<Vec<u8>> {
            lines.iter().filter(|l| parse_line(l).1 != 'u').cloned().collect()
        };
        prop_assert_eq!(structural(&compacted), structural(&original));
        let after = responses(&mut reader);
        let ends = |r: &[(Option<LogOffset>, Vec<u8>)]| r.iter().map(|(e, _)| *e).collect::<Vec<_>>();
        prop_assert_eq!(ends(&after), ends(&before));
        let kept_from = closed.saturating_sub(keep);
        prop_assert_eq!(&after[kept_from..], &before[kept_from..]);
        let mut offsets: Vec<LogOffset> = compacted.iter().map(|l| parse_line(l).0).collect();
        offsets.dedup();
        prop_assert!(offsets.windows(2).all(|p| p[0] < p[1]), "offsets stay increasing");
    }
}

/// Every response from the start: its end offset and its lines.
fn responses(reader: &mut syncline_storage::Reader) -> Vec<(Option<LogOffset>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = None;
    loop {
        let r = reader.read(at).unwrap();
        out.push((
            r.end_offset,
            r.body.map(|b| b.read_to_vec().unwrap()).unwrap_or_default(),
        ));
        if r.up_to_date {
            return out;
        }
        at = r.end_offset;
    }
}

#[test]
fn merges_update_runs_and_leaves_the_newest_chunks_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store
        .create_shape(
            "s",
            &WriterOptions {
                chunk_bytes_max: 10_000,
                ..WriterOptions::default()
            },
        )
        .unwrap();
    let mut all = Vec::new();
    for t in 1..=400u64 {
        let op = if t == 1 {
            Operation::Insert
        } else {
            Operation::Update
        };
        let value = format!("c{}={t};pad={}", t % 3, "x".repeat(150));
        all.push(Owned::new(LogOffset::new(t, 0), "row", op, &value));
        w.append(&[all.last().unwrap().as_message()]).unwrap();
        w.commit().unwrap();
    }
    w.flush().unwrap();
    let mut reader = store.open_reader("s").unwrap();
    let closed = reader.closed_chunks().unwrap();
    assert!(closed >= 5, "{closed} closed chunks");
    let before = responses(&mut reader);
    // A reader in the middle of the first chunk holds its files across the compaction.
    let held = reader.read(Some(LogOffset::new(5, 0))).unwrap();
    let held_bytes = held.body.as_ref().unwrap().read_to_vec().unwrap();

    let stats = w.compact(2, &mut merge_updates).unwrap();
    assert_eq!(stats.chunks_rewritten, closed - 2);
    assert!(stats.json_bytes_after < stats.json_bytes_before / 10);
    assert_eq!(
        held.body.unwrap().read_to_vec().unwrap(),
        held_bytes,
        "open files stay readable"
    );

    let after = responses(&mut reader);
    let ends = |r: &[(Option<LogOffset>, Vec<u8>)]| r.iter().map(|(e, _)| *e).collect::<Vec<_>>();
    assert_eq!(
        ends(&after),
        ends(&before),
        "chunk boundaries and response ends never move"
    );
    assert_eq!(
        &after[closed - 2..],
        &before[closed - 2..],
        "the newest chunks are untouched"
    );
    let (lines, _) = read_all(&mut reader, None);
    assert_eq!(parse_line(&lines[0]).1, 'i', "the insert stays first");
    let region: usize = after[..closed - 2]
        .iter()
        .map(|(_, b)| b.iter().filter(|&&c| c == b'\n').count())
        .sum();
    assert_eq!(
        region, 2,
        "the compacted region is its insert and one merged update"
    );
    let mut state = State::new();
    apply(&mut state, &lines);
    let mut want = State::new();
    apply(&mut want, &lines_of(&all));
    assert_eq!(state, want);
    // Reopening (recovery) keeps the compacted generation.
    drop(w);
    let w = store.open_writer("s", &WriterOptions::default()).unwrap();
    assert_eq!(w.durable_offset(), Some(LogOffset::new(400, 0)));
    assert_eq!(
        read_all(&mut store.open_reader("s").unwrap(), None).0,
        lines
    );
}

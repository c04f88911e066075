//! Model-based test: random appends (in pieces), commits, flushes, reads from random offsets,
//! compactions and crashes (clean, power loss, power loss with lost earlier pages), checked
//! against an in-memory model of the committed transactions.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::{
    apply, lines_of, merge_updates, parse_line, power_cut, read_all, resolve_intent, Owned, State,
};
use proptest::prelude::*;
use syncline_storage::{FaultPlan, LogOffset, Reader, Store, Writer, WriterOptions};

/// Key index, delete if present, columns to set.
type Intent = (u8, bool, Vec<(u8, u8)>);

#[derive(Debug, Clone)]
enum Step {
    Append(Vec<Intent>),
    Commit,
    Flush,
    Read(usize),
    Compact(usize),
    /// A clean close (which discards an open transaction) and a reopen.
    Close,
    /// Parking the writer (only an idle one parks; the next use resumes it).
    Park,
    Crash {
        power_loss: Option<bool>,
        seed: u64,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let intent = (
        0u8..5,
        prop::bool::weighted(0.2),
        prop::collection::vec((0u8..3, 0u8..20), 1..3),
    );
    prop_oneof![
        6 => prop::collection::vec(intent, 1..6).prop_map(Step::Append),
        4 => Just(Step::Commit),
        2 => Just(Step::Flush),
        3 => any::<usize>().prop_map(Step::Read),
        1 => (0usize..3).prop_map(Step::Compact),
        1 => Just(Step::Close),
        1 => Just(Step::Park),
        1 => (prop::option::of(any::<bool>()), any::<u64>()).prop_map(|(power_loss, seed)| Step::Crash { power_loss, seed }),
    ]
}

/// What the log must hold: committed transactions, of which a prefix is durable.
#[derive(Default)]
struct Model {
    txns: Vec<Vec<Owned>>,
    durable_txns: usize,
    pending: Vec<Owned>,
    next_tx: u64,
    compacted: bool,
}

impl Model {
    fn committed(&self, txns: usize) -> Vec<Owned> {
        self.txns[..txns].iter().flatten().cloned().collect()
    }

    fn present_keys(&self) -> BTreeSet<String> {
        let mut state = State::new();
        apply(&mut state, &lines_of(&self.committed(self.txns.len())));
        apply(&mut state, &lines_of(&self.pending));
        state.into_keys().collect()
    }

    fn resolve(&mut self, intents: &[Intent]) -> Vec<Owned> {
        let mut present = self.present_keys();
        let mut out = Vec::new();
        for intent in intents {
            let offset = LogOffset::new(self.next_tx, 2 * self.pending.len() as u64);
            let msg = resolve_intent(&mut present, offset, intent);
            self.pending.push(msg.clone());
            out.push(msg);
        }
        out
    }

    /// How many committed transactions `lines` (the whole log) hold; checks they are exactly
    /// (or, after compaction, state-equivalent to) a prefix of at least the durable ones.
    fn visible_txns(&self, lines: &[Vec<u8>]) -> usize {
        let v = match lines.last() {
            None => 0,
            Some(l) => {
                1 + self
                    .txns
                    .iter()
                    .position(|t| t.last().unwrap().offset.tx == parse_line(l).0.tx)
                    .expect("known tx")
            }
        };
        assert!(
            v >= self.durable_txns,
            "durable transaction lost: {v} < {}",
            self.durable_txns
        );
        let want = lines_of(&self.committed(v));
        if self.compacted {
            assert_eq!(
                state_of(lines),
                state_of(&want),
                "state after {v} transactions"
            );
        } else {
            assert_eq!(
                lines,
                &want[..],
                "log is exactly {v} committed transactions"
            );
        }
        v
    }

    fn check_read(&self, reader: &mut Reader, pick: usize) {
        let (all, _) = read_all(reader, None);
        let v = self.visible_txns(&all);
        let prefix = self.committed(v);
        if prefix.is_empty() {
            return;
        }
        let n = pick % (prefix.len() + 1);
        let from = n.checked_sub(1).map(|i| prefix[i].offset);
        let (lines, _) = read_all(reader, from);
        let want = lines_of(&prefix);
        if self.compacted {
            let mut state = state_of(&want[..n]);
            apply(&mut state, &lines);
            assert_eq!(state, state_of(&want), "from {from:?}");
        } else {
            assert_eq!(lines, &want[n..], "from {from:?}");
        }
    }
}

fn state_of(lines: &[Vec<u8>]) -> State {
    let mut state = State::new();
    apply(&mut state, lines);
    state
}

/// Small chunks and buffers; writes go through the journal or in place.
fn options(plan: Arc<FaultPlan>) -> WriterOptions {
    WriterOptions {
        chunk_bytes_max: 400,
        write_buffer_bytes_max: 256,
        journal_bytes_max: 300,
        fault_plan: Some(plan),
    }
}

fn run(steps: Vec<Step>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut plan = FaultPlan::unlimited();
    let mut writer: Writer = store.create_shape("m", &options(plan.clone())).unwrap();
    let mut reader = store.open_reader("m").unwrap();
    let mut model = Model {
        next_tx: 1,
        ..Model::default()
    };
    // A creation is durable from the writer's first flush (or close) on.
    let mut created_durable = false;
    for step in steps {
        match step {
            Step::Append(intents) => {
                let msgs = model.resolve(&intents);
                writer
                    .append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
                    .unwrap();
            }
            Step::Commit => {
                writer.commit().unwrap();
                if !model.pending.is_empty() {
                    model.txns.push(std::mem::take(&mut model.pending));
                    model.next_tx += 1;
                }
            }
            Step::Flush => {
                let durable = writer.flush().unwrap();
                assert_eq!(durable, model.txns.last().map(|t| t.last().unwrap().offset));
                model.durable_txns = model.txns.len();
                created_durable = true;
            }
            Step::Read(pick) => model.check_read(&mut reader, pick),
            Step::Compact(keep) => {
                writer.compact(keep, &mut merge_updates).unwrap();
                model.compacted = true;
            }
            Step::Close => {
                let durable = writer.close().unwrap();
                assert_eq!(durable, model.txns.last().map(|t| t.last().unwrap().offset));
                created_durable = true;
                model.durable_txns = model.txns.len();
                model.pending.clear();
                model.next_tx += 1;
                // The same plan goes on tracking what is synced: a later power cut can still
                // lose the close record, which is not.
                writer = store.open_writer("m", &options(plan.clone())).unwrap();
                assert_eq!(writer.durable_offset(), durable);
            }
            Step::Park => {
                let idle = model.pending.is_empty() && model.durable_txns == model.txns.len();
                assert_eq!(writer.park(), idle);
            }
            Step::Crash { power_loss, seed } => {
                drop(writer);
                if let Some(hole) = power_loss {
                    power_cut(&plan, hole, seed);
                }
                plan = FaultPlan::unlimited();
                writer = match store.open_writer("m", &options(plan.clone())) {
                    Ok(writer) => writer,
                    Err(e) => {
                        assert!(
                            power_loss.is_some() && !created_durable,
                            "a durable shape must open: {e}"
                        );
                        // The power cut took the new shape's files: it is deleted and made again.
                        store.delete_shape("m").unwrap();
                        model = Model {
                            next_tx: model.next_tx,
                            ..Model::default()
                        };
                        store.create_shape("m", &options(plan.clone())).unwrap()
                    }
                };
                if power_loss.is_some() {
                    // A power cut ends every process: readers start afresh. A reader survives
                    // a writer's process crash and must keep reading correctly.
                    reader = store.open_reader("m").unwrap();
                }
                let (lines, _) = read_all(&mut reader, None);
                let v = model.visible_txns(&lines);
                model.txns.truncate(v);
                model.pending.clear();
                model.durable_txns = v;
                model.next_tx += 1;
                assert_eq!(
                    writer.durable_offset(),
                    model.txns.last().map(|t| t.last().unwrap().offset)
                );
            }
        }
    }
    writer.commit().unwrap();
    if !model.pending.is_empty() {
        model.txns.push(std::mem::take(&mut model.pending));
    }
    writer.flush().unwrap();
    model.durable_txns = model.txns.len();
    let (lines, _) = read_all(&mut reader, None);
    assert_eq!(model.visible_txns(&lines), model.txns.len());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn storage_matches_the_model(steps in prop::collection::vec(step(), 1..60)) {
        run(steps);
    }
}

//! Crash tests: a writer stopped at every write boundary (process crash and power loss), and a
//! writer process killed with SIGKILL mid-stream while another process reads.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use common::{committed_prefix, read_all, workload_txn, Owned};
use syncline_storage::{
    flush_all, FaultPlan, GroupSync, LogOffset, Result, Store, Writer, WriterOptions,
    CHECKPOINT_OPEN_JOURNALS_MAX,
};

const SHAPE: &str = "crashy";

/// Taken for writing while the SIGKILL test spawns its child. Until the child has started its
/// program, it holds a copy of every descriptor of this process, the shape locks of writers
/// included (a `flock` lasts while any copy is open), so a test that drops a writer and opens
/// it again at that moment would find it busy. The other tests hold it for reading.
static SPAWNING: RwLock<()> = RwLock::new(());

/// Held by a test that drops writers and opens them again: no child is spawned meanwhile.
fn no_spawn() -> RwLockReadGuard<'static, ()> {
    SPAWNING.read().unwrap_or_else(PoisonError::into_inner)
}
/// Transactions the fault-injection workload writes.
const WORKLOAD_TXNS: u64 = 16;
/// Shapes the group-flush workload writes to.
const GROUP_LOGS: usize = 4;
/// Transactions the group-flush workload writes to each of its shapes (fewer than
/// [`WORKLOAD_TXNS`]: every stop runs it on several shapes).
const GROUP_WORKLOAD_TXNS: u64 = 6;
/// The transactions after whose flush the workload parks the writer (the next write resumes it).
const PARK_AFTER_TXNS: [u64; 2] = [6, 9];
/// The transaction after which the workload compacts the log.
const COMPACT_AFTER_TXN: u64 = 10;
/// The transaction after which the workload closes the writer and reopens it.
const CLOSE_AFTER_TXN: u64 = 7;
/// The transaction in the middle of which the workload closes the writer (discarding it) and
/// reopens it, then writes the transaction again.
const CLOSE_IN_TXN: u64 = 12;

/// Small chunks and buffers so the workload crosses many chunk ends, mid-transaction too, and
/// writes JSON, records and keys both through the journal and in place.
fn options(plan: Option<Arc<FaultPlan>>) -> WriterOptions {
    WriterOptions {
        chunk_bytes_max: 2_000,
        write_buffer_bytes_max: 1_024,
        journal_bytes_max: 1_500,
        fault_plan: plan,
    }
}

/// Runs the workload until it ends or fails; returns the last transaction reported durable.
fn run_workload(root: &Path, plan: Arc<FaultPlan>, durable: &mut u64) -> Result<()> {
    let store = Store::open(root)?;
    let mut w = store.create_shape(SHAPE, &options(Some(plan.clone())))?;
    for t in 1..=WORKLOAD_TXNS {
        let msgs = workload_txn(t);
        if t == CLOSE_IN_TXN {
            w.append(&[msgs[0].as_message()])?;
            let reported = w.close()?;
            assert_eq!(reported, workload_txn(t - 1).last().map(|m| m.offset));
            *durable = t - 1;
            w = store.open_writer(SHAPE, &options(Some(plan.clone())))?;
        }
        for piece in msgs.chunks(3) {
            w.append(&piece.iter().map(Owned::as_message).collect::<Vec<_>>())?;
        }
        w.commit()?;
        if t == CLOSE_AFTER_TXN {
            let reported = w.close()?;
            assert_eq!(reported, msgs.last().map(|m| m.offset));
            *durable = t;
            w = store.open_writer(SHAPE, &options(Some(plan.clone())))?;
        }
        if t % 3 == 0 || t == WORKLOAD_TXNS {
            let reported = w.flush()?;
            assert_eq!(reported, msgs.last().map(|m| m.offset));
            *durable = t;
            if PARK_AFTER_TXNS.contains(&t) {
                assert!(w.park(), "an idle writer parks");
            }
        }
        if t == COMPACT_AFTER_TXN {
            w.compact(1, &mut |_, newer| newer.to_vec())?;
        }
    }
    Ok(())
}

/// Reopens after a crash and checks the log is a prefix of the committed transactions holding
/// at least every durable one; returns how many survived.
fn check_recovery(root: &Path, shape: &str, durable: u64) -> u64 {
    check_recovery_in(&Store::open(root).unwrap(), shape, durable)
}

/// [`check_recovery`] with the store opened (and its group journals replayed) already.
fn check_recovery_in(store: &Store, shape: &str, durable: u64) -> u64 {
    if !store.list_shapes().unwrap().contains(&shape.to_string()) {
        assert_eq!(durable, 0, "a shape with durable data disappeared");
        return 0;
    }
    let w = match store.open_writer(shape, &options(None)) {
        Ok(w) => w,
        Err(e) => {
            // A creation is durable only from the writer's first flush: before it, a power
            // cut may leave the shape incomplete, and deleting it must still work.
            assert_eq!(
                durable, 0,
                "a shape with durable data cannot be opened: {e}"
            );
            store.delete_shape(shape).unwrap();
            assert!(!store.list_shapes().unwrap().contains(&shape.to_string()));
            return 0;
        }
    };
    let (lines, _) = read_all(&mut store.open_reader(shape).unwrap(), None);
    let survived = committed_prefix_with_compaction(&lines);
    assert!(
        survived >= durable,
        "durable transaction {durable} lost (recovered {survived})"
    );
    let expected = (survived > 0).then(|| workload_txn(survived).last().unwrap().offset);
    assert_eq!(w.durable_offset(), expected);
    survived
}

/// Compaction (keep-newest merge) may have removed earlier updates: compare offsets only with
/// the set the workload could produce, then compare the final state per key.
fn committed_prefix_with_compaction(lines: &[Vec<u8>]) -> u64 {
    let last_tx = lines.last().map_or(0, |l| common::parse_line(l).0.tx);
    let full: Vec<Owned> = (1..=last_tx).flat_map(workload_txn).collect();
    let mut got_state = std::collections::BTreeMap::new();
    for line in lines {
        let (offset, _, key, value) = common::parse_line(line);
        assert!(
            full.iter().any(|m| m.offset == offset),
            "unknown offset {offset}"
        );
        got_state.insert(key, value);
    }
    let mut want_state = std::collections::BTreeMap::new();
    for m in &full {
        let (_, _, key, value) = common::parse_line(&m.json[..m.json.len() - 1]);
        want_state.insert(key, value);
    }
    assert_eq!(
        got_state, want_state,
        "state after {last_tx} transactions differs"
    );
    let tail: Vec<Vec<u8>> = lines
        .iter()
        .filter(|l| common::parse_line(l).0.tx > COMPACT_AFTER_TXN)
        .cloned()
        .collect();
    let expected_tail: Vec<Vec<u8>> = common::lines_of(&full)
        .into_iter()
        .filter(|l| common::parse_line(l).0.tx > COMPACT_AFTER_TXN)
        .collect();
    assert_eq!(
        tail, expected_tail,
        "transactions after the compaction point are intact"
    );
    last_tx
}

#[test]
fn recovery_after_a_stop_at_every_write_boundary() {
    let _no_spawn = no_spawn();
    let dir = tempfile::tempdir().unwrap();
    let counter = FaultPlan::unlimited();
    let mut durable = 0;
    run_workload(&dir.path().join("count"), counter.clone(), &mut durable).unwrap();
    assert_eq!(durable, WORKLOAD_TXNS);
    let (lines, _) = read_all(
        &mut Store::open(dir.path().join("count"))
            .unwrap()
            .open_reader(SHAPE)
            .unwrap(),
        None,
    );
    assert_eq!(committed_prefix_with_compaction(&lines), WORKLOAD_TXNS);
    let boundaries = counter.boundaries();
    assert!(boundaries > 100, "workload has {boundaries} boundaries");
    every_stop(dir.path(), boundaries, run_workload, |root, durable| {
        check_recovery(root, SHAPE, durable);
    });
}

/// Runs `workload` stopped at each of its `boundaries` write boundaries, each as a process
/// crash and as a power cut (alternately keeping a prefix of the unsynced bytes, or later bytes
/// without earlier ones), and checks the recovery of each with `check` (given the last
/// transaction reported durable).
fn every_stop(
    dir: &Path,
    boundaries: u64,
    workload: impl Fn(&Path, Arc<FaultPlan>, &mut u64) -> Result<()>,
    check: impl Fn(&Path, u64),
) {
    for stop in 0..boundaries {
        for power_loss in [None, Some(stop % 2 == 1)] {
            let root = dir.join(format!("stop-{stop}-{power_loss:?}"));
            let plan = FaultPlan::stop_at(stop);
            let mut durable = 0;
            assert!(
                workload(&root, plan.clone(), &mut durable).is_err(),
                "stop {stop} must interrupt"
            );
            if let Some(hole) = power_loss {
                common::power_cut(&plan, hole, stop);
            }
            check(&root, durable);
            std::fs::remove_dir_all(&root).unwrap();
        }
    }
}

/// Group journal bytes after which the group-flush workload's store checkpoints (small, so
/// that it checkpoints several times).
const GROUP_JOURNAL_BYTES_MAX: u64 = 8_000;

/// Runs the first [`GROUP_WORKLOAD_TXNS`] transactions of the workload on
/// [`GROUP_LOGS`] shapes at once, flushed together by [`flush_all`] with `sync`
/// every other transaction, until it ends or fails; `durable` holds the last transaction
/// reported durable in every shape. After [`GROUP_CLOSE_AFTER_TXN`] it closes the first
/// shape's writer and reopens it (the group journal then holds frames of a closed journal),
/// after [`GROUP_DROP_AFTER_TXN`] it drops the second shape's writer and reopens it (recovery);
/// after every other flush it parks the last shape's writer. The odd shapes' writers leave
/// their tails' bytes unwritten at each group flush where they can ([`Writer::set_deferring`]).
fn run_group_workload(
    sync: GroupSync,
    root: &Path,
    plan: Arc<FaultPlan>,
    durable: &mut u64,
) -> Result<()> {
    let store = Store::open(root)?.with_group_journal_bytes_max(GROUP_JOURNAL_BYTES_MAX);
    let mut writers = (0..GROUP_LOGS)
        .map(|i| store.create_shape(&format!("group-{i}"), &options(Some(plan.clone()))))
        .collect::<Result<Vec<_>>>()?;
    for (i, w) in writers.iter_mut().enumerate() {
        w.set_deferring(i % 2 == 1);
    }
    let mut deferred_flushes = 0;
    for t in 1..=GROUP_WORKLOAD_TXNS {
        let msgs = workload_txn(t);
        for (i, w) in writers.iter_mut().enumerate() {
            for piece in msgs.chunks(3) {
                w.append(&piece.iter().map(Owned::as_message).collect::<Vec<_>>())?;
                if i == GROUP_CLOSE_FILES_LOG {
                    w.close_files()?;
                }
            }
            w.commit()?;
        }
        if t % 2 == 0 {
            let mut group: Vec<&mut Writer> = writers.iter_mut().collect();
            for reported in flush_all(&mut group, sync) {
                assert_eq!(reported?, msgs.last().map(|m| m.offset));
            }
            *durable = t;
            deferred_flushes += writers.iter().filter(|w| w.has_deferred()).count();
            if t % 4 == 0 {
                assert!(writers[GROUP_LOGS - 1].park(), "an idle writer parks");
            }
        }
        if t == GROUP_DROP_AFTER_TXN {
            // Dropped without a close: the reopen recovers from the journal, whose frames
            // since the last checkpoint only the group journal holds.
            drop(writers.remove(1));
            let mut w = store.open_writer("group-1", &options(Some(plan.clone())))?;
            w.set_deferring(true);
            assert_eq!(
                w.durable_offset(),
                msgs.last().map(|m| m.offset),
                "recovery finds every transaction the group journal made durable"
            );
            writers.insert(1, w);
        }
        if t == GROUP_CLOSE_AFTER_TXN {
            let first = writers.remove(0);
            first.close()?;
            writers.insert(
                0,
                store.open_writer("group-0", &options(Some(plan.clone())))?,
            );
        }
    }
    if sync == GroupSync::Journal {
        assert!(deferred_flushes > 0, "some flush left bytes unwritten");
    }
    Ok(())
}

/// The shape whose writer the group-flush workload has close its files after every piece it
/// appends (as the server does mid-transaction when a transaction reaches too many logs).
const GROUP_CLOSE_FILES_LOG: usize = 2;
/// The transaction after which the group-flush workload drops a writer and reopens it.
const GROUP_DROP_AFTER_TXN: u64 = 2;
/// The transaction after which the group-flush workload closes and reopens a writer.
const GROUP_CLOSE_AFTER_TXN: u64 = 4;

#[test]
fn group_flush_recovery_after_a_stop_at_every_write_boundary() {
    let _no_spawn = no_spawn();
    for sync in [GroupSync::Concurrent, GroupSync::Journal] {
        let dir = tempfile::tempdir().unwrap();
        let workload =
            |root: &Path, plan, durable: &mut u64| run_group_workload(sync, root, plan, durable);
        let counter = FaultPlan::unlimited();
        let mut durable = 0;
        workload(&dir.path().join("count"), counter.clone(), &mut durable).unwrap();
        assert_eq!(durable, GROUP_WORKLOAD_TXNS);
        let boundaries = counter.boundaries();
        assert!(
            boundaries > 100,
            "group workload ({sync:?}) has {boundaries} boundaries"
        );
        every_stop(dir.path(), boundaries, workload, |root, durable| {
            for i in 0..GROUP_LOGS {
                check_recovery(root, &format!("group-{i}"), durable);
            }
        });
    }
}

/// The child process of [`a_writer_killed_mid_stream_recovers_a_committed_prefix`]: writes the
/// workload forever, printing each durable transaction number, closing and reopening the writer
/// now and then.
#[test]
#[ignore = "child process of the SIGKILL test"]
fn sigkill_child_writer() {
    let root = std::env::var("SYNCLINE_STORAGE_CRASH_ROOT").expect("run by the SIGKILL test");
    let store = Store::open(&root).unwrap();
    let options = WriterOptions {
        chunk_bytes_max: 10_000,
        ..WriterOptions::default()
    };
    let mut w = store.create_shape(SHAPE, &options).unwrap();
    for t in 1.. {
        let msgs = workload_txn(t);
        w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
            .unwrap();
        w.commit().unwrap();
        if t % 20 == 0 {
            w.close().unwrap();
            println!("durable {t}");
            w = store.open_writer(SHAPE, &options).unwrap();
        } else if t % 4 == 0 {
            w.flush().unwrap();
            println!("durable {t}");
        }
    }
}

#[test]
fn a_writer_killed_mid_stream_recovers_a_committed_prefix() {
    for round in 0..3u64 {
        let dir = tempfile::tempdir().unwrap();
        let spawning = SPAWNING.write().unwrap_or_else(PoisonError::into_inner);
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sigkill_child_writer",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("SYNCLINE_STORAGE_CRASH_ROOT", dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        drop(spawning);
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut durable = 0;
        let mut reader = None;
        let mut seen = 0;
        while durable < 40 + round * 60 {
            let line = lines
                .next()
                .expect("child writes durable positions")
                .unwrap();
            let Some(t) = line.strip_prefix("durable ") else {
                continue;
            };
            durable = t.parse().unwrap();
            let store = Store::open_read_only(dir.path()).unwrap();
            let reader = reader.get_or_insert_with(|| store.open_reader(SHAPE).unwrap());
            let (lines, _) = read_all(reader, None);
            let visible = committed_prefix(&lines);
            assert!(visible >= seen, "another process's view went backwards");
            seen = visible;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(seen > 0, "the reading process saw the writer's data");
        let store = Store::open(dir.path()).unwrap();
        let w = store.open_writer(SHAPE, &options(None)).unwrap();
        let (lines, _) = read_all(&mut store.open_reader(SHAPE).unwrap(), None);
        let survived = committed_prefix(&lines);
        assert!(
            survived >= durable,
            "durable transaction {durable} lost, recovered {survived}"
        );
        assert_eq!(
            w.durable_offset(),
            Some(workload_txn(survived).last().unwrap().offset)
        );
        assert!(w.durable_offset() >= Some(LogOffset::new(durable, 0)));
    }
}

/// A transaction that spans several chunks gets their index entries in one write at the flush
/// after its commit. A power cut that keeps only a prefix of that write must not leave the first
/// chunks listed and the rest of the transaction gone: the log stays a prefix of whole
/// transactions.
#[test]
fn a_torn_index_append_never_exposes_part_of_a_transaction() {
    let _no_spawn = no_spawn();
    let dir = tempfile::tempdir().unwrap();
    let small = |plan| WriterOptions {
        chunk_bytes_max: 300,
        fault_plan: Some(plan),
        ..WriterOptions::default()
    };
    // Messages of ~150 bytes: transactions 5 and 6 (6 and 7 messages) span 3-4 chunks each.
    let write = |root: &Path, plan: Arc<FaultPlan>, txns: u64| -> Result<()> {
        let mut w = Store::open(root)?.create_shape(SHAPE, &small(plan))?;
        for t in 1..=txns {
            let txn = workload_txn(t);
            w.append(&txn.iter().map(Owned::as_message).collect::<Vec<_>>())?;
            w.commit()?;
            w.flush()?;
        }
        Ok(())
    };
    let (before, all) = (FaultPlan::unlimited(), FaultPlan::unlimited());
    write(&dir.path().join("before"), before.clone(), 4).unwrap();
    write(&dir.path().join("all"), all.clone(), 6).unwrap();
    for stop in before.boundaries()..all.boundaries() {
        for kept in [64, 150] {
            let root = dir.path().join(format!("stop-{stop}-{kept}"));
            let plan = FaultPlan::stop_at(stop);
            assert!(write(&root, plan.clone(), 6).is_err());
            plan.simulate_power_loss(false, |unsynced| unsynced.min(kept))
                .unwrap();
            let store = Store::open(&root).unwrap();
            drop(
                store
                    .open_writer(SHAPE, &small(FaultPlan::unlimited()))
                    .unwrap(),
            );
            let (lines, _) = read_all(&mut store.open_reader(SHAPE).unwrap(), None);
            assert!(
                committed_prefix(&lines) >= 4,
                "a durable transaction was lost"
            );
            std::fs::remove_dir_all(&root).unwrap();
        }
    }
}

/// A frame header whose magic survived but whose lengths are garbage (a torn write) ends the
/// journal replay like any other damaged frame, however large the lengths.
#[test]
fn a_frame_header_with_huge_lengths_ends_the_replay() {
    let _no_spawn = no_spawn();
    use std::os::unix::fs::FileExt;
    for (flags, lens) in [
        (3u32, [u64::MAX, 0, 0]),
        (0, [0, 2, u64::MAX]),
        (0, [u64::MAX - 1, 1, 40]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut w = store.create_shape(SHAPE, &options(None)).unwrap();
        let msgs = workload_txn(1);
        w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
            .unwrap();
        w.commit().unwrap();
        w.flush().unwrap();
        drop(w);
        let path = dir.path().join(SHAPE).join("0000000000.journal");
        let journal = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        // The first frame follows the 64-byte header; the damaged one goes right after it.
        let mut header = [0u8; 64];
        journal.read_exact_at(&mut header, 64).unwrap();
        let field = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().unwrap());
        let (json, keys, recs) = (field(32), field(40), field(48));
        let end = 64 + 64 + json + keys + recs;
        let mut damaged = [0u8; 64];
        damaged[0..4].copy_from_slice(b"SJFR");
        for (i, len) in lens.iter().enumerate() {
            damaged[32 + 8 * i..40 + 8 * i].copy_from_slice(&len.to_le_bytes());
        }
        damaged[56..60].copy_from_slice(&flags.to_le_bytes());
        journal.write_all_at(&damaged, end).unwrap();
        let w = store.open_writer(SHAPE, &options(None)).unwrap();
        assert_eq!(w.durable_offset(), msgs.last().map(|m| m.offset));
        let (lines, _) = read_all(&mut store.open_reader(SHAPE).unwrap(), None);
        assert_eq!(committed_prefix(&lines), 1);
    }
}

/// A close record is trusted only where a clean close puts it: at the end of a journal it cut
/// to end there. The same bytes at the end of a journal's allocated space (where a frame's
/// payload, made of client data, could put them) are ignored: recovery runs and keeps every
/// durable transaction.
#[test]
fn a_close_record_at_the_end_of_allocated_space_is_not_trusted() {
    let _no_spawn = no_spawn();
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let options = || WriterOptions {
        chunk_bytes_max: 1 << 20,
        ..WriterOptions::default()
    };
    let write = |w: &mut syncline_storage::Writer, txns: std::ops::RangeInclusive<u64>| {
        for t in txns {
            let msgs = workload_txn(t);
            w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
                .unwrap();
            w.commit().unwrap();
        }
        w.flush().unwrap()
    };
    let mut w = store.create_shape(SHAPE, &options()).unwrap();
    write(&mut w, 1..=5);
    w.close().unwrap();
    let journal_path = dir.path().join(SHAPE).join("0000000000.journal");
    let journal = std::fs::File::open(&journal_path).unwrap();
    let len = journal.metadata().unwrap().len();
    assert_ne!(
        len % (1 << 20),
        0,
        "a closed journal ends with its close record"
    );
    let mut record = [0u8; 64];
    journal.read_exact_at(&mut record, len - 64).unwrap();
    let mut w = store.open_writer(SHAPE, &options()).unwrap();
    let durable = write(&mut w, 6..=9);
    drop(w);
    let journal = std::fs::OpenOptions::new()
        .write(true)
        .open(&journal_path)
        .unwrap();
    let len = journal.metadata().unwrap().len();
    assert_eq!(
        len % (1 << 20),
        0,
        "an open journal is allocated in whole steps"
    );
    journal.write_all_at(&record, len - 64).unwrap();
    let w = store.open_writer(SHAPE, &options()).unwrap();
    assert_eq!(w.durable_offset(), durable, "durable transactions survive");
    let (lines, _) = read_all(&mut store.open_reader(SHAPE).unwrap(), None);
    assert_eq!(committed_prefix(&lines), 9);
}

/// Appends `msgs` to `w` as one transaction.
fn append_and_commit(w: &mut Writer, msgs: &[Owned]) {
    w.append(&msgs.iter().map(Owned::as_message).collect::<Vec<_>>())
        .unwrap();
    w.commit().unwrap();
}

/// Creates `shapes` in `store`, writes the workload's first transaction to each and makes it
/// durable through the group journal; returns their writers.
fn journaled_first_txn(store: &Store, opts: &WriterOptions, shapes: &[String]) -> Vec<Writer> {
    let mut writers: Vec<Writer> = shapes
        .iter()
        .map(|s| store.create_shape(s, opts).unwrap())
        .collect();
    let txn = workload_txn(1);
    for w in &mut writers {
        append_and_commit(w, &txn);
    }
    let mut group: Vec<&mut Writer> = writers.iter_mut().collect();
    for reported in flush_all(&mut group, GroupSync::Journal) {
        assert_eq!(reported.unwrap(), txn.last().map(|m| m.offset));
    }
    writers
}

/// A log journal started again at the same path (by recovery) never takes the group journal's
/// entries of the journal before it: replaying them would overwrite frames the new journal
/// made durable by its own sync.
#[test]
fn group_journal_entries_stay_with_their_journal() {
    let _no_spawn = no_spawn();
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::unlimited();
    let opts = options(Some(plan.clone()));
    let store = Store::open(dir.path()).unwrap();
    let mut writers = journaled_first_txn(&store, &opts, &["a".into(), "b".into()]);
    drop(writers.remove(0));
    let mut a = store.open_writer("a", &opts).unwrap();
    let second = workload_txn(2);
    append_and_commit(&mut a, &second[..1]);
    assert_eq!(a.flush().unwrap(), Some(second[0].offset));
    drop((a, writers, store));
    plan.simulate_power_loss(false, |_| 0).unwrap();
    let store = Store::open(dir.path()).unwrap();
    let a = store.open_writer("a", &options(None)).unwrap();
    assert_eq!(a.durable_offset(), Some(second[0].offset));
}

/// A group flush of enough logs that several threads write their buffers makes every one of
/// them durable: after a power cut that loses everything unsynced, each recovers its commit.
#[test]
fn a_large_group_flush_survives_a_power_cut_in_every_log() {
    let _no_spawn = no_spawn();
    const LOGS: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::unlimited();
    let store = Store::open(dir.path()).unwrap();
    let shapes: Vec<String> = (0..LOGS).map(|i| format!("log-{i}")).collect();
    let writers = journaled_first_txn(&store, &options(Some(plan.clone())), &shapes);
    drop((writers, store));
    plan.simulate_power_loss(false, |_| 0).unwrap();
    for i in 0..LOGS {
        check_recovery(dir.path(), &format!("log-{i}"), 1);
    }
}

/// Writer options under which a log's every byte stays in its tail chunk and is made durable
/// through the journal (the default bounds; `plan` as given).
fn journaled_options(plan: Option<Arc<FaultPlan>>) -> WriterOptions {
    WriterOptions {
        fault_plan: plan,
        ..WriterOptions::default()
    }
}

/// Bytes of entries one group flush of `txn` to `shapes` (new) writes into the group journal:
/// where the file's written bytes end (its unused end reads as zeros).
fn group_flush_bytes(shapes: &[String], txn: &[Owned]) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut writers: Vec<Writer> = shapes
        .iter()
        .map(|s| store.create_shape(s, &journaled_options(None)).unwrap())
        .collect();
    for w in &mut writers {
        append_and_commit(w, txn);
    }
    let mut group: Vec<&mut Writer> = writers.iter_mut().collect();
    for reported in flush_all(&mut group, GroupSync::Journal) {
        reported.unwrap();
    }
    let journal = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".group-journal")
        })
        .expect("a group flush creates the group journal");
    let bytes = std::fs::read(journal).unwrap();
    bytes
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |i| i as u64 + 1)
}

/// A checkpoint whose entries reach more log journals than it keeps open, over several
/// batches, writes and syncs every one of them: after the group journal started again and a
/// power cut lost everything unsynced, every log recovers every commit. (Each log's bytes are
/// durable only through its journal's frames: the tail never closes, its files are never
/// synced.)
#[test]
fn a_checkpoint_past_its_open_journals_makes_every_log_durable() {
    let _no_spawn = no_spawn();
    const TXNS: u64 = 4;
    let shapes: Vec<String> = (0..CHECKPOINT_OPEN_JOURNALS_MAX + 26)
        .map(|i| format!("log-{i}"))
        .collect();
    // The checkpoint comes at the third flush, and each flush is a batch of its own (a
    // checkpoint reads back an eighth of the bound at a time); the fourth flush is of the next
    // epoch, written over the start of the file, so that only the checkpoint keeps the first
    // three (no later checkpoint syncs the journals again).
    let per_flush = group_flush_bytes(&shapes, &workload_txn(1));
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::unlimited();
    let store = Store::open(dir.path())
        .unwrap()
        .with_group_journal_bytes_max(per_flush * 5 / 2);
    let mut writers: Vec<Writer> = shapes
        .iter()
        .map(|s| {
            store
                .create_shape(s, &journaled_options(Some(plan.clone())))
                .unwrap()
        })
        .collect();
    for t in 1..=TXNS {
        let txn = workload_txn(t);
        for w in &mut writers {
            append_and_commit(w, &txn);
        }
        let mut group: Vec<&mut Writer> = writers.iter_mut().collect();
        for reported in flush_all(&mut group, GroupSync::Journal) {
            assert_eq!(reported.unwrap(), txn.last().map(|m| m.offset));
        }
    }
    drop((writers, store));
    plan.simulate_power_loss(false, |_| 0).unwrap();
    let store = Store::open(dir.path()).unwrap();
    for shape in &shapes {
        assert_eq!(check_recovery_in(&store, shape, TXNS), TXNS);
    }
}

/// Bytes a group flush left unwritten are durable but unseen: a reader finds the commit only
/// once they are written, and after a power cut that loses everything unsynced (the chunk
/// files never had them) recovery finds every such commit.
#[test]
fn deferred_bytes_are_durable_and_read_once_written() {
    let _no_spawn = no_spawn();
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::unlimited();
    let opts = options(Some(plan.clone()));
    let store = Store::open(dir.path()).unwrap();
    let shapes = ["a".to_string(), "b".to_string()];
    let mut writers = journaled_first_txn(&store, &opts, &shapes);
    let first = workload_txn(1).last().map(|m| m.offset);
    let second = workload_txn(2);
    let two = second.last().map(|m| m.offset);
    for w in &mut writers {
        w.set_deferring(true);
        append_and_commit(w, &second[..2]);
    }
    let two_first = Some(second[1].offset);
    let mut group: Vec<&mut Writer> = writers.iter_mut().collect();
    for reported in flush_all(&mut group, GroupSync::Journal) {
        assert_eq!(reported.unwrap(), two_first);
    }
    for (w, shape) in writers.iter().zip(&shapes) {
        assert!(w.has_deferred());
        assert_eq!(w.readable_offset(), first);
        let end = store.open_reader(shape).unwrap().end().unwrap();
        assert_eq!(end.last_committed, first, "unwritten bytes are not read");
    }
    writers[0].write_deferred().unwrap();
    assert!(!writers[0].has_deferred());
    assert_eq!(writers[0].readable_offset(), two_first);
    let end = store.open_reader("a").unwrap().end().unwrap();
    assert_eq!(end.last_committed, two_first, "written bytes are read");
    // More of the transaction, deferred again on top of what is still unwritten in "b".
    for w in &mut writers {
        append_and_commit(w, &second[2..]);
    }
    let mut group: Vec<&mut Writer> = writers.iter_mut().collect();
    for reported in flush_all(&mut group, GroupSync::Journal) {
        assert_eq!(reported.unwrap(), two);
    }
    assert_eq!(writers[1].readable_offset(), first);
    drop((writers, store));
    plan.simulate_power_loss(false, |_| 0).unwrap();
    for shape in &shapes {
        check_recovery(dir.path(), shape, 2);
    }
}

/// A creation syncs nothing: a power cut before the writer's first flush takes the shape's
/// files, which deleting the shape then clears, and the first flush makes it durable.
#[test]
fn a_shape_is_durable_from_its_first_flush() {
    let _no_spawn = no_spawn();
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::unlimited();
    let store = Store::open(dir.path()).unwrap();
    let mut w = store
        .create_shape(SHAPE, &options(Some(plan.clone())))
        .unwrap();
    append_and_commit(&mut w, &workload_txn(1));
    drop((w, store));
    plan.simulate_power_loss(false, |_| 0).unwrap();
    let store = Store::open(dir.path()).unwrap();
    assert!(
        store.open_writer(SHAPE, &options(None)).is_err(),
        "the shape's files did not survive"
    );
    store.delete_shape(SHAPE).unwrap();
    assert!(store.list_shapes().unwrap().is_empty());

    let plan = FaultPlan::unlimited();
    let mut w = store
        .create_shape(SHAPE, &options(Some(plan.clone())))
        .unwrap();
    let txn = workload_txn(1);
    append_and_commit(&mut w, &txn);
    assert_eq!(w.flush().unwrap(), txn.last().map(|m| m.offset));
    drop((w, store));
    plan.simulate_power_loss(false, |_| 0).unwrap();
    check_recovery(dir.path(), SHAPE, 1);
}

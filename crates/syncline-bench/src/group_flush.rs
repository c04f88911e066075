//! `syncline-bench group-flush`: the time to make one small transaction durable in each of N
//! shape logs at once, as the pipeline's flush does after a write that touches N shapes: one
//! log flushed after the other (`GroupSync::EachLog`, the baseline) against every log's syncs
//! issued at once from up to 64 threads (`GroupSync::Concurrent`) and against the store's
//! group journal, one sync for all (`GroupSync::Journal`, the pipeline's policy), measured in
//! the same run, rounds taking turns.

use std::time::Instant;

use serde_json::{json, Map, Value};
use syncline_storage::{
    flush_all, GroupSync, LogOffset, Message, Operation, Store, Writer, WriterOptions,
    GROUP_FLUSH_MIN_LOGS,
};

use crate::electric::round3;
use crate::storage::{median, BenchError};

/// Numbers of logs flushed together.
const LOG_COUNTS: [usize; 9] = [1, 2, 4, 8, 16, 64, 256, 1024, 2048];
/// The policies compared, in the order their rounds take turns; the first is the baseline.
const POLICIES: [(GroupSync, &str); 3] = [
    (GroupSync::EachLog, "each_log_in_turn"),
    (GroupSync::Concurrent, "concurrent"),
    (GroupSync::Journal, "group_journal"),
];
/// Rounds per number of logs and per policy; medians are reported.
const ROUNDS: usize = 11;
/// The JSON of each log's one-message transaction per round (an Electric insert's size).
const MESSAGE: &[u8] = br#"{"key":"\"public\".\"users\"/\"00000000-0000-0000-0000-000000000001\"","value":{"id":"00000000-0000-0000-0000-000000000001","name":"user 1","email":"user1@example.com"},"headers":{"operation":"insert","lsn":"1","op_position":0}}"#;

/// Runs the scenario and returns its JSON.
pub fn run() -> Result<Value, BenchError> {
    let mut points = Vec::new();
    let mut figures = Map::new();
    for n in LOG_COUNTS {
        let work = tempfile::tempdir()?;
        let store = Store::open(work.path())?;
        let mut writers = (0..n)
            .map(|i| store.create_shape(&format!("log-{i}"), &WriterOptions::default()))
            .collect::<Result<Vec<Writer>, _>>()?;
        let mut times = vec![Vec::new(); POLICIES.len()];
        // One warm-up round per policy, then the policies take turns.
        for (round, tx) in (0..POLICIES.len() * (ROUNDS + 1)).zip(1u64..) {
            let policy = round % POLICIES.len();
            for w in &mut writers {
                let offset = LogOffset::new(tx, 0);
                w.append(&[Message {
                    offset,
                    key: b"k",
                    op: Operation::Insert,
                    json: MESSAGE,
                }])?;
                w.commit()?;
            }
            let started = Instant::now();
            let mut all: Vec<&mut Writer> = writers.iter_mut().collect();
            for result in flush_all(&mut all, POLICIES[policy].0) {
                assert_eq!(result?, Some(LogOffset::new(tx, 0)));
            }
            if round >= POLICIES.len() {
                times[policy].push(started.elapsed().as_secs_f64() * 1e3);
            }
        }
        let ms: Vec<f64> = times.iter_mut().map(|t| median(t)).collect();
        let mut figure = Map::new();
        let mut point = Map::new();
        point.insert("logs".into(), json!(n));
        for ((_, name), &m) in POLICIES.iter().zip(&ms) {
            figure.insert((*name).into(), json!(round3(m)));
            point.insert(format!("{name}_ms"), json!(round3(m)));
            point.insert(format!("{name}_speedup"), json!(round3(ms[0] / m)));
        }
        figures.insert(format!("flush_ms_at_{n}"), Value::Object(figure));
        points.push(Value::Object(point));
        eprintln!(
            "{n} logs: each in turn {:.3} ms, concurrent {:.3} ms, group journal {:.3} ms",
            ms[0], ms[1], ms[2]
        );
    }
    Ok(json!({
        "parameters": {
            "log_counts": LOG_COUNTS,
            "rounds": ROUNDS,
            "message_bytes": MESSAGE.len(),
            "group_flush_min_logs": GROUP_FLUSH_MIN_LOGS,
        },
        "policy": "each round appends and commits one message to every log, then flushes all \
            of them with syncline_storage::flush_all: each_log_in_turn (GroupSync::EachLog, \
            the baseline: Writer::flush per log, one fdatasync of its journal each, one after \
            the other), concurrent (GroupSync::Concurrent: every log written, then every \
            fdatasync issued at once from up to 64 threads, then each log marked durable) or \
            group_journal (GroupSync::Journal: every log written, every log journal's new \
            frames copied into the store's group journal, one fdatasync of it); medians of \
            the rounds, in milliseconds; *_speedup is each_log_in_turn's time over the \
            policy's",
        "figures": figures,
        "points": points,
    }))
}

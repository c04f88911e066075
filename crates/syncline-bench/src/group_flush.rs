//! `syncline-bench group-flush`: the time to make one small transaction durable in each of N
//! shape logs at once, as the pipeline's flush does after a write that touches N shapes: one
//! log flushed after the other (`GroupSync::EachLog`, the baseline) against every log's syncs
//! issued at once from up to 64 threads (`GroupSync::Concurrent`), measured in the same run,
//! rounds alternating between the two.

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
        let mut each = Vec::new();
        let mut group = Vec::new();
        // One warm-up round per policy, then the policies take turns.
        for (round, tx) in (0..2 * (ROUNDS + 1)).zip(1u64..) {
            let sync = if round % 2 == 0 {
                GroupSync::EachLog
            } else {
                GroupSync::Concurrent
            };
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
            for result in flush_all(&mut all, sync) {
                assert_eq!(result?, Some(LogOffset::new(tx, 0)));
            }
            let ms = started.elapsed().as_secs_f64() * 1e3;
            if round >= 2 {
                if sync == GroupSync::EachLog {
                    &mut each
                } else {
                    &mut group
                }
                .push(ms);
            }
        }
        let (each, group) = (median(&mut each), median(&mut group));
        figures.insert(
            format!("flush_ms_at_{n}"),
            json!({"each_log_in_turn": round3(each), "concurrent": round3(group)}),
        );
        points.push(json!({
            "logs": n,
            "each_log_in_turn_ms": round3(each),
            "concurrent_ms": round3(group),
            "speedup": round3(each / group),
        }));
        eprintln!("{n} logs: each in turn {each:.3} ms, concurrent {group:.3} ms");
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
            the other) or concurrent (GroupSync::Concurrent: every log written, then every \
            fdatasync issued at once from up to 64 threads, then each log marked durable); \
            medians of the rounds, in milliseconds",
        "figures": figures,
        "points": points,
    }))
}

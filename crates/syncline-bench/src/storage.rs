//! `syncline-bench storage`: the shape-log storage engine against what a Rust user would
//! otherwise pick (SQLite through rusqlite, and the fjall LSM tree), plus raw file baselines,
//! all measured in one run on the same machine; the harness writes `target/bench/storage.json`.
//!
//! Every engine sits behind [`ShapeLog`] with the same durability policy: each transaction is
//! durable (fdatasync'd) before the next one starts. Reads copy the response bytes into a buffer,
//! as a server without `sendfile` would; page caches are warm for every engine.

use std::error::Error;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use syncline_core::LogOffset;
use syncline_storage::{Message, Operation, Reader, Store, Writer, WriterOptions};

/// Errors of this scenario.
pub type BenchError = Box<dyn Error + Send + Sync>;
type Result<T, E = BenchError> = std::result::Result<T, E>;

/// Bytes of every message's JSON (Electric's messages are ~200 bytes).
const MESSAGE_BYTES: usize = 200;
/// Chunk threshold of the Syncline log the read figures use (reads are measured in chunks; at
/// the 10 MiB default, 200 readers of 10 chunks would copy 20 GB).
const READ_CHUNK_BYTES_MAX: u64 = 256 * 1024;
/// Transaction sizes (messages) and how many transactions each append figure times.
const APPEND_RUNS: [(usize, u64); 3] = [(1, 600), (20, 400), (1000, 100)];
/// Rounds the append figures are split into (engines take turns; medians are reported).
const APPEND_ROUNDS: u64 = 5;
/// 1000-message transactions in the log the read figures use (~25 MB, ~100 chunks).
const READ_LOG_TXNS: u64 = 128;
/// Random offsets each read figure averages over.
const READ_SAMPLES: usize = 200;
/// Readers started together in the concurrency figure.
const CONCURRENT_READERS: usize = 200;
/// Rounds of the concurrency figure (engines take turns; medians are reported).
const CONCURRENT_ROUNDS: usize = 3;

/// One message with its offset.
#[derive(Clone)]
struct Msg {
    offset: LogOffset,
    key: Vec<u8>,
    json: Vec<u8>,
}

/// A shape log built on some storage engine.
trait ShapeLog {
    /// Appends one transaction and returns once it is durable.
    fn append_durable(&mut self, txn: &[Msg]) -> Result<()>;
    /// A reader that may run on another thread.
    fn reader(&self) -> Result<Box<dyn ShapeLogReader>>;
}

/// Reads a shape log.
trait ShapeLogReader: Send {
    /// Appends to `out` the JSON of the `count` messages after `from`.
    fn read_messages(&mut self, from: LogOffset, count: usize, out: &mut Vec<u8>) -> Result<()>;
}

/// Runs the scenario and returns its JSON (the harness writes it to `target/bench/storage.json`).
pub fn run() -> Result<Value> {
    let work = tempfile::tempdir()?;
    let mut figures = Map::new();
    let mut baselines = Map::new();
    let mut ratios = Map::new();
    for (ops, txns) in APPEND_RUNS {
        let (name, mut tps) = append_figure(work.path(), ops, txns)?;
        let raw = tps.remove("raw_write_fdatasync").unwrap().as_f64().unwrap();
        ratios.insert(
            format!("append_{ops}_ratio_vs_raw"),
            json!(raw / tps["syncline"].as_f64().unwrap()),
        );
        baselines.insert(format!("raw_write_fdatasync_txn_{ops}_ops"), json!(raw));
        figures.insert(name, json!(tps));
    }
    let tps_1000 = &figures["append_txn_1000_ops"];
    let best_peer = tps_1000["sqlite"]
        .as_f64()
        .unwrap()
        .max(tps_1000["fjall"].as_f64().unwrap());
    figures.insert(
        "append_1000_speedup_vs_best_peer".into(),
        json!(tps_1000["syncline"].as_f64().unwrap() / best_peer),
    );
    figures.insert(
        "append_ratio_vs_raw".into(),
        ratios["append_1000_ratio_vs_raw"].clone(),
    );
    read_figures(work.path(), &mut figures, &mut baselines)?;
    let result = json!({
        "scenario": "storage",
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "parameters": {
            "message_bytes": MESSAGE_BYTES,
            "append_chunk_bytes_max": syncline_storage::CHUNK_BYTES_MAX_DEFAULT,
            "read_chunk_bytes_max": READ_CHUNK_BYTES_MAX,
            "append_rounds": APPEND_ROUNDS,
            "append_runs": APPEND_RUNS.iter().map(|(ops, txns)| json!({"ops_per_txn": ops, "txns": txns})).collect::<Vec<_>>(),
            "read_log_txns": READ_LOG_TXNS,
            "read_log_ops_per_txn": 1000,
            "read_samples": READ_SAMPLES,
            "concurrent_readers": CONCURRENT_READERS,
            "concurrent_rounds": CONCURRENT_ROUNDS,
            "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        },
        "durability_policy": "every transaction is durable before the next starts: syncline flush() \
            (fdatasync of data, index, directory as needed); SQLite WAL with synchronous=FULL (WAL \
            synced at each commit); fjall write batch committed with PersistMode::SyncData",
        "read_policy": "response bytes copied into a user buffer (pread / row values); warm page cache",
        "units": {"append_*": "transactions per second", "read_*_chunks": "mean microseconds per read",
            "concurrent_*": "milliseconds wall time for all readers", "*_ratio_vs_raw": "engine time / raw time"},
        "figures": figures,
        "baselines": baselines,
        "ratios": ratios,
        "goals": {"append_1000_speedup_vs_best_peer": ">= 10", "read_10_speedup_vs_best_peer": ">= 10",
            "append_ratio_vs_raw": "<= 1.5", "read_ratio_vs_raw": "<= 1.5"},
    });
    Ok(result)
}

/// A message of ~200 bytes of Electric-like JSON, padded to exactly [`MESSAGE_BYTES`].
fn message(tx: u64, op: u64) -> Msg {
    let id = tx * 10_000 + op;
    let key = format!("\"public\".\"items\"/\"{id}\"");
    let mut json = format!(
        r#"{{"key":"\"public\".\"items\"/\"{id}\"","value":{{"id":"{id}","title":"item {id}","n":"{op}"}},"headers":{{"operation":"insert","relation":["public","items"]}},"pad":""#
    );
    let pad = MESSAGE_BYTES - json.len() - 3;
    json.push_str(&"x".repeat(pad));
    json.push_str("\"}\n");
    assert_eq!(json.len(), MESSAGE_BYTES);
    Msg {
        offset: LogOffset::new(tx, op * 2),
        key: key.into_bytes(),
        json: json.into_bytes(),
    }
}

fn transaction(tx: u64, ops: usize) -> Vec<Msg> {
    (0..ops as u64).map(|op| message(tx, op)).collect()
}

/// The three engines, each in its own directory under `dir`; Syncline with chunks closing at
/// `chunk_bytes_max`.
fn engines(dir: &Path, chunk_bytes_max: u64) -> Result<Vec<(&'static str, Box<dyn ShapeLog>)>> {
    Ok(vec![
        (
            "syncline",
            Box::new(SynclineLog::create(&dir.join("syncline"), chunk_bytes_max)?)
                as Box<dyn ShapeLog>,
        ),
        (
            "sqlite",
            Box::new(SqliteLog::create(&dir.join("sqlite.db"))?),
        ),
        ("fjall", Box::new(FjallLog::create(&dir.join("fjall"))?)),
    ])
}

/// `append_txn_<ops>_ops`: durable transactions per second for each engine and for the raw
/// baseline. The engines take turns in `APPEND_ROUNDS` rounds and each figure is the median of
/// its rounds, so that disk contention from other work on the machine hits all alike.
fn append_figure(work: &Path, ops: usize, txns: u64) -> Result<(String, Map<String, Value>)> {
    let dir = work.join(format!("append-{ops}"));
    let mut logs = engines(&dir, syncline_storage::CHUNK_BYTES_MAX_DEFAULT)?;
    logs.push((
        "raw_write_fdatasync",
        Box::new(RawLog::create(&dir.join("raw.json"))?),
    ));
    let per_round = txns / APPEND_ROUNDS;
    let mut rounds: Vec<Vec<f64>> = vec![Vec::new(); logs.len()];
    for round in 0..APPEND_ROUNDS {
        let first_tx = 1 + round * per_round;
        let batches: Vec<Vec<Msg>> = (first_tx..first_tx + per_round)
            .map(|tx| transaction(tx, ops))
            .collect();
        for ((_, log), rates) in logs.iter_mut().zip(&mut rounds) {
            let start = Instant::now();
            for txn in &batches {
                log.append_durable(txn)?;
            }
            rates.push(per_round as f64 / start.elapsed().as_secs_f64());
        }
    }
    let mut tps = Map::new();
    for ((name, _), rates) in logs.iter().zip(&mut rounds) {
        tps.insert((*name).into(), json!(median(rates)));
    }
    drop(logs);
    fs::remove_dir_all(&dir)?;
    Ok((format!("append_txn_{ops}_ops"), tps))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The raw baseline: the same JSON bytes appended to one file with `write` + `fdatasync`.
struct RawLog {
    file: File,
}

impl RawLog {
    fn create(path: &Path) -> Result<Self> {
        Ok(RawLog {
            file: OpenOptions::new()
                .create_new(true)
                .append(true)
                .open(path)?,
        })
    }
}

impl ShapeLog for RawLog {
    fn append_durable(&mut self, txn: &[Msg]) -> Result<()> {
        let bytes: Vec<u8> = txn.iter().flat_map(|m| m.json.iter().copied()).collect();
        self.file.write_all(&bytes)?;
        self.file.sync_data()?;
        Ok(())
    }

    fn reader(&self) -> Result<Box<dyn ShapeLogReader>> {
        Err("the raw baseline is read with raw_read".into())
    }
}

/// `read_{5,10}_chunks`, the speedup, the raw read baseline and `concurrent_200_readers_10_chunks`.
fn read_figures(
    work: &Path,
    figures: &mut Map<String, Value>,
    baselines: &mut Map<String, Value>,
) -> Result<()> {
    let dir = work.join("read");
    let logs = build_read_logs(&dir)?;
    let offsets = sample_offsets(READ_SAMPLES, 0x5eed);
    for chunks in [5usize, 10] {
        let mut means = read_latency_us(&dir, &logs, &offsets, chunks)?;
        let raw_mean = means.remove("raw_pread").unwrap().as_f64().unwrap();
        baselines.insert(format!("raw_pread_{chunks}_chunks_us"), json!(raw_mean));
        if chunks == 10 {
            let ours = means["syncline"].as_f64().unwrap();
            let best_peer = means["sqlite"]
                .as_f64()
                .unwrap()
                .min(means["fjall"].as_f64().unwrap());
            figures.insert(
                "read_10_speedup_vs_best_peer".into(),
                json!(best_peer / ours),
            );
            figures.insert("read_ratio_vs_raw".into(), json!(ours / raw_mean));
        }
        figures.insert(format!("read_{chunks}_chunks"), Value::Object(means));
    }
    figures.insert(
        "concurrent_200_readers_10_chunks".into(),
        concurrent_figure(&dir, &logs, &offsets)?,
    );
    drop(logs);
    fs::remove_dir_all(&dir)?;
    Ok(())
}

/// The same log of `READ_LOG_TXNS` 1000-message transactions in every engine, and as one flat
/// file (`raw.json`) for the raw baseline.
fn build_read_logs(dir: &Path) -> Result<Vec<(&'static str, Box<dyn ShapeLog>)>> {
    let mut logs = engines(dir, READ_CHUNK_BYTES_MAX)?;
    let mut raw = File::create(dir.join("raw.json"))?;
    for tx in 1..=READ_LOG_TXNS {
        let txn = transaction(tx, 1000);
        for (_, log) in logs.iter_mut() {
            log.append_durable(&txn)?;
        }
        raw.write_all(&txn.iter().flat_map(|m| m.json.clone()).collect::<Vec<_>>())?;
    }
    raw.sync_data()?;
    Ok(logs)
}

/// Mean microseconds per read of `chunks` Syncline chunks from each offset, and of the same
/// messages from every peer and the raw file. Engines take turns on each offset, so that
/// interference from other work on the machine hits all alike.
fn read_latency_us(
    dir: &Path,
    logs: &[(&'static str, Box<dyn ShapeLog>)],
    offsets: &[LogOffset],
    chunks: usize,
) -> Result<Map<String, Value>> {
    let mut syncline = SynclineLog::open_reader(&dir.join("syncline"))?;
    let mut peers: Vec<(&str, Box<dyn ShapeLogReader>)> = Vec::new();
    for (name, log) in logs.iter().skip(1) {
        peers.push((name, log.reader()?));
    }
    peers.push((
        "raw_pread",
        Box::new(RawReader(File::open(dir.join("raw.json"))?)),
    ));
    let mut totals = vec![Duration::ZERO; peers.len() + 1];
    for &from in offsets {
        let mut out = Vec::with_capacity(chunks * (READ_CHUNK_BYTES_MAX as usize + MESSAGE_BYTES));
        let start = Instant::now();
        let count = syncline.read_chunks(from, chunks, &mut out)?;
        totals[0] += start.elapsed();
        for ((_, reader), total) in peers.iter_mut().zip(&mut totals[1..]) {
            let mut theirs = Vec::with_capacity(out.len());
            let start = Instant::now();
            reader.read_messages(from, count, &mut theirs)?;
            *total += start.elapsed();
            assert_eq!(theirs, out, "every engine reads the same bytes");
        }
    }
    let mean = |d: Duration| json!(d.as_secs_f64() * 1e6 / offsets.len() as f64);
    let mut means = Map::new();
    means.insert("syncline".into(), mean(totals[0]));
    for ((name, _), total) in peers.iter().zip(&totals[1..]) {
        means.insert((*name).into(), mean(*total));
    }
    Ok(means)
}

/// `CONCURRENT_READERS` threads, released together, each reading 10 chunks' worth from its
/// own random offset; median wall time in milliseconds per engine over `CONCURRENT_ROUNDS`.
fn concurrent_figure(
    dir: &Path,
    logs: &[(&'static str, Box<dyn ShapeLog>)],
    offsets: &[LogOffset],
) -> Result<Value> {
    let mut syncline = SynclineLog::open_reader(&dir.join("syncline"))?;
    let starts: Vec<LogOffset> = (0..CONCURRENT_READERS)
        .map(|i| offsets[i % offsets.len()])
        .collect();
    let counts = starts
        .iter()
        .map(|&o| syncline.read_chunks(o, 10, &mut Vec::new()))
        .collect::<Result<Vec<_>>>()?;
    let mut rounds: Vec<Vec<f64>> = vec![Vec::new(); logs.len()];
    for _ in 0..CONCURRENT_ROUNDS {
        for ((_, log), times) in logs.iter().zip(&mut rounds) {
            let readers = (0..CONCURRENT_READERS)
                .map(|_| log.reader())
                .collect::<Result<Vec<_>>>()?;
            times.push(run_concurrently(readers, &starts, &counts)?.as_secs_f64() * 1e3);
        }
    }
    let mut times = Map::new();
    for ((name, _), ms) in logs.iter().zip(&mut rounds) {
        times.insert((*name).into(), json!(median(ms)));
    }
    Ok(Value::Object(times))
}

fn run_concurrently(
    readers: Vec<Box<dyn ShapeLogReader>>,
    starts: &[LogOffset],
    counts: &[usize],
) -> Result<Duration> {
    let barrier = Arc::new(Barrier::new(readers.len() + 1));
    let handles: Vec<_> = readers
        .into_iter()
        .enumerate()
        .map(|(i, mut reader)| {
            let (barrier, from, count) = (Arc::clone(&barrier), starts[i], counts[i]);
            std::thread::spawn(move || -> Result<usize> {
                let mut out = Vec::with_capacity(count * MESSAGE_BYTES);
                barrier.wait();
                reader.read_messages(from, count, &mut out)?;
                Ok(out.len())
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for (h, &count) in handles.into_iter().zip(counts) {
        let len = h.join().map_err(|_| "reader thread panicked")??;
        assert_eq!(len, count * MESSAGE_BYTES);
    }
    Ok(start.elapsed())
}

/// Deterministic pseudo-random message offsets inside the read log, away from its end.
fn sample_offsets(n: usize, mut seed: u64) -> Vec<LogOffset> {
    (0..n)
        .map(|_| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let tx = 1 + (seed >> 33) % (READ_LOG_TXNS * 3 / 4);
            let op = (seed >> 20) % 1000;
            LogOffset::new(tx, op * 2)
        })
        .collect()
}

/// The raw read baseline: the same bytes from one flat file with a single `pread` (every message
/// has the same size, so the position of the message after `from` is computed).
struct RawReader(File);

impl ShapeLogReader for RawReader {
    fn read_messages(&mut self, from: LogOffset, count: usize, out: &mut Vec<u8>) -> Result<()> {
        let index = (from.tx - 1) * 1000 + from.op / 2 + 1;
        out.resize(count * MESSAGE_BYTES, 0);
        self.0.read_exact_at(out, index * MESSAGE_BYTES as u64)?;
        Ok(())
    }
}

/// The engine under test.
struct SynclineLog {
    store: Store,
    writer: Writer,
}

impl SynclineLog {
    fn create(dir: &Path, chunk_bytes_max: u64) -> Result<Self> {
        let store = Store::open(dir)?;
        let options = WriterOptions {
            chunk_bytes_max,
            ..WriterOptions::default()
        };
        let writer = store.create_shape("bench", &options)?;
        Ok(SynclineLog { store, writer })
    }

    fn open_reader(dir: &Path) -> Result<SynclineReader> {
        Ok(SynclineReader(
            Store::open_read_only(dir)?.open_reader("bench")?,
        ))
    }
}

impl ShapeLog for SynclineLog {
    fn append_durable(&mut self, txn: &[Msg]) -> Result<()> {
        let msgs: Vec<Message<'_>> = txn
            .iter()
            .map(|m| Message {
                offset: m.offset,
                key: &m.key,
                op: Operation::Insert,
                json: &m.json,
            })
            .collect();
        self.writer.append(&msgs)?;
        self.writer.commit()?;
        self.writer.flush()?;
        Ok(())
    }

    fn reader(&self) -> Result<Box<dyn ShapeLogReader>> {
        Ok(Box::new(SynclineReader(self.store.open_reader("bench")?)))
    }
}

/// A Syncline reader; reads whole chunks, as the server does.
struct SynclineReader(Reader);

impl SynclineReader {
    /// Reads `chunks` responses from `from` into `out`; returns the messages read.
    fn read_chunks(&mut self, from: LogOffset, chunks: usize, out: &mut Vec<u8>) -> Result<usize> {
        let before = out.len();
        self.read_responses(from, chunks, usize::MAX, out)?;
        Ok((out.len() - before) / MESSAGE_BYTES)
    }

    /// Appends whole responses from `from` to `out` until `chunks` responses were read, `out`
    /// holds `bytes_max` bytes, or the log is read to its end.
    fn read_responses(
        &mut self,
        from: LogOffset,
        chunks: usize,
        bytes_max: usize,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let mut at = Some(from);
        for _ in 0..chunks {
            let r = self.0.read(at)?;
            if let Some(body) = r.body {
                let start = out.len();
                out.resize(start + body.len as usize, 0);
                body.file.read_exact_at(&mut out[start..], body.start)?;
            }
            at = r.end_offset;
            if r.up_to_date || out.len() >= bytes_max {
                break;
            }
        }
        Ok(())
    }
}

impl ShapeLogReader for SynclineReader {
    fn read_messages(&mut self, from: LogOffset, count: usize, out: &mut Vec<u8>) -> Result<()> {
        let bytes_max = count.saturating_mul(MESSAGE_BYTES);
        self.read_responses(from, usize::MAX, bytes_max, out)?;
        out.truncate(bytes_max.min(out.len()));
        Ok(())
    }
}

/// SQLite in WAL mode, one row per message keyed by offset.
struct SqliteLog {
    path: PathBuf,
    conn: rusqlite::Connection,
}

impl SqliteLog {
    fn create(path: &Path) -> Result<Self> {
        fs::create_dir_all(path.parent().unwrap())?;
        let conn = rusqlite::Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(
            "CREATE TABLE log (tx INTEGER NOT NULL, op INTEGER NOT NULL, key BLOB NOT NULL, \
             kind INTEGER NOT NULL, json BLOB NOT NULL, PRIMARY KEY (tx, op)) WITHOUT ROWID",
        )?;
        Ok(SqliteLog {
            path: path.to_path_buf(),
            conn,
        })
    }
}

impl ShapeLog for SqliteLog {
    fn append_durable(&mut self, txn: &[Msg]) -> Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO log (tx, op, key, kind, json) VALUES (?1, ?2, ?3, 1, ?4)",
            )?;
            for m in txn {
                insert.execute(rusqlite::params![
                    m.offset.tx as i64,
                    m.offset.op as i64,
                    m.key,
                    m.json
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn reader(&self) -> Result<Box<dyn ShapeLogReader>> {
        let flags =
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        Ok(Box::new(SqliteReader(
            rusqlite::Connection::open_with_flags(&self.path, flags)?,
        )))
    }
}

struct SqliteReader(rusqlite::Connection);

impl ShapeLogReader for SqliteReader {
    fn read_messages(&mut self, from: LogOffset, count: usize, out: &mut Vec<u8>) -> Result<()> {
        let mut select = self.0.prepare_cached(
            "SELECT json FROM log WHERE (tx, op) > (?1, ?2) ORDER BY tx, op LIMIT ?3",
        )?;
        let mut rows = select.query(rusqlite::params![
            from.tx as i64,
            from.op as i64,
            count as i64
        ])?;
        while let Some(row) = rows.next()? {
            out.extend_from_slice(row.get_ref(0)?.as_blob()?);
        }
        Ok(())
    }
}

/// The fjall LSM tree: key = offset (big-endian tx, op), value = kind, key length, key, JSON.
struct FjallLog {
    db: fjall::Database,
    log: fjall::Keyspace,
}

impl FjallLog {
    fn create(dir: &Path) -> Result<Self> {
        let db = fjall::Database::builder(dir).open()?;
        let log = db.keyspace("log", fjall::KeyspaceCreateOptions::default)?;
        Ok(FjallLog { db, log })
    }
}

fn fjall_key(offset: LogOffset) -> [u8; 16] {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&offset.tx.to_be_bytes());
    key[8..].copy_from_slice(&offset.op.to_be_bytes());
    key
}

impl ShapeLog for FjallLog {
    fn append_durable(&mut self, txn: &[Msg]) -> Result<()> {
        let mut batch = self
            .db
            .batch()
            .durability(Some(fjall::PersistMode::SyncData));
        for m in txn {
            let mut value = Vec::with_capacity(5 + m.key.len() + m.json.len());
            value.push(1);
            value.extend_from_slice(&(m.key.len() as u32).to_le_bytes());
            value.extend_from_slice(&m.key);
            value.extend_from_slice(&m.json);
            batch.insert(&self.log, fjall_key(m.offset), value);
        }
        batch.commit()?;
        Ok(())
    }

    fn reader(&self) -> Result<Box<dyn ShapeLogReader>> {
        Ok(Box::new(FjallReader(self.log.clone())))
    }
}

struct FjallReader(fjall::Keyspace);

impl ShapeLogReader for FjallReader {
    fn read_messages(&mut self, from: LogOffset, count: usize, out: &mut Vec<u8>) -> Result<()> {
        let after = fjall_key(LogOffset::new(from.tx, from.op + 1));
        for kv in self.0.range(after..).take(count) {
            let (_, value) = kv.into_inner()?;
            let key_len = u32::from_le_bytes(value[1..5].try_into()?) as usize;
            out.extend_from_slice(&value[5 + key_len..]);
        }
        Ok(())
    }
}

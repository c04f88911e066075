//! `syncline-bench storage`: the shape-log storage engine against what a Rust user would
//! otherwise pick (SQLite through rusqlite, and the fjall LSM tree), plus raw file baselines,
//! all measured in one run on the same machine; the harness writes `target/bench/storage.json`.
//!
//! Appends: every engine sits behind [`ShapeLog`] and runs under two durability policies,
//! applied alike to all: each transaction durable before the next starts, and the server's
//! batched policy (one flush once [`FLUSH_DELAY_MAX`] has passed since the first unflushed
//! commit). Reads: every engine produces response bodies into a [`Sink`], a pipe drained to
//! `/dev/null` standing in for a client socket, so each pays what a server pays to get the
//! bytes out: Syncline `sendfile`s its file ranges (and, separately, as `syncline-server` does
//! today: ranges up to 256 KiB read, larger ones memory-mapped, then written), the peers query
//! rows and write the assembled bytes. Page caches are warm for every engine. Syncline alone:
//! what listing each response's messages from the records adds to a read, and what closing and
//! reopening a shape's writer and reader cost (a server keeps only recently used ones open).

use std::error::Error;
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, IoSlice, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use syncline_core::LogOffset;
use syncline_storage::{
    FileRange, Message, Messages, Operation, Reader, Store, Writer, WriterOptions,
};

/// Errors of this scenario.
pub type BenchError = Box<dyn Error + Send + Sync>;
type Result<T, E = BenchError> = std::result::Result<T, E>;

/// Bytes of every message's JSON (Electric's messages are ~200 bytes).
const MESSAGE_BYTES: usize = 200;
/// Chunk threshold of the Syncline log the read figures use (reads are measured in chunks; at
/// the 10 MiB default, the peers' 200 readers of 10 chunks would copy 20 GB; the default size is
/// measured for Syncline and the raw file alone).
const READ_CHUNK_BYTES_MAX: u64 = 256 * 1024;
/// Transaction sizes (messages) and how many transactions each durable-per-transaction append
/// figure times.
const APPEND_RUNS: [(usize, u64); 3] = [(1, 2700), (20, 1800), (1000, 900)];
/// Transaction sizes and how many transactions each batched append figure times.
const BATCHED_APPEND_RUNS: [(usize, u64); 3] = [(1, 1_800_000), (20, 135_000), (1000, 2700)];
/// The batched policy's flush interval: `syncline-server` flushes every touched shape log once
/// commits have waited this long (`FLUSH_DELAY_MAX` in `crates/syncline-server/src/pipeline`).
const FLUSH_DELAY_MAX: Duration = Duration::from_millis(10);
/// Rounds the append figures are split into (engines take turns; medians are reported).
const APPEND_ROUNDS: u64 = 9;
/// 1000-message transactions in the log the read figures use (~25 MB, ~100 chunks).
const READ_LOG_TXNS: u64 = 128;
/// Random offsets each read figure averages over.
const READ_SAMPLES: usize = 200;
/// 1000-message transactions in the log read with the default 10 MiB chunks (~120 MB, 11
/// chunks), Syncline against the raw file only (the peers would copy 100 MB per read).
const DEFAULT_CHUNK_LOG_TXNS: u64 = 600;
/// Transactions of that log's first chunk, where its reads start.
const DEFAULT_CHUNK_FIRST_TXNS: u64 = 45;
/// Random offsets the default-chunk read figure averages over.
const DEFAULT_CHUNK_SAMPLES: usize = 20;
/// Readers started together in the concurrency figure.
const CONCURRENT_READERS: usize = 200;
/// Rounds of the concurrency figure (engines take turns; medians are reported).
const CONCURRENT_ROUNDS: usize = 3;
/// Size asked for each sink's pipe (the kernel may grant less; the granted size is reported).
const SINK_PIPE_BYTES: usize = 1024 * 1024;
/// Ranges up to this size are read into memory by `syncline-server`, larger ones memory-mapped
/// (`READ_RANGE_BYTES_MAX` in `crates/syncline-server/src/http/body.rs`).
const SERVER_READ_RANGE_BYTES_MAX: u64 = 256 * 1024;
/// 1000-message transactions in the large log of the reopen figures (~25 MB: two closed chunks
/// of the default 10 MiB and a ~5 MB tail).
const REOPEN_LARGE_TXNS: u64 = 125;
/// Rows of the small log of the reopen figures (a 500-row shape, ~100 KB, all in its tail).
const REOPEN_SMALL_ROWS: usize = 500;
/// Rounds each reopen figure takes the median of.
const REOPEN_ROUNDS: usize = 21;

/// One message with its offset.
#[derive(Clone)]
struct Msg {
    offset: LogOffset,
    key: Vec<u8>,
    json: Vec<u8>,
}

/// A shape log built on some storage engine.
trait ShapeLog {
    /// Appends one transaction; it is durable once [`ShapeLog::flush`] returns.
    fn append(&mut self, txn: &[Msg]) -> Result<()>;
    /// Makes every appended transaction durable.
    fn flush(&mut self) -> Result<()>;
    /// A reader that may run on another thread.
    fn reader(&self) -> Result<Box<dyn ShapeLogReader>>;
}

/// Reads a shape log the way a server answers requests.
trait ShapeLogReader: Send {
    /// Sends the response bodies holding the `count` messages after `from` into `sink`.
    fn send(&mut self, from: LogOffset, count: usize, sink: &mut Sink) -> Result<()>;
    /// The bytes [`ShapeLogReader::send`] sends (to check every engine serves the same bytes).
    fn bytes(&mut self, from: LogOffset, count: usize) -> Result<Vec<u8>>;
}

/// A peer engine's reader: it queries the rows and assembles the response body in a buffer,
/// which is then written to the sink (no zero-copy path).
trait PeerReader: Send {
    /// Assembles the body holding the `count` messages after `from`.
    fn query(&mut self, from: LogOffset, count: usize) -> Result<()>;
    /// The body the last [`PeerReader::query`] assembled.
    fn body(&self) -> &[u8];
}

impl<T: PeerReader> ShapeLogReader for T {
    fn send(&mut self, from: LogOffset, count: usize, sink: &mut Sink) -> Result<()> {
        self.query(from, count)?;
        sink.write(self.body())
    }

    fn bytes(&mut self, from: LogOffset, count: usize) -> Result<Vec<u8>> {
        self.query(from, count)?;
        Ok(self.body().to_vec())
    }
}

/// When transactions become durable.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Durability {
    /// Each transaction is flushed before the next is appended.
    PerTransaction,
    /// A flush once [`FLUSH_DELAY_MAX`] has passed since the first unflushed append, and at
    /// the end.
    Batched,
}

/// Runs the scenario and returns its JSON (the harness writes it to `target/bench/storage.json`).
pub fn run() -> Result<Value> {
    let work = tempfile::tempdir()?;
    let mut figures = Map::new();
    let mut baselines = Map::new();
    let mut ratios = Map::new();
    let mut txns_per_flush = Map::new();
    for (durability, runs, suffix) in [
        (Durability::PerTransaction, APPEND_RUNS, ""),
        (Durability::Batched, BATCHED_APPEND_RUNS, "_batched"),
    ] {
        for (ops, txns) in runs {
            let (mut tps, flushes) = append_figure(work.path(), ops, txns, durability)?;
            let raw = tps.remove("raw_write_fdatasync").unwrap().as_f64().unwrap();
            ratios.insert(
                format!("append_{ops}{suffix}_ratio_vs_raw"),
                json!(raw / tps["syncline"].as_f64().unwrap()),
            );
            baselines.insert(
                format!("raw_write_fdatasync_txn_{ops}_ops{suffix}"),
                json!(raw),
            );
            if durability == Durability::Batched {
                txns_per_flush.insert(format!("append_txn_{ops}_ops_batched"), flushes);
            }
            figures.insert(format!("append_txn_{ops}_ops{suffix}"), json!(tps));
        }
        let tps_1000 = &figures[&format!("append_txn_1000_ops{suffix}")];
        let best_peer = tps_1000["sqlite"]
            .as_f64()
            .unwrap()
            .max(tps_1000["fjall"].as_f64().unwrap());
        figures.insert(
            format!("append_1000{suffix}_speedup_vs_best_peer"),
            json!(tps_1000["syncline"].as_f64().unwrap() / best_peer),
        );
        figures.insert(
            format!("append{suffix}_ratio_vs_raw"),
            ratios[&format!("append_1000{suffix}_ratio_vs_raw")].clone(),
        );
    }
    let sink_pipe_bytes = Sink::new()?.capacity;
    read_figures(work.path(), &mut figures, &mut baselines, &mut ratios)?;
    default_chunk_read_figure(work.path(), &mut figures, &mut baselines)?;
    reopen_figures(work.path(), &mut figures)?;
    let result = json!({
        "scenario": "storage",
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "parameters": {
            "message_bytes": MESSAGE_BYTES,
            "append_chunk_bytes_max": syncline_storage::CHUNK_BYTES_MAX_DEFAULT,
            "read_chunk_bytes_max": READ_CHUNK_BYTES_MAX,
            "append_rounds": APPEND_ROUNDS,
            "append_runs": runs_json(&APPEND_RUNS),
            "batched_append_runs": runs_json(&BATCHED_APPEND_RUNS),
            "batched_flush_delay_max_ms": FLUSH_DELAY_MAX.as_secs_f64() * 1e3,
            "read_log_txns": READ_LOG_TXNS,
            "read_log_ops_per_txn": 1000,
            "read_samples": READ_SAMPLES,
            "default_chunk_log_txns": DEFAULT_CHUNK_LOG_TXNS,
            "default_chunk_samples": DEFAULT_CHUNK_SAMPLES,
            "concurrent_readers": CONCURRENT_READERS,
            "concurrent_rounds": CONCURRENT_ROUNDS,
            "sink_pipe_bytes": sink_pipe_bytes,
            "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        },
        "durability_policy": {
            "append_txn_*_ops": "every transaction is durable before the next starts: syncline \
                append + commit + flush() (fdatasync of the journal and of the chunk files \
                written in place, started together; at chunk ends also the chunk files, \
                directory and index); SQLite WAL with synchronous=FULL, one SQL transaction per \
                transaction (WAL synced at each commit); fjall one write batch per transaction \
                committed with PersistMode::SyncData; raw: the JSON written (buffered in 64 KiB, \
                larger transactions with one writev) + fdatasync",
            "append_txn_*_ops_batched": "the server's policy, alike for every engine: each \
                transaction appended and committed as it comes, one flush once 10 ms have \
                passed since the first unflushed commit, and at the end: syncline commit per \
                transaction, flush() per batch; SQLite (WAL, synchronous=FULL) one SQL \
                transaction per batch; fjall one write batch per transaction without \
                durability, Database::persist(PersistMode::SyncData) per batch; raw: the JSON \
                written as above, fdatasync per batch",
        },
        "read_policy": "each read produces the response bodies holding the messages after a \
            random offset into a sink: a pipe of sink_pipe_bytes, spliced to /dev/null after \
            every write into it (standing in for a client socket; draining is timed). syncline: \
            Reader::read per response (locate the chunk and message) and sendfile of the file \
            range into the pipe; syncline_mmap: as crates/syncline-server/src/http/body.rs does \
            today, ranges up to 256 KiB pread into a new buffer, larger ones mmap'd, then \
            written into the pipe and unmapped; sqlite / fjall: range query of the messages, \
            JSON appended to a buffer reused across reads, written into the pipe; raw_sendfile: \
            sendfile of the same bytes from one flat file; raw_read: pread of the same bytes \
            into a reused buffer, then written into the pipe. Warm page cache and block caches; \
            read_N_chunks reads N whole Syncline responses, the others the same messages; \
            read_10_default_chunks: the same with chunks of the default 10 MiB, syncline and \
            raw_sendfile only",
        "reopen_policy": "reopen_{small,large}: a 500-row shape (~100 KB, all in its tail) and \
            a ~25 MB one (two closed 10 MiB chunks and a ~5 MB tail), default options; median \
            of rounds. writer_open_after_close_us: Store::open_writer of a log Writer::close \
            left; writer_open_recovering_us: the same after a writer was dropped after a flush \
            (recovery: journal replay, tail scan, fresh journal); writer_close_after_write_us: \
            Writer::close after one 1-message transaction was flushed (syncs the tail's files); \
            writer_close_unchanged_us: Writer::close of a writer that wrote nothing; \
            reader_open_and_read_us: Store::open_reader and a first read at the log's end (no \
            body); reader_read_us: the same read by that reader again. descriptors_*: counted \
            in /proc/self/fd",
        "units": {"append_*": "transactions per second", "read_*_chunks": "mean microseconds per read",
            "reopen_*_us": "median microseconds", "descriptors_*": "file descriptors",
            "list_messages_10_chunks": "mean microseconds per 10 responses located (read_us, read_messages_us)",
            "concurrent_*": "milliseconds wall time for all readers", "*_ratio_vs_raw": "engine time / raw time",
            "batched_txns_per_flush": "transactions per flush, per engine"},
        "figures": figures,
        "baselines": baselines,
        "ratios": ratios,
        "batched_txns_per_flush": txns_per_flush,
        "goals": {"append_1000_speedup_vs_best_peer": ">= 10", "read_10_speedup_vs_best_peer": ">= 10",
            "append_ratio_vs_raw": "<= 1.5", "read_ratio_vs_raw": "<= 1.5"},
    });
    Ok(result)
}

fn runs_json(runs: &[(usize, u64)]) -> Value {
    runs.iter()
        .map(|(ops, txns)| json!({"ops_per_txn": ops, "txns": txns}))
        .collect()
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

/// `append_txn_<ops>_ops[_batched]`: transactions per second for each engine and for the raw
/// baseline, under `durability`, and (batched) the transactions per flush of each. The engines
/// take turns in `APPEND_ROUNDS` rounds and each figure is the median of its rounds, so that
/// disk contention from other work on the machine hits all alike.
fn append_figure(
    work: &Path,
    ops: usize,
    txns: u64,
    durability: Durability,
) -> Result<(Map<String, Value>, Value)> {
    let dir = work.join(format!("append-{ops}"));
    let mut logs = engines(&dir, syncline_storage::CHUNK_BYTES_MAX_DEFAULT)?;
    logs.push((
        "raw_write_fdatasync",
        Box::new(RawLog::create(&dir.join("raw.json"))?),
    ));
    let per_round = txns / APPEND_ROUNDS;
    let mut rounds: Vec<Vec<f64>> = vec![Vec::new(); logs.len()];
    let mut flushes = vec![0u64; logs.len()];
    for round in 0..APPEND_ROUNDS {
        let first_tx = 1 + round * per_round;
        let batches: Vec<Vec<Msg>> = (first_tx..first_tx + per_round)
            .map(|tx| transaction(tx, ops))
            .collect();
        for (((_, log), rates), flushes) in logs.iter_mut().zip(&mut rounds).zip(&mut flushes) {
            let start = Instant::now();
            *flushes += append_all(log.as_mut(), &batches, durability)?;
            rates.push(per_round as f64 / start.elapsed().as_secs_f64());
        }
    }
    let mut tps = Map::new();
    let mut per_flush = Map::new();
    for (((name, _), rates), flushes) in logs.iter().zip(&mut rounds).zip(flushes) {
        tps.insert((*name).into(), json!(median(rates)));
        per_flush.insert((*name).into(), json!(txns as f64 / flushes as f64));
    }
    drop(logs);
    fs::remove_dir_all(&dir)?;
    Ok((tps, Value::Object(per_flush)))
}

/// Appends `txns` under `durability`; returns the number of flushes.
fn append_all(log: &mut dyn ShapeLog, txns: &[Vec<Msg>], durability: Durability) -> Result<u64> {
    let mut flushes = 0;
    let mut first_unflushed: Option<Instant> = None;
    for txn in txns {
        log.append(txn)?;
        let since = *first_unflushed.get_or_insert_with(Instant::now);
        if durability == Durability::PerTransaction || since.elapsed() >= FLUSH_DELAY_MAX {
            log.flush()?;
            flushes += 1;
            first_unflushed = None;
        }
    }
    if first_unflushed.is_some() {
        log.flush()?;
        flushes += 1;
    }
    Ok(flushes)
}

/// The median of `values`, which it sorts.
pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Bytes the raw baseline buffers before writing; larger transactions are written directly.
const RAW_BUFFER_BYTES: usize = 64 * 1024;

/// The raw baseline: the same JSON bytes appended to one file, buffered in [`RAW_BUFFER_BYTES`]
/// (larger transactions written directly with `writev`), made durable with `fdatasync`.
struct RawLog {
    file: BufWriter<File>,
}

impl RawLog {
    fn create(path: &Path) -> Result<Self> {
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(path)?;
        Ok(RawLog {
            file: BufWriter::with_capacity(RAW_BUFFER_BYTES, file),
        })
    }
}

impl ShapeLog for RawLog {
    fn append(&mut self, txn: &[Msg]) -> Result<()> {
        let mut slices: Vec<IoSlice<'_>> = txn.iter().map(|m| IoSlice::new(&m.json)).collect();
        let mut rest = &mut slices[..];
        while !rest.is_empty() {
            let n = self.file.write_vectored(rest)?;
            IoSlice::advance_slices(&mut rest, n);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.file.flush()?;
        self.file.get_ref().sync_data()?;
        Ok(())
    }

    fn reader(&self) -> Result<Box<dyn ShapeLogReader>> {
        Err("the raw baseline is read through RawReader".into())
    }
}

/// Where responses go: a pipe standing in for a client socket, emptied into `/dev/null` by
/// `splice` (no copy) after every write into it, so that no write ever waits for a reader.
struct Sink {
    read_end: OwnedFd,
    write_end: OwnedFd,
    null: File,
    /// Bytes the pipe holds.
    capacity: usize,
}

impl Sink {
    fn new() -> Result<Sink> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: pipe2 just created these descriptors and nothing else owns them.
        let (read_end, write_end) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // Best effort: without the privilege to grow pipes, the default size is used.
        // SAFETY: fcntl on a descriptor we own.
        unsafe { libc::fcntl(write_end.as_raw_fd(), libc::F_SETPIPE_SZ, SINK_PIPE_BYTES) };
        // SAFETY: fcntl on a descriptor we own.
        let capacity = unsafe { libc::fcntl(write_end.as_raw_fd(), libc::F_GETPIPE_SZ) };
        Ok(Sink {
            read_end,
            write_end,
            null: OpenOptions::new().write(true).open("/dev/null")?,
            capacity: usize::try_from(capacity)?,
        })
    }

    /// Copies `bytes` into the pipe, as `write` to a socket does.
    fn write(&mut self, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let piece = bytes.len().min(self.capacity);
            // SAFETY: the pointer and length describe the initialised slice `bytes[..piece]`.
            let n =
                unsafe { libc::write(self.write_end.as_raw_fd(), bytes.as_ptr().cast(), piece) };
            let n = check(n as i64)?;
            self.drain(n)?;
            bytes = &bytes[n..];
        }
        Ok(())
    }

    /// Moves `len` bytes of `file` from `start` into the pipe with `sendfile` (page references,
    /// no copy), as a server sends a file range to a socket.
    fn send_file(&mut self, file: &File, start: u64, len: u64) -> Result<()> {
        let mut offset = i64::try_from(start)?;
        let end = offset + i64::try_from(len)?;
        while offset < end {
            let piece = usize::try_from(end - offset)?.min(self.capacity);
            // SAFETY: sendfile between descriptors we own, updating `offset` in place.
            let n = unsafe {
                libc::sendfile(
                    self.write_end.as_raw_fd(),
                    file.as_raw_fd(),
                    &mut offset,
                    piece,
                )
            };
            let n = check(n as i64)?;
            if n == 0 {
                return Err("file shorter than the range sent".into());
            }
            self.drain(n)?;
        }
        Ok(())
    }

    /// Splices the `len` bytes in the pipe to `/dev/null`.
    fn drain(&mut self, mut len: usize) -> Result<()> {
        while len > 0 {
            // SAFETY: splice between descriptors we own, with no offsets.
            let n = unsafe {
                libc::splice(
                    self.read_end.as_raw_fd(),
                    std::ptr::null_mut(),
                    self.null.as_raw_fd(),
                    std::ptr::null_mut(),
                    len,
                    0,
                )
            };
            len -= check(n as i64)?;
        }
        Ok(())
    }
}

/// The byte count of a system call's result, or its error.
fn check(ret: i64) -> Result<usize> {
    if ret < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(usize::try_from(ret)?)
}

/// `read_{5,10}_chunks`, the speedups, the raw read baselines and
/// `concurrent_200_readers_10_chunks`.
fn read_figures(
    work: &Path,
    figures: &mut Map<String, Value>,
    baselines: &mut Map<String, Value>,
    ratios: &mut Map<String, Value>,
) -> Result<()> {
    let dir = work.join("read");
    let logs = build_read_logs(&dir)?;
    let syncline_dir = dir.join("syncline");
    let raw_path = dir.join("raw.json");
    let mut readers: Vec<(&str, OpenReader<'_>)> = vec![
        (
            "syncline",
            Box::new(|| SynclineReader::open(&syncline_dir, Body::Sendfile)),
        ),
        (
            "syncline_mmap",
            Box::new(|| SynclineReader::open(&syncline_dir, Body::ServerMmap)),
        ),
    ];
    for (name, log) in logs.iter().skip(1) {
        readers.push((name, Box::new(move || log.reader())));
    }
    readers.push((
        "raw_sendfile",
        Box::new(|| RawReader::open(&raw_path, true)),
    ));
    readers.push(("raw_read", Box::new(|| RawReader::open(&raw_path, false))));
    let offsets = sample_offsets(READ_SAMPLES, 0x5eed, READ_LOG_TXNS * 3 / 4);
    for chunks in [5usize, 10] {
        let counts = message_counts(&syncline_dir, &offsets, chunks)?;
        check_same_bytes(&readers, &offsets, &counts)?;
        let mut means = read_latency_us(&readers, &offsets, &counts)?;
        let raw_sendfile = means.remove("raw_sendfile").unwrap().as_f64().unwrap();
        let raw_read = means.remove("raw_read").unwrap().as_f64().unwrap();
        baselines.insert(
            format!("raw_sendfile_{chunks}_chunks_us"),
            json!(raw_sendfile),
        );
        baselines.insert(format!("raw_read_{chunks}_chunks_us"), json!(raw_read));
        let ours = means["syncline"].as_f64().unwrap();
        let ours_mmap = means["syncline_mmap"].as_f64().unwrap();
        ratios.insert(
            format!("read_{chunks}_ratio_vs_raw_sendfile"),
            json!(ours / raw_sendfile),
        );
        ratios.insert(
            format!("read_{chunks}_mmap_ratio_vs_raw_read"),
            json!(ours_mmap / raw_read),
        );
        if chunks == 10 {
            let best_peer = means["sqlite"]
                .as_f64()
                .unwrap()
                .min(means["fjall"].as_f64().unwrap());
            figures.insert(
                "read_10_speedup_vs_best_peer".into(),
                json!(best_peer / ours),
            );
            figures.insert(
                "read_10_mmap_speedup_vs_best_peer".into(),
                json!(best_peer / ours_mmap),
            );
            figures.insert("read_ratio_vs_raw".into(), json!(ours / raw_sendfile));
        }
        figures.insert(format!("read_{chunks}_chunks"), Value::Object(means));
    }
    let counts = message_counts(&syncline_dir, &offsets, 10)?;
    let mut times = concurrent_figure(&readers, &offsets, &counts)?;
    baselines.insert(
        "raw_sendfile_concurrent_200_readers_10_chunks_ms".into(),
        times.remove("raw_sendfile").unwrap(),
    );
    baselines.insert(
        "raw_read_concurrent_200_readers_10_chunks_ms".into(),
        times.remove("raw_read").unwrap(),
    );
    figures.insert(
        "concurrent_200_readers_10_chunks".into(),
        Value::Object(times),
    );
    figures.insert(
        "list_messages_10_chunks".into(),
        list_messages_figure(&syncline_dir, &offsets)?,
    );
    drop(readers);
    drop(logs);
    fs::remove_dir_all(&dir)?;
    Ok(())
}

/// `list_messages_10_chunks`: mean microseconds to locate 10 responses after each offset with
/// `Reader::read`, and with `Reader::read_messages` (which also lists every message's offset,
/// operation and place in the body from the records); nothing is sent.
fn list_messages_figure(syncline_dir: &Path, offsets: &[LogOffset]) -> Result<Value> {
    let mut reader = Store::open_read_only(syncline_dir)?.open_reader("bench")?;
    let mut messages = Messages::new();
    let (mut read, mut listed, mut listed_count) = (Duration::ZERO, Duration::ZERO, 0);
    for &from in offsets {
        let start = Instant::now();
        let mut at = Some(from);
        for _ in 0..10 {
            at = reader.read(at)?.end_offset;
        }
        read += start.elapsed();
        let start = Instant::now();
        let mut at = Some(from);
        for _ in 0..10 {
            at = reader.read_messages(at, &mut messages)?.end_offset;
            listed_count += messages.len();
        }
        listed += start.elapsed();
    }
    let mean_us = |d: Duration| d.as_secs_f64() * 1e6 / offsets.len() as f64;
    Ok(json!({
        "read_us": mean_us(read),
        "read_messages_us": mean_us(listed),
        "messages_listed_per_sample": listed_count as f64 / offsets.len() as f64,
    }))
}

/// `read_10_default_chunks`: 10 responses of the default 10 MiB chunks sent by Syncline, and
/// the same bytes sent from one flat file, from offsets in the first chunk; and their ratio.
fn default_chunk_read_figure(
    work: &Path,
    figures: &mut Map<String, Value>,
    baselines: &mut Map<String, Value>,
) -> Result<()> {
    let dir = work.join("read-default-chunks");
    let syncline_dir = dir.join("syncline");
    let mut logs: [Box<dyn ShapeLog>; 2] = [
        Box::new(SynclineLog::create(
            &syncline_dir,
            syncline_storage::CHUNK_BYTES_MAX_DEFAULT,
        )?),
        Box::new(RawLog::create(&dir.join("raw.json"))?),
    ];
    let txns: Vec<Vec<Msg>> = (1..=DEFAULT_CHUNK_LOG_TXNS)
        .map(|tx| transaction(tx, 1000))
        .collect();
    for log in &mut logs {
        append_all(log.as_mut(), &txns, Durability::Batched)?;
    }
    drop(txns);
    let raw_path = dir.join("raw.json");
    let readers: Vec<(&str, OpenReader<'_>)> = vec![
        (
            "syncline",
            Box::new(|| SynclineReader::open(&syncline_dir, Body::Sendfile)),
        ),
        (
            "raw_sendfile",
            Box::new(|| RawReader::open(&raw_path, true)),
        ),
    ];
    let offsets = sample_offsets(DEFAULT_CHUNK_SAMPLES, 0xc0ffee, DEFAULT_CHUNK_FIRST_TXNS);
    let counts = message_counts(&syncline_dir, &offsets, 10)?;
    check_same_bytes(&readers, &offsets, &counts)?;
    let mut means = read_latency_us(&readers, &offsets, &counts)?;
    let raw = means.remove("raw_sendfile").unwrap();
    figures.insert(
        "read_10_default_chunks_ratio_vs_raw".into(),
        json!(means["syncline"].as_f64().unwrap() / raw.as_f64().unwrap()),
    );
    figures.insert("read_10_default_chunks".into(), Value::Object(means));
    baselines.insert("raw_sendfile_10_default_chunks_us".into(), raw);
    drop(readers);
    drop(logs);
    fs::remove_dir_all(&dir)?;
    Ok(())
}

/// `reopen_small` and `reopen_large`: what closing and reopening a shape's writer and reader
/// cost (the server keeps only recently used ones open), and the descriptors each holds.
fn reopen_figures(work: &Path, figures: &mut Map<String, Value>) -> Result<()> {
    let dir = work.join("reopen");
    let store = Store::open(&dir)?;
    let small: Vec<Msg> = (0..REOPEN_SMALL_ROWS as u64)
        .map(|op| message(1, op))
        .collect();
    let large: Vec<Vec<Msg>> = (1..=REOPEN_LARGE_TXNS)
        .map(|tx| transaction(tx, 1000))
        .collect();
    for (name, txns) in [("small", vec![small]), ("large", large)] {
        let mut writer = store.create_shape(name, &WriterOptions::default())?;
        for txn in &txns {
            writer.append(&messages_of(txn))?;
            writer.commit()?;
        }
        writer.flush()?;
        let next_tx = txns.last().map_or(1, |t| t[0].offset.tx + 1);
        let figure = reopen_figure(&store, name, writer, next_tx)?;
        figures.insert(format!("reopen_{name}"), figure);
    }
    fs::remove_dir_all(&dir)?;
    Ok(())
}

/// The reopen figures of one shape, whose open `writer` has flushed everything, and whose next
/// transaction is `next_tx`.
fn reopen_figure(store: &Store, shape: &str, writer: Writer, mut next_tx: u64) -> Result<Value> {
    let options = WriterOptions::default();
    let fds = || Ok::<_, BenchError>(fs::read_dir("/proc/self/fd")?.count());
    let held_open = fds()?;
    writer.close()?;
    let closed = fds()?;
    let mut write_one = |writer: &mut Writer| -> Result<()> {
        writer.append(&messages_of(&[message(next_tx, 0)]))?;
        writer.commit()?;
        writer.flush()?;
        next_tx += 1;
        Ok(())
    };
    let (mut open_clean, mut open_recovering) = (Vec::new(), Vec::new());
    let (mut close_written, mut close_unchanged) = (Vec::new(), Vec::new());
    for _ in 0..REOPEN_ROUNDS {
        let start = Instant::now();
        let writer = store.open_writer(shape, &options)?;
        open_clean.push(micros(start));
        let start = Instant::now();
        writer.close()?;
        close_unchanged.push(micros(start));
        let mut writer = store.open_writer(shape, &options)?;
        write_one(&mut writer)?;
        let start = Instant::now();
        writer.close()?;
        close_written.push(micros(start));
        let mut writer = store.open_writer(shape, &options)?;
        write_one(&mut writer)?;
        drop(writer);
        let start = Instant::now();
        let writer = store.open_writer(shape, &options)?;
        open_recovering.push(micros(start));
        writer.close()?;
    }
    let after_rounds = fds()?;
    let end = store.open_writer(shape, &options)?.close()?;
    let (mut reader_open, mut reader_read) = (Vec::new(), Vec::new());
    let before_reader = fds()?;
    let mut reader_fds = 0;
    for _ in 0..REOPEN_ROUNDS {
        let start = Instant::now();
        let mut reader = store.open_reader(shape)?;
        let read = reader.read(end)?;
        reader_open.push(micros(start));
        assert!(read.up_to_date && read.body.is_none());
        let start = Instant::now();
        reader.read(end)?;
        reader_read.push(micros(start));
        reader_fds = fds()? - before_reader;
    }
    Ok(json!({
        "writer_open_after_close_us": median(&mut open_clean),
        "writer_open_recovering_us": median(&mut open_recovering),
        "writer_close_after_write_us": median(&mut close_written),
        "writer_close_unchanged_us": median(&mut close_unchanged),
        "reader_open_and_read_us": median(&mut reader_open),
        "reader_read_us": median(&mut reader_read),
        "descriptors_open_writer": held_open - closed,
        "descriptors_closed_writer": i64::try_from(after_rounds)? - i64::try_from(closed)?,
        "descriptors_reader_between_reads": reader_fds,
    }))
}

fn micros(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e6
}

fn messages_of(txn: &[Msg]) -> Vec<Message<'_>> {
    txn.iter()
        .map(|m| Message {
            offset: m.offset,
            key: &m.key,
            op: Operation::Insert,
            json: &m.json,
        })
        .collect()
}

/// Opens a reader of one engine (or baseline).
type OpenReader<'a> = Box<dyn Fn() -> Result<Box<dyn ShapeLogReader>> + 'a>;

/// The same log of `READ_LOG_TXNS` 1000-message transactions in every engine, and as one flat
/// file (`raw.json`) for the raw baselines.
fn build_read_logs(dir: &Path) -> Result<Vec<(&'static str, Box<dyn ShapeLog>)>> {
    let mut logs = engines(dir, READ_CHUNK_BYTES_MAX)?;
    let mut raw = RawLog::create(&dir.join("raw.json"))?;
    for tx in 1..=READ_LOG_TXNS {
        let txn = transaction(tx, 1000);
        for (_, log) in logs.iter_mut() {
            log.append(&txn)?;
            log.flush()?;
        }
        raw.append(&txn)?;
    }
    raw.flush()?;
    Ok(logs)
}

/// For each offset, the messages in the `chunks` Syncline responses after it.
fn message_counts(syncline_dir: &Path, offsets: &[LogOffset], chunks: usize) -> Result<Vec<usize>> {
    let mut reader = SynclineReader::new(syncline_dir, Body::Sendfile)?;
    offsets
        .iter()
        .map(|&from| {
            let bytes: u64 = reader
                .responses(from, chunks, u64::MAX)?
                .iter()
                .map(|r| r.len)
                .sum();
            Ok(usize::try_from(bytes)? / MESSAGE_BYTES)
        })
        .collect()
}

/// Checks, untimed, that every reader serves exactly the same bytes for every offset.
fn check_same_bytes(
    readers: &[(&str, OpenReader<'_>)],
    offsets: &[LogOffset],
    counts: &[usize],
) -> Result<()> {
    let mut opened = readers
        .iter()
        .map(|(name, open)| Ok((*name, open()?)))
        .collect::<Result<Vec<_>>>()?;
    for (&from, &count) in offsets.iter().zip(counts) {
        let (_, first) = &mut opened[0];
        let expected = first.bytes(from, count)?;
        assert_eq!(expected.len(), count * MESSAGE_BYTES);
        for (name, reader) in &mut opened[1..] {
            assert!(
                reader.bytes(from, count)? == expected,
                "{name} serves other bytes from {from}"
            );
        }
    }
    Ok(())
}

/// Mean microseconds per read of the `counts[i]` messages after `offsets[i]` into a sink, for
/// each reader. Readers take turns on each offset, so that interference from other work on the
/// machine hits all alike.
fn read_latency_us(
    readers: &[(&str, OpenReader<'_>)],
    offsets: &[LogOffset],
    counts: &[usize],
) -> Result<Map<String, Value>> {
    let mut opened = readers
        .iter()
        .map(|(_, open)| Ok((open()?, Sink::new()?)))
        .collect::<Result<Vec<_>>>()?;
    let mut totals = vec![Duration::ZERO; readers.len()];
    for (&from, &count) in offsets.iter().zip(counts) {
        for ((reader, sink), total) in opened.iter_mut().zip(&mut totals) {
            let start = Instant::now();
            reader.send(from, count, sink)?;
            *total += start.elapsed();
        }
    }
    let mut means = Map::new();
    for ((name, _), total) in readers.iter().zip(totals) {
        means.insert(
            (*name).into(),
            json!(total.as_secs_f64() * 1e6 / offsets.len() as f64),
        );
    }
    Ok(means)
}

/// `CONCURRENT_READERS` threads, each with its own reader and sink, released together, each
/// reading 10 chunks' worth from its own random offset; median wall time in milliseconds per
/// reader kind over `CONCURRENT_ROUNDS`.
fn concurrent_figure(
    readers: &[(&str, OpenReader<'_>)],
    offsets: &[LogOffset],
    counts: &[usize],
) -> Result<Map<String, Value>> {
    let jobs: Vec<(LogOffset, usize)> = (0..CONCURRENT_READERS)
        .map(|i| (offsets[i % offsets.len()], counts[i % counts.len()]))
        .collect();
    let mut rounds: Vec<Vec<f64>> = vec![Vec::new(); readers.len()];
    for _ in 0..CONCURRENT_ROUNDS {
        for ((_, open), times) in readers.iter().zip(&mut rounds) {
            let opened = (0..CONCURRENT_READERS)
                .map(|_| Ok((open()?, Sink::new()?)))
                .collect::<Result<Vec<_>>>()?;
            times.push(run_concurrently(opened, &jobs)?.as_secs_f64() * 1e3);
        }
    }
    let mut times = Map::new();
    for ((name, _), ms) in readers.iter().zip(&mut rounds) {
        times.insert((*name).into(), json!(median(ms)));
    }
    Ok(times)
}

fn run_concurrently(
    readers: Vec<(Box<dyn ShapeLogReader>, Sink)>,
    jobs: &[(LogOffset, usize)],
) -> Result<Duration> {
    let barrier = Arc::new(Barrier::new(readers.len() + 1));
    let handles: Vec<_> = readers
        .into_iter()
        .zip(jobs)
        .map(|((mut reader, mut sink), &(from, count))| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || -> Result<()> {
                barrier.wait();
                reader.send(from, count, &mut sink)
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for h in handles {
        h.join().map_err(|_| "reader thread panicked")??;
    }
    Ok(start.elapsed())
}

/// Deterministic pseudo-random offsets of messages in the first `txns` 1000-message
/// transactions of a read log.
fn sample_offsets(n: usize, mut seed: u64, txns: u64) -> Vec<LogOffset> {
    (0..n)
        .map(|_| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let tx = 1 + (seed >> 33) % txns;
            let op = (seed >> 20) % 1000;
            LogOffset::new(tx, op * 2)
        })
        .collect()
}

/// The raw read baselines: the same bytes from one flat file (every message has the same size,
/// so the position of the message after `from` is computed), sent with `sendfile`, or read into
/// a reused buffer and written.
struct RawReader {
    file: File,
    sendfile: bool,
    buf: Vec<u8>,
}

impl RawReader {
    fn open(path: &Path, sendfile: bool) -> Result<Box<dyn ShapeLogReader>> {
        Ok(Box::new(RawReader {
            file: File::open(path)?,
            sendfile,
            buf: Vec::new(),
        }))
    }

    fn position(from: LogOffset) -> u64 {
        ((from.tx - 1) * 1000 + from.op / 2 + 1) * MESSAGE_BYTES as u64
    }
}

impl ShapeLogReader for RawReader {
    fn send(&mut self, from: LogOffset, count: usize, sink: &mut Sink) -> Result<()> {
        let len = count * MESSAGE_BYTES;
        if self.sendfile {
            return sink.send_file(&self.file, Self::position(from), len as u64);
        }
        self.buf.resize(len, 0);
        self.file
            .read_exact_at(&mut self.buf, Self::position(from))?;
        sink.write(&self.buf)
    }

    fn bytes(&mut self, from: LogOffset, count: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; count * MESSAGE_BYTES];
        self.file.read_exact_at(&mut out, Self::position(from))?;
        Ok(out)
    }
}

/// The engine under test.
struct SynclineLog {
    writer: Writer,
}

impl SynclineLog {
    fn create(dir: &Path, chunk_bytes_max: u64) -> Result<Self> {
        let options = WriterOptions {
            chunk_bytes_max,
            ..WriterOptions::default()
        };
        let writer = Store::open(dir)?.create_shape("bench", &options)?;
        Ok(SynclineLog { writer })
    }
}

impl ShapeLog for SynclineLog {
    fn append(&mut self, txn: &[Msg]) -> Result<()> {
        self.writer.append(&messages_of(txn))?;
        self.writer.commit()?;
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.writer.flush()?;
        Ok(())
    }

    fn reader(&self) -> Result<Box<dyn ShapeLogReader>> {
        Err("Syncline is read through SynclineReader".into())
    }
}

/// How a Syncline response body leaves the process.
#[derive(Clone, Copy)]
enum Body {
    /// `sendfile` of the file range.
    Sendfile,
    /// As `syncline-server` does: small ranges read into memory, larger ones memory-mapped,
    /// then written.
    ServerMmap,
}

/// A Syncline reader; reads whole chunks, one response each, as the server does.
struct SynclineReader {
    reader: Reader,
    body: Body,
}

impl SynclineReader {
    fn new(dir: &Path, body: Body) -> Result<Self> {
        let reader = Store::open_read_only(dir)?.open_reader("bench")?;
        Ok(SynclineReader { reader, body })
    }

    fn open(dir: &Path, body: Body) -> Result<Box<dyn ShapeLogReader>> {
        Ok(Box::new(Self::new(dir, body)?))
    }

    /// The bodies of the responses from `from` until `chunks` responses were read, they hold
    /// `bytes_max` bytes, or the log is read to its end.
    fn responses(
        &mut self,
        from: LogOffset,
        chunks: usize,
        bytes_max: u64,
    ) -> Result<Vec<FileRange>> {
        let (mut at, mut bytes, mut bodies) = (Some(from), 0, Vec::new());
        for _ in 0..chunks {
            let r = self.reader.read(at)?;
            if let Some(body) = r.body {
                bytes += body.len;
                bodies.push(body);
            }
            at = r.end_offset;
            if r.up_to_date || bytes >= bytes_max {
                break;
            }
        }
        Ok(bodies)
    }
}

impl ShapeLogReader for SynclineReader {
    fn send(&mut self, from: LogOffset, count: usize, sink: &mut Sink) -> Result<()> {
        let bytes_max = (count * MESSAGE_BYTES) as u64;
        let (mut at, mut sent) = (Some(from), 0);
        while sent < bytes_max {
            let r = self.reader.read(at)?;
            let body = r.body.ok_or("log ended before the messages asked for")?;
            match self.body {
                Body::Sendfile => sink.send_file(&body.file, body.start, body.len)?,
                Body::ServerMmap if body.len <= SERVER_READ_RANGE_BYTES_MAX => {
                    sink.write(&body.read_to_vec()?)?
                }
                Body::ServerMmap => sink.write(&Mapped::new(&body)?)?,
            }
            sent += body.len;
            at = r.end_offset;
        }
        assert_eq!(sent, bytes_max, "reads end at response boundaries");
        Ok(())
    }

    fn bytes(&mut self, from: LogOffset, count: usize) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(count * MESSAGE_BYTES);
        for body in self.responses(from, usize::MAX, (count * MESSAGE_BYTES) as u64)? {
            match self.body {
                Body::ServerMmap if body.len > SERVER_READ_RANGE_BYTES_MAX => {
                    out.extend_from_slice(&Mapped::new(&body)?)
                }
                _ => out.extend_from_slice(&body.read_to_vec()?),
            }
        }
        Ok(out)
    }
}

/// A file range mapped into memory (what `syncline-server` does for ranges over 256 KiB);
/// unmapped on drop.
struct Mapped {
    ptr: *mut libc::c_void,
    map_len: usize,
    lead: usize,
    len: usize,
}

impl Mapped {
    fn new(range: &FileRange) -> Result<Mapped> {
        // SAFETY: sysconf has no preconditions.
        let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })?;
        let aligned = range.start - range.start % page;
        let lead = usize::try_from(range.start - aligned)?;
        let len = usize::try_from(range.len)?;
        // SAFETY: a fresh read-only shared mapping of a file we hold open; closed chunks are
        // immutable, so the mapped bytes never change while mapped.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                lead + len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                range.file.as_raw_fd(),
                i64::try_from(aligned)?,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(Mapped {
            ptr,
            map_len: lead + len,
            lead,
            len,
        })
    }
}

impl std::ops::Deref for Mapped {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: the mapping covers `lead + len` readable bytes for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>().add(self.lead), self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `Mapped::new`, no longer borrowed.
        unsafe { libc::munmap(self.ptr, self.map_len) };
    }
}

/// SQLite in WAL mode, one row per message keyed by offset. Appends go into an open SQL
/// transaction that a flush commits.
struct SqliteLog {
    path: PathBuf,
    conn: rusqlite::Connection,
    in_txn: bool,
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
            in_txn: false,
        })
    }
}

impl ShapeLog for SqliteLog {
    fn append(&mut self, txn: &[Msg]) -> Result<()> {
        if !self.in_txn {
            self.conn.execute_batch("BEGIN")?;
            self.in_txn = true;
        }
        let mut insert = self.conn.prepare_cached(
            "INSERT INTO log (tx, op, key, kind, json) VALUES (?1, ?2, ?3, 1, ?4)",
        )?;
        for m in txn {
            insert.execute(rusqlite::params![
                i64::try_from(m.offset.tx).expect("offsets fit SQLite's integers"),
                i64::try_from(m.offset.op).expect("offsets fit SQLite's integers"),
                m.key,
                m.json
            ])?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.in_txn {
            self.conn.execute_batch("COMMIT")?;
            self.in_txn = false;
        }
        Ok(())
    }

    fn reader(&self) -> Result<Box<dyn ShapeLogReader>> {
        let flags =
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        Ok(Box::new(SqliteReader {
            conn: rusqlite::Connection::open_with_flags(&self.path, flags)?,
            buf: Vec::new(),
        }))
    }
}

struct SqliteReader {
    conn: rusqlite::Connection,
    buf: Vec<u8>,
}

impl PeerReader for SqliteReader {
    fn body(&self) -> &[u8] {
        &self.buf
    }

    fn query(&mut self, from: LogOffset, count: usize) -> Result<()> {
        self.buf.clear();
        let mut select = self.conn.prepare_cached(
            "SELECT json FROM log WHERE (tx, op) > (?1, ?2) ORDER BY tx, op LIMIT ?3",
        )?;
        let mut rows = select.query(rusqlite::params![
            i64::try_from(from.tx).expect("offsets fit SQLite's integers"),
            i64::try_from(from.op).expect("offsets fit SQLite's integers"),
            i64::try_from(count).expect("a batch size fits i64")
        ])?;
        while let Some(row) = rows.next()? {
            self.buf.extend_from_slice(row.get_ref(0)?.as_blob()?);
        }
        Ok(())
    }
}

/// The fjall LSM tree: key = offset (big-endian tx, op), value = kind, key length, key, JSON.
/// Each transaction is one write batch; a flush persists the journal.
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
    fn append(&mut self, txn: &[Msg]) -> Result<()> {
        let mut batch = self.db.batch().durability(None);
        for m in txn {
            let mut value = Vec::with_capacity(5 + m.key.len() + m.json.len());
            value.push(1);
            value.extend_from_slice(
                &u32::try_from(m.key.len())
                    .expect("keys are at most 64 KiB")
                    .to_le_bytes(),
            );
            value.extend_from_slice(&m.key);
            value.extend_from_slice(&m.json);
            batch.insert(&self.log, fjall_key(m.offset), value);
        }
        batch.commit()?;
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.db.persist(fjall::PersistMode::SyncData)?;
        Ok(())
    }

    fn reader(&self) -> Result<Box<dyn ShapeLogReader>> {
        Ok(Box::new(FjallReader {
            log: self.log.clone(),
            buf: Vec::new(),
        }))
    }
}

struct FjallReader {
    log: fjall::Keyspace,
    buf: Vec<u8>,
}

impl PeerReader for FjallReader {
    fn body(&self) -> &[u8] {
        &self.buf
    }

    fn query(&mut self, from: LogOffset, count: usize) -> Result<()> {
        self.buf.clear();
        let after = fjall_key(LogOffset::new(from.tx, from.op + 1));
        for kv in self.log.range(after..).take(count) {
            let (_, value) = kv.into_inner()?;
            let key_len = u32::from_le_bytes(value[1..5].try_into()?) as usize;
            self.buf.extend_from_slice(&value[5 + key_len..]);
        }
        Ok(())
    }
}

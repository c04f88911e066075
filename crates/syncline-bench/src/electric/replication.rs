//! `electric replication-optimised` and `electric replication-unoptimised` (Electric's
//! scenarios 7 and 8): how fast the server processes a stream of row changes with S shapes,
//! `where=name = '<k>'` (found by hash) or `where=name ILIKE '<k>'` (evaluated shape by
//! shape), on a table of `users`'s layout.
//!
//! Per point, two loads of single-statement transactions are committed as fast as one
//! Postgres session takes them (a `DO` block that commits after every transaction): first rows
//! whose name is in no shape, then rows each in exactly one shape. A load is timed from just
//! before it is sent until the server has acknowledged (`syncline_replication_flushed_lsn` of
//! its `/metrics`) the WAL insert position read after the load, so every change is durable in
//! its shape log. In the same run `pg_recvlogical` streams the same table through pgoutput
//! (its own slot and publication) into `/dev/null`: the baseline is the time until its
//! walsender has sent up to that position (`pg_stat_replication.sent_lsn`), i.e. Postgres's
//! own decoding into a consumer that does nothing. The server's CPU time per change comes from
//! `/proc`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::client::{Error, LiveMode, ShapeClient};
use super::http_pool::Pool;
use super::server_metrics::metric;
use super::{pool, round3, scenario_json, sync_all, without_users_rows, Bench, Server, Target};
use crate::readonly::sql;

/// The table the loads write, in `public`.
const TABLE: &str = "replicated_users";
/// The replication slot of the `pg_recvlogical` baseline.
const RECV_SLOT: &str = "bench_recvlogical";
/// The publication of the `pg_recvlogical` baseline: [`TABLE`] alone.
const RECV_PUBLICATION: &str = "bench_recvlogical";
/// Shape requests in flight at once while the shapes are created.
const CREATE_CONCURRENCY: usize = 64;
/// How often the positions are read while waiting for them.
const POLL: Duration = Duration::from_millis(5);
/// How long the server and `pg_recvlogical` may take to reach the end of a load, or
/// `pg_recvlogical` to start streaming.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(600);
/// The point of `replication-optimised`'s headline figure.
const HEADLINE_SHAPES: usize = 10_000;

/// The where clauses of a scenario's shapes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `name = '<k>'`: indexed by the router.
    Eq,
    /// `name ILIKE '<k>'`: evaluated for every change.
    Ilike,
}

impl Form {
    /// The where clause of shape `k`.
    fn where_clause(self, k: usize) -> String {
        match self {
            Form::Eq => format!("name = '{k}'"),
            Form::Ilike => format!("name ILIKE '{k}'"),
        }
    }
}

/// The rows of a load.
#[derive(Clone, Copy)]
enum Rows {
    /// Named `none <i>`: in no shape.
    Unaffected,
    /// Named `<i mod S + 1>`: each in exactly one of the S shapes.
    Affecting(usize),
}

/// The size of each point's loads.
#[derive(Clone, Copy)]
pub(super) struct Load {
    /// Row changes per load.
    pub(super) changes: u64,
    /// Rows per transaction.
    pub(super) txn_rows: u64,
}

/// One load as the server and the baseline processed it.
struct Measured {
    /// Row changes committed.
    changes: u64,
    /// From sending the load until Postgres had committed all of it.
    load: Duration,
    /// From sending the load until the server acknowledged its end.
    server: Duration,
    /// From sending the load until `pg_recvlogical`'s walsender had sent its end.
    recvlogical: Duration,
    /// From sending the load until the server's walsender had sent its end.
    server_walsender: Duration,
    /// The server's CPU time over the load.
    cpu: Duration,
    /// Changes the server decoded (`syncline_replication_changes_total`).
    decoded: Option<f64>,
    /// Messages the server appended to shape logs (`syncline_shape_log_messages_total`).
    appended: Option<f64>,
}

impl Measured {
    /// Server CPU nanoseconds per change.
    fn cpu_ns_per_change(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e9 / self.changes as f64
    }

    /// The server's throughput over `pg_recvlogical`'s (1 is as fast as Postgres decodes).
    fn ratio(&self) -> f64 {
        self.recvlogical.as_secs_f64() / self.server.as_secs_f64()
    }

    /// The figures as JSON.
    fn json(&self) -> Value {
        let per_s = |d: Duration| round3(self.changes as f64 / d.as_secs_f64());
        json!({
            "changes": self.changes,
            "load_ms": ms(self.load),
            "server_ms": ms(self.server),
            "pg_recvlogical_ms": ms(self.recvlogical),
            "server_walsender_sent_ms": ms(self.server_walsender),
            "server_changes_per_s": per_s(self.server),
            "pg_recvlogical_changes_per_s": per_s(self.recvlogical),
            "ratio_vs_pg_recvlogical": round3(self.ratio()),
            "cpu_s": round3(self.cpu.as_secs_f64()),
            "cpu_ns_per_change": round3(self.cpu_ns_per_change()),
            "changes_decoded": self.decoded,
            "shape_log_messages": self.appended,
        })
    }
}

/// One point's figures.
struct Point {
    /// Shapes.
    shapes: usize,
    /// The load of rows in no shape.
    unaffected: Measured,
    /// The load of rows each in one shape (none without shapes).
    affecting: Option<Measured>,
    /// The point's JSON.
    json: Value,
}

/// Runs the points of `replication-optimised`: `name = '<k>'` shapes.
pub(super) async fn replication_optimised(
    bench: &mut Bench,
    points: &[usize],
    load: Load,
) -> Result<Value, Error> {
    let mut headline = Map::new();
    headline.insert(
        format!("ratio_vs_pg_recvlogical_at_{HEADLINE_SHAPES}"),
        Value::Null,
    );
    let mut results = Vec::new();
    for point in run(bench, Form::Eq, points, load).await? {
        if let Some(affecting) = &point.affecting {
            headline.insert(
                format!("ratio_vs_pg_recvlogical_at_{}", point.shapes),
                round3(affecting.ratio()).into(),
            );
        }
        headline.insert(
            format!("unaffected_ratio_vs_pg_recvlogical_at_{}", point.shapes),
            round3(point.unaffected.ratio()).into(),
        );
        results.push(point.json);
    }
    Ok(without_users_rows(scenario_json(
        headline,
        parameters(Form::Eq, points, load),
        results,
    )))
}

/// Runs the points of `replication-unoptimised`: `name ILIKE '<k>'` shapes, after a point
/// without shapes that is the baseline of the CPU time per shape evaluation.
pub(super) async fn replication_unoptimised(
    bench: &mut Bench,
    points: &[usize],
    load: Load,
) -> Result<Value, Error> {
    let with_baseline: Vec<usize> = std::iter::once(0)
        .chain(points.iter().copied().filter(|&s| s > 0))
        .collect();
    let mut headline = Map::new();
    headline.insert("ns_per_shape_eval".into(), Value::Null);
    let mut results = Vec::new();
    let mut baseline_ns = None;
    for mut point in run(bench, Form::Ilike, &with_baseline, load).await? {
        let ns = point.unaffected.cpu_ns_per_change();
        let per_eval = match baseline_ns {
            None => {
                baseline_ns = Some(ns);
                Value::Null
            }
            Some(base) => {
                let per_eval: Value = round3((ns - base) / point.shapes as f64).into();
                headline.insert("ns_per_shape_eval".into(), per_eval.clone());
                headline.insert(
                    format!("ns_per_shape_eval_at_{}", point.shapes),
                    per_eval.clone(),
                );
                per_eval
            }
        };
        if let Some(affecting) = &point.affecting {
            headline.insert(
                format!("ratio_vs_pg_recvlogical_at_{}", point.shapes),
                round3(affecting.ratio()).into(),
            );
        }
        point.json["ns_per_shape_eval"] = per_eval;
        results.push(point.json);
    }
    let mut parameters = parameters(Form::Ilike, &with_baseline, load);
    parameters["ns_per_shape_eval"] = "(server CPU ns per change of the unaffected load at S - the same at 0 shapes) / S; the headline is the largest S's".into();
    Ok(without_users_rows(scenario_json(
        headline, parameters, results,
    )))
}

/// The scenario's parameters.
fn parameters(form: Form, points: &[usize], load: Load) -> Value {
    json!({
        "shapes": match form {
            Form::Eq => format!("where=name = '<k>', k = 1..=S, on {TABLE}"),
            Form::Ilike => format!("where=name ILIKE '<k>', k = 1..=S, on {TABLE}"),
        },
        "shape_counts": points,
        "changes_per_load": load.changes,
        "rows_per_transaction": load.txn_rows,
        "loads": "unaffected: INSERTs of rows named 'none <i>' (in no shape); affecting: INSERTs of rows named '<i mod S + 1>' (each in one shape); each a DO block committing after every transaction, on a session with synchronous_commit = on",
        "server_ms": "from sending the load until the server's syncline_replication_flushed_lsn reached pg_current_wal_insert_lsn() read after it",
        "pg_recvlogical_ms": "from sending the load until the walsender of `pg_recvlogical --start -o proto_version=1 -o publication_names=<a publication of the table alone> -f /dev/null` (its own slot) had sent up to that position",
        "ratio_vs_pg_recvlogical": "pg_recvlogical_ms / server_ms: the server's changes per second over pg_recvlogical's on the same stream (1 = as fast as Postgres decodes)",
        "headline": "ratio_vs_pg_recvlogical_at_<S> is the affecting load's; null when that point did not run",
    })
}

/// Runs every point of `points` with shapes of `form`.
async fn run(
    bench: &mut Bench,
    form: Form,
    points: &[usize],
    load: Load,
) -> Result<Vec<Point>, Error> {
    sql(
        &bench.db,
        &format!(
            "CREATE TABLE IF NOT EXISTS public.{TABLE} (id uuid PRIMARY KEY, name text, email text);
             TRUNCATE public.{TABLE};
             DROP PUBLICATION IF EXISTS {RECV_PUBLICATION};
             CREATE PUBLICATION {RECV_PUBLICATION} FOR TABLE public.{TABLE};"
        ),
    )
    .await?;
    let mut results = Vec::new();
    for &shapes in points {
        results.push(point(bench, form, shapes, load).await?);
    }
    sql(
        &bench.db,
        &format!("DROP PUBLICATION {RECV_PUBLICATION}; DROP TABLE public.{TABLE};"),
    )
    .await?;
    Ok(results)
}

/// One point: a fresh server with `shapes` shapes of `form`, `pg_recvlogical`, the two loads.
async fn point(bench: &mut Bench, form: Form, shapes: usize, load: Load) -> Result<Point, Error> {
    let Target::Own { cluster, .. } = &bench.target else {
        return Err("the replication scenarios need a server this run starts".into());
    };
    let recvlogical_bin = cluster.bindir().join("pg_recvlogical");
    let database = cluster.connection_string("postgres");
    let server = bench.server().await?;
    let stream = bench.stream_id();
    // Without shapes the server would not ask for the table's changes.
    sql(
        &bench.db,
        &format!("ALTER PUBLICATION syncline_publication_{stream} ADD TABLE public.{TABLE}"),
    )
    .await?;
    let http = pool();
    let started = Instant::now();
    let errors = sync_all(
        (1..=shapes).map(|k| {
            ShapeClient::new(
                http.clone(),
                server.url(),
                &[("table", TABLE), ("where", &form.where_clause(k))],
                LiveMode::LongPoll,
                false,
            )
        }),
        CREATE_CONCURRENCY,
    )
    .await?;
    if errors.count > 0 {
        return Err(format!(
            "replication: {} of {shapes} shapes failed, first: {:?}",
            errors.count, errors.first
        )
        .into());
    }
    let created = started.elapsed();
    let created_sample = server.sample()?;
    let recvlogical = RecvLogical::start(&bench.db, &recvlogical_bin, &database).await?;
    let probe = Probe {
        http: &http,
        server: &server,
        db: &bench.db,
        server_slot: format!("syncline_slot_{stream}"),
    };
    let unaffected = probe.measure(Rows::Unaffected, load).await;
    let affecting = match (&unaffected, shapes) {
        (Ok(_), 1..) => Some(probe.measure(Rows::Affecting(shapes), load).await),
        _ => None,
    };
    recvlogical.stop(&bench.db).await?;
    let after = server.sample()?;
    let (unaffected, affecting) = (unaffected?, affecting.transpose()?);
    eprintln!(
        "replication {} {shapes} shapes: unaffected {:.0} changes/s (ratio {:.3}, {:.0} ns CPU/change), affecting {}",
        if form == Form::Eq { "eq" } else { "ilike" },
        unaffected.changes as f64 / unaffected.server.as_secs_f64(),
        unaffected.ratio(),
        unaffected.cpu_ns_per_change(),
        affecting.as_ref().map_or("-".to_owned(), |a| format!(
            "{:.0} changes/s (ratio {:.3}, {:.0} ns CPU/change)",
            a.changes as f64 / a.server.as_secs_f64(),
            a.ratio(),
            a.cpu_ns_per_change()
        )),
    );
    let json = json!({
        "shapes": shapes,
        "unaffected": unaffected.json(),
        "affecting": affecting.as_ref().map(Measured::json),
        "shapes_created_ms": ms(created),
        "rss_bytes_idle": server.idle.rss_bytes,
        "rss_bytes_after_create": created_sample.rss_bytes,
        "rss_bytes_after_loads": after.rss_bytes,
        "peak_rss_bytes": after.peak_rss_bytes,
        "cpu_s_create": created_sample.cpu_s_since(&server.idle),
    });
    drop(http);
    bench.finish(server).await?;
    sql(&bench.db, &format!("TRUNCATE public.{TABLE}")).await?;
    Ok(Point {
        shapes,
        unaffected,
        affecting,
        json,
    })
}

/// What a point reads its positions from.
struct Probe<'a> {
    /// A pool for `/metrics`.
    http: &'a Pool,
    /// The point's server.
    server: &'a Server,
    /// The benchmark's session: the loads and `pg_stat_replication`.
    db: &'a tokio_postgres::Client,
    /// The server's replication slot.
    server_slot: String,
}

impl Probe<'_> {
    /// Commits `load.changes` changes of `rows` and waits until the server and
    /// `pg_recvlogical` are past them.
    async fn measure(&self, rows: Rows, load: Load) -> Result<Measured, Error> {
        let name = match rows {
            Rows::Unaffected => "'none ' || i".to_owned(),
            Rows::Affecting(shapes) => format!("(i % {shapes} + 1)::text"),
        };
        let txns = load.changes.div_ceil(load.txn_rows).max(1);
        let changes = txns * load.txn_rows;
        let counters = self.counters().await?;
        let before = self.server.sample()?;
        let start = Instant::now();
        sql(
            self.db,
            &format!(
                "DO $$
                 BEGIN
                   FOR t IN 0..{} LOOP
                     INSERT INTO public.{TABLE}
                       SELECT gen_random_uuid(), {name}, 'r' || i || '@example.com'
                       FROM (SELECT t * {rows} + g AS i FROM generate_series(1, {rows}) g) s;
                     COMMIT;
                   END LOOP;
                 END $$",
                txns - 1,
                rows = load.txn_rows,
            ),
        )
        .await?;
        let loaded = start.elapsed();
        let end: i64 = self
            .db
            .query_one(
                "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint",
                &[],
            )
            .await?
            .get(0);
        let (mut server, mut recvlogical, mut server_walsender) = (None, None, None);
        let mut after = before;
        while server.is_none() || recvlogical.is_none() || server_walsender.is_none() {
            if start.elapsed() > CATCH_UP_TIMEOUT {
                return Err(format!(
                    "replication: the server ({server:?}), pg_recvlogical ({recvlogical:?}) or the server's walsender ({server_walsender:?}) did not reach the end of the load in {CATCH_UP_TIMEOUT:?}"
                )
                .into());
            }
            if server.is_none() {
                let flushed = metric(
                    self.http,
                    self.server.url(),
                    "syncline_replication_flushed_lsn",
                )
                .await?
                .ok_or("the server has no syncline_replication_flushed_lsn")?;
                if flushed >= end as f64 {
                    server = Some(start.elapsed());
                    after = self.server.sample()?;
                }
            }
            for row in self
                .db
                .query(
                    "SELECT s.slot_name::text
                     FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid
                     WHERE (r.sent_lsn - '0/0'::pg_lsn)::bigint >= $1",
                    &[&end],
                )
                .await?
            {
                let slot: String = row.get(0);
                if slot == RECV_SLOT {
                    recvlogical.get_or_insert_with(|| start.elapsed());
                } else if slot == self.server_slot {
                    server_walsender.get_or_insert_with(|| start.elapsed());
                }
            }
            tokio::time::sleep(POLL).await;
        }
        let (decoded, appended) = self.counters().await?;
        let delta = |after: Option<f64>, before: Option<f64>| Some(after? - before?);
        Ok(Measured {
            changes,
            load: loaded,
            server: server.ok_or("unreachable: the loop ends with the server")?,
            recvlogical: recvlogical.ok_or("unreachable: the loop ends with pg_recvlogical")?,
            server_walsender: server_walsender
                .ok_or("unreachable: the loop ends with the server's walsender")?,
            cpu: after.cpu.saturating_sub(before.cpu),
            decoded: delta(decoded, counters.0),
            appended: delta(appended, counters.1),
        })
    }

    /// The server's decoded-change and appended-message counters.
    async fn counters(&self) -> Result<(Option<f64>, Option<f64>), Error> {
        let url = self.server.url();
        Ok((
            metric(self.http, url, "syncline_replication_changes_total").await?,
            metric(self.http, url, "syncline_shape_log_messages_total").await?,
        ))
    }
}

/// A `pg_recvlogical` streaming [`RECV_PUBLICATION`] from its own slot into `/dev/null`.
struct RecvLogical {
    /// The process.
    child: Child,
}

impl RecvLogical {
    /// Creates the slot, starts `pg_recvlogical` (`binary`) on `database` and waits until its
    /// walsender streams.
    async fn start(
        db: &tokio_postgres::Client,
        binary: &std::path::Path,
        database: &str,
    ) -> Result<RecvLogical, Error> {
        sql(
            db,
            &format!("SELECT pg_create_logical_replication_slot('{RECV_SLOT}', 'pgoutput')"),
        )
        .await?;
        let child = Command::new(binary)
            .args(["--dbname", database, "--slot", RECV_SLOT, "--start"])
            .args(["--no-loop", "--file", "/dev/null"])
            .args(["--option", "proto_version=1"])
            .args(["--option", &format!("publication_names={RECV_PUBLICATION}")])
            .stdin(Stdio::null())
            .spawn()?;
        let recvlogical = RecvLogical { child };
        let started = Instant::now();
        loop {
            let streaming: bool = db
                .query_one(
                    "SELECT EXISTS (SELECT FROM pg_replication_slots s
                       JOIN pg_stat_replication r ON r.pid = s.active_pid
                       WHERE s.slot_name = $1 AND r.state = 'streaming')",
                    &[&RECV_SLOT],
                )
                .await?
                .get(0);
            if streaming {
                return Ok(recvlogical);
            }
            if started.elapsed() > CATCH_UP_TIMEOUT {
                return Err("pg_recvlogical did not start streaming".into());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Stops `pg_recvlogical` and drops its slot once its walsender has gone.
    async fn stop(mut self, db: &tokio_postgres::Client) -> Result<(), Error> {
        tokio::task::block_in_place(|| {
            syncline_testkit::stop_process(&mut self.child, libc::SIGTERM);
        });
        let started = Instant::now();
        loop {
            let active: bool = db
                .query_one(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                    &[&RECV_SLOT],
                )
                .await?
                .get(0);
            if !active {
                return sql(
                    db,
                    &format!("SELECT pg_drop_replication_slot('{RECV_SLOT}')"),
                )
                .await;
            }
            if started.elapsed() > CATCH_UP_TIMEOUT {
                return Err("pg_recvlogical's walsender did not end".into());
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// `d` in milliseconds, rounded to three decimals.
fn ms(d: Duration) -> f64 {
    round3(d.as_secs_f64() * 1000.0)
}

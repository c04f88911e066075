//! `electric unrelated-shapes` (Electric's scenario 3): S shapes on `users` that share no row,
//! `where=name = 'bench <k>'` (which Syncline's router finds by hash) or `where=name ILIKE
//! 'bench <k>'` (evaluated shape by shape), one live client on one of them, and single-row
//! inserts into that shape alone, one at a time. Each write is timed from just before its
//! `COMMIT` is sent until the client has read the answer holding the row.

use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::client::Error;
use super::{ms_since, pool, round3, scenario_json, sync_all, users_client, Bench, Latencies};
use crate::readonly::sql;

/// Writes timed per point.
const WRITES: usize = 20;
/// Shape requests in flight at once while the shapes are created.
const CREATE_CONCURRENCY: usize = 64;
/// Pause between sending the live request and the write, so the server holds the request.
const LIVE_SETTLE: Duration = Duration::from_millis(200);
/// The point of the `=` headline figure.
const HEADLINE_EQ: usize = 100_000;
/// The point of the `ILIKE` headline figure.
const HEADLINE_ILIKE: usize = 10_000;

/// The where clause form of a series of points.
#[derive(Clone, Copy)]
enum Form {
    /// `name = 'bench <k>'`.
    Eq,
    /// `name ILIKE 'bench <k>'`.
    Ilike,
}

impl Form {
    /// The where clause of shape `k`.
    fn where_clause(self, k: usize) -> String {
        match self {
            Form::Eq => format!("name = 'bench {k}'"),
            Form::Ilike => format!("name ILIKE 'bench {k}'"),
        }
    }

    /// The suffix of the form's headline keys.
    fn key(self) -> &'static str {
        match self {
            Form::Eq => "eq",
            Form::Ilike => "ilike",
        }
    }
}

/// Runs the points of `unrelated-shapes`: `eq_points` with `=` shapes, then `ilike_points`
/// with `ILIKE` shapes.
pub(super) async fn unrelated_shapes(
    bench: &mut Bench,
    eq_points: &[usize],
    ilike_points: &[usize],
) -> Result<Value, Error> {
    let mut results = Vec::new();
    let mut headline = Map::new();
    headline.insert(format!("p50_ms_at_{HEADLINE_EQ}_eq"), Value::Null);
    headline.insert(format!("p50_ms_at_{HEADLINE_ILIKE}_ilike"), Value::Null);
    for (form, points) in [(Form::Eq, eq_points), (Form::Ilike, ilike_points)] {
        for &n in points {
            let point = point(bench, form, n).await?;
            for p in [50, 99] {
                headline.insert(
                    format!("p{p}_ms_at_{n}_{}", form.key()),
                    point["latency"][if p == 50 { "median_ms" } else { "p99_ms" }].clone(),
                );
            }
            results.push(point);
        }
    }
    Ok(scenario_json(
        headline,
        json!({
            "shapes": "where=name = 'bench <k>' (eq) or where=name ILIKE 'bench <k>' (ilike), k = 1..=S, on users: each shape empty until written, no row in two shapes",
            "eq_shapes": eq_points,
            "ilike_shapes": ilike_points,
            "shape_creation": format!("each shape read from offset=-1 until up to date, no live request, {CREATE_CONCURRENCY} at once"),
            "client": "one live client on shape k = S, applying rows by key",
            "writes": WRITES,
            "write": "a single-row INSERT of name 'bench <S>' (only in shape k = S), one at a time",
            "latency": "per write, from just before COMMIT is sent until the client has read the answer holding the row; commit_ms is until Postgres acknowledged the COMMIT",
            "headline": format!("p50_ms_at_{HEADLINE_EQ}_eq and p50_ms_at_{HEADLINE_ILIKE}_ilike are null unless that point ran"),
        }),
        results,
    ))
}

/// One point: a fresh server, `n` shapes of `form`, [`WRITES`] timed writes into the last.
async fn point(bench: &mut Bench, form: Form, n: usize) -> Result<Value, Error> {
    let server = bench.server().await?;
    let http = pool();
    let started = Instant::now();
    let errors = sync_all(
        (1..n).map(|k| users_client(&http, &server, Some(&form.where_clause(k)), false)),
        CREATE_CONCURRENCY,
    )
    .await?;
    let mut watcher = users_client(&http, &server, Some(&form.where_clause(n)), true)?;
    watcher.sync().await?;
    let created = started.elapsed();
    if errors.count > 0 {
        return Err(format!(
            "unrelated_shapes: {} of {n} shapes failed, first: {:?}",
            errors.count, errors.first
        )
        .into());
    }
    let before = server.sample()?;
    let (mut ms, mut commit_ms) = (Vec::new(), Vec::new());
    for w in 0..WRITES {
        let had = watcher.rows().map_or(0, |rows| rows.len());
        let wait = tokio::spawn(async move {
            let answer = watcher.wait_changes(1, || {}).await;
            (watcher, answer)
        });
        tokio::time::sleep(LIVE_SETTLE).await;
        sql(
            &bench.db,
            &format!(
                "BEGIN; INSERT INTO public.users
                   VALUES (gen_random_uuid(), 'bench {n}', 'write{w}@example.com')"
            ),
        )
        .await?;
        let sent = Instant::now();
        sql(&bench.db, "COMMIT").await?;
        commit_ms.push(ms_since(sent, Instant::now()));
        let (back, answer) = wait.await?;
        watcher = back;
        ms.push(ms_since(sent, answer?.at));
        let has = watcher.rows().map_or(0, |rows| rows.len());
        if has != had + 1 {
            return Err(format!(
                "unrelated_shapes: the client held {has} rows after the write, not {}",
                had + 1
            )
            .into());
        }
    }
    let after = server.sample()?;
    let in_order: Vec<f64> = ms.iter().map(|&x| round3(x)).collect();
    let latencies = Latencies::new(ms);
    let commits = Latencies::new(commit_ms);
    eprintln!(
        "unrelated_shapes {n} {} shapes: p50 {} ms, p99 {} ms (commit p50 {} ms), created in {:.1} s",
        form.key(),
        latencies.percentile(50),
        latencies.percentile(99),
        commits.percentile(50),
        created.as_secs_f64()
    );
    let result = json!({
        "shapes": n,
        "where": form.key(),
        "latency": latencies.summary(),
        "per_write_ms_in_order": in_order,
        "commit_ms": commits.summary(),
        "shapes_created_ms": round3(created.as_secs_f64() * 1000.0),
        "rss_bytes_idle": server.idle.rss_bytes,
        "rss_bytes_before_writes": before.rss_bytes,
        "rss_bytes_after_writes": after.rss_bytes,
        "peak_rss_bytes": after.peak_rss_bytes,
        "cpu_s_create": before.cpu_s_since(&server.idle),
        "cpu_s_writes": after.cpu_s_since(&before),
    });
    drop(http);
    bench.finish(server).await?;
    Ok(result)
}

//! `electric single-shape` (Electric's scenario 2): one client syncs one shape of a large
//! table, from `offset=-1` through every chunk until `electric-up-to-date`. The table has
//! `users`'s row layout and is refilled by `generate_series` in Postgres before each point's
//! server starts, so the server sees only the snapshot.

use std::time::Instant;

use serde_json::{json, Map, Value};

use super::client::{Error, LiveMode, ShapeClient};
use super::{ms_since, per, pool, round3, scenario_json, without_users_rows, Bench};
use crate::readonly::sql;

/// The table of this scenario, in `public`.
const TABLE: &str = "single_shape_users";

/// Runs the points of `single-shape`: for each row count, a fresh server and one client.
pub(super) async fn single_shape(bench: &mut Bench, points: &[u64]) -> Result<Value, Error> {
    let mut results = Vec::new();
    let mut headline = Map::new();
    sql(
        &bench.db,
        &format!(
            "CREATE TABLE IF NOT EXISTS public.{TABLE} (id uuid PRIMARY KEY, name text, email text)"
        ),
    )
    .await?;
    for &rows in points {
        let filled = Instant::now();
        sql(
            &bench.db,
            &format!(
                "TRUNCATE public.{TABLE};
                 INSERT INTO public.{TABLE}
                   SELECT gen_random_uuid(), 'user ' || g, 'user' || g || '@example.com'
                   FROM generate_series(1, {rows}) g;"
            ),
        )
        .await?;
        sql(&bench.db, &format!("VACUUM ANALYZE public.{TABLE}")).await?;
        let filled = filled.elapsed();
        let server = bench.server().await?;
        let http = pool();
        let mut client = ShapeClient::new(
            http,
            server.url(),
            &[("table", TABLE)],
            LiveMode::LongPoll,
            false,
        )?;
        let start = Instant::now();
        let first = client.request().await?;
        let answer = if first.up_to_date {
            first
        } else {
            client.sync().await?
        };
        let after = server.sample()?;
        let stats = client.stats();
        if stats.changes != rows {
            return Err(format!(
                "single_shape: the client received {} rows of {rows}",
                stats.changes
            )
            .into());
        }
        let up_to_date_ms = ms_since(start, answer.at);
        eprintln!(
            "single_shape {rows} rows: up to date in {up_to_date_ms:.1} ms ({} requests), peak RSS {} MiB",
            stats.requests,
            after.peak_rss_bytes >> 20
        );
        headline.insert(
            format!("up_to_date_ms_at_{rows}"),
            round3(up_to_date_ms).into(),
        );
        results.push(json!({
            "rows": rows,
            "up_to_date_ms": round3(up_to_date_ms),
            "first_answer_ms": round3(ms_since(start, first.at)),
            "rows_per_s": round3(rows as f64 / (up_to_date_ms / 1000.0)),
            "requests": stats.requests,
            "table_filled_ms": round3(filled.as_secs_f64() * 1000.0),
            "rss_bytes_idle": server.idle.rss_bytes,
            "rss_bytes_after": after.rss_bytes,
            "peak_rss_bytes": after.peak_rss_bytes,
            "rss_bytes_per_row": per(after.rss_bytes.saturating_sub(server.idle.rss_bytes), usize::try_from(rows)?),
            "cpu_s": after.cpu_s_since(&server.idle),
        }));
        bench.finish(server).await?;
    }
    sql(&bench.db, &format!("DROP TABLE public.{TABLE}")).await?;
    Ok(without_users_rows(scenario_json(
        headline,
        json!({
            "shape": format!("table={TABLE}: every row, one client"),
            "table": format!("{TABLE}(id uuid primary key, name text, email text), filled with generate_series before the point's server starts"),
            "table_rows": points,
            "latency": "from the client's first request (offset=-1) until it has read the answer with electric-up-to-date, following every chunk",
        }),
        results,
    )))
}

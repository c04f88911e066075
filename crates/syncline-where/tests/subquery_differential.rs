//! Subqueries against Postgres: random clauses over a parent/child/org schema with NULLs,
//! mixing `IN`, `NOT IN` and the row form under AND/OR/NOT, nested two levels, with `$n`
//! inside. For each accepted clause, with the value sets filled by running each subquery's SQL:
//! (a) Postgres evaluates `Where::sql()` (and the user's text) exactly as `eval_in` does on every
//! row (true, false or NULL), so `includes_in` selects exactly its rows; (b) `sql_with_views`
//! gives the same; (c) `active_conditions` equal Postgres's evaluation of each position, and
//! `includes_in` is true exactly when some disjunct has all its positions true; the rendered
//! SQL checks to itself, and `tags` equal what `slot_sql` computes in Postgres.

mod common;

use bytes::Bytes;
use common::family::{self, pick, Gen, SetViews};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use syncline_core::tuple::Value;
use syncline_where::{Row, RowTypes, Where};
use tokio_postgres::{Client, SimpleQueryMessage};

/// The seed every run uses.
const SEED_FIXED: u64 = 0x5EED_5B0C;
/// Clauses per seed.
const CLAUSES: usize = 300;
/// Fewest accepted clauses per seed (the rest are rejected for polarity or DNF size).
const ACCEPTED_MIN: usize = 200;
/// The parameters every clause gets (`$1` int, `$2` numeric, `$3` text).
const PARAMS: &[&str] = &["1", "1.5", "eu"];

fn rows_of(messages: &[SimpleQueryMessage]) -> Vec<Vec<Option<String>>> {
    messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_string))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

async fn query(client: &Client, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    client
        .simple_query(sql)
        .await
        .map(|m| rows_of(&m))
        .map_err(|e| {
            e.as_db_error()
                .map_or(e.to_string(), |d| d.message().to_string())
                + " in "
                + sql
        })
}

/// A literal from `items` (quoted when `quote`), or NULL one time in six.
fn maybe(rng: &mut StdRng, items: &[&str], quote: bool) -> String {
    if rng.gen_ratio(1, 6) {
        return "NULL".to_string();
    }
    let v = pick(rng, items).replace('\'', "''");
    if quote {
        format!("'{v}'")
    } else {
        v
    }
}

/// Random rows for the three tables, with NULLs and values equal under different texts.
fn data_sql(rng: &mut StdRng) -> String {
    let mut sql = String::from("TRUNCATE child, parent, org;");
    let ints = |n: usize| -> Vec<String> { (1..=n).map(|i| i.to_string()).collect() };
    let (six, fourteen) = (ints(6), ints(14));
    let six: Vec<&str> = six.iter().map(String::as_str).collect();
    let fourteen: Vec<&str> = fourteen.iter().map(String::as_str).collect();
    let names = ["a", "ab", "b", "x", "it's"];
    let moods = ["sad", "ok", "happy"];
    let floats = ["0", "-0", "1.5", "NaN", "0.1", "1e300"];
    let spans = [
        "1 day",
        "24:00:00",
        "1 mon",
        "30 days",
        "-1 days 48:00:00",
        "00:00:00",
    ];
    let mut values = Vec::new();
    for id in 1..=5 {
        let row = [
            id.to_string(),
            maybe(rng, &["eu", "us", "ap"], true),
            maybe(rng, &["true", "false"], false),
        ];
        values.push(format!("({})", row.join(", ")));
    }
    sql.push_str(&format!("INSERT INTO org VALUES {};", values.join(", ")));
    values.clear();
    for id in 1..=12 {
        let row = [
            id.to_string(),
            maybe(rng, &six, false),
            maybe(rng, &names, true),
            maybe(rng, &["true", "false"], false),
            maybe(rng, &["1.5", "1.50", "2", "0", "-0.0", "3.25"], false),
            maybe(rng, &["ab", "a", "x", "ab  "], true),
            maybe(rng, &moods, true),
            maybe(rng, &floats, true),
            maybe(rng, &spans, true),
        ];
        values.push(format!("({})", row.join(", ")));
    }
    sql.push_str(&format!("INSERT INTO parent VALUES {};", values.join(", ")));
    values.clear();
    for id in 1..=40 {
        let row = [
            id.to_string(),
            maybe(rng, &fourteen, false),
            maybe(rng, &six, false),
            maybe(rng, &names, true),
            maybe(rng, &["true", "false"], false),
            maybe(rng, &["1.5", "1.500", "2.0", "3", "0"], false),
            maybe(rng, &["ab", "a", "x"], true),
            maybe(rng, &moods, true),
            maybe(rng, &floats, true),
            maybe(rng, &spans, true),
        ];
        values.push(format!("({})", row.join(", ")));
    }
    sql.push_str(&format!("INSERT INTO child VALUES {};", values.join(", ")));
    sql
}

/// `text` with `$n` replaced by its parameter as an untyped literal.
fn inline(text: &str) -> String {
    let mut sql = text.to_string();
    for (i, p) in PARAMS.iter().enumerate().rev() {
        sql = sql.replace(&format!("${}", i + 1), &format!("'{p}'"));
    }
    sql
}

/// Each row's value of a boolean SQL expression, as `Some("true" | "false")` or `None`.
async fn per_row(client: &Client, sql: &str) -> Result<Vec<Option<String>>, String> {
    let rows = query(
        client,
        &format!("SELECT ({sql})::text FROM child ORDER BY id"),
    )
    .await?;
    Ok(rows.into_iter().map(|r| r[0].clone()).collect())
}

fn as_text(v: Option<bool>) -> Option<String> {
    v.map(|b| b.to_string())
}

async fn run_seed(client: &Client, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    client
        .batch_execute(&data_sql(&mut rng))
        .await
        .expect("rows");
    let messages = client
        .simple_query("SELECT * FROM child ORDER BY id")
        .await
        .expect("child rows");
    let rows: Vec<Vec<Value>> = rows_of(&messages)
        .into_iter()
        .map(|r| {
            r.into_iter()
                .map(|v| v.map_or(Value::Null, |s| Value::Text(Bytes::from(s))))
                .collect()
        })
        .collect();
    let child = family::relation("child");
    let types = RowTypes::of(&child);
    let params: Vec<String> = PARAMS.iter().map(|p| p.to_string()).collect();
    let (mut accepted, mut positions, mut failures) = (0usize, 0usize, Vec::new());
    let mut rejected = std::collections::BTreeMap::<String, usize>::new();
    for _ in 0..CLAUSES {
        let text = Gen { rng: &mut rng }.clause(3);
        let w = match Where::with_tables(&text, &child, &params, &family::tables) {
            Ok(w) => w,
            Err(e) => {
                *rejected.entry(e.message).or_default() += 1;
                continue;
            }
        };
        accepted += 1;
        let fail = |what: String| format!("seed {seed} where `{text}` ({}): {what}", w.sql());
        match Where::with_tables(w.sql(), &child, &params, &family::tables) {
            Ok(again) if again.sql() == w.sql() => {}
            other => failures.push(fail(format!(
                "checks again as {:?}",
                other.map(|a| a.sql().to_string())
            ))),
        }
        // The value sets, from each subquery's SQL run by Postgres.
        let mut raw = Vec::new();
        let mut views = SetViews::default();
        for s in w.subqueries() {
            let tuples = query(client, &format!("SELECT * FROM ({}) s", s.sql))
                .await
                .expect("subquery");
            views.0.push(
                tuples
                    .iter()
                    .map(|t| {
                        let t: Vec<Option<&str>> = t.iter().map(Option::as_deref).collect();
                        s.normalize(&t)
                    })
                    .collect(),
            );
            raw.push(tuples);
        }
        let postgres = match per_row(client, w.sql()).await {
            Ok(r) => r,
            Err(e) => {
                failures.push(fail(format!("postgres fails: {e}")));
                continue;
            }
        };
        // (a) the rendered SQL and the user's text agree with evaluation on every row.
        let user = per_row(client, &inline(&text)).await;
        if user.as_ref() != Ok(&postgres) {
            failures.push(fail(format!(
                "the user's text gives {user:?}, the SQL {postgres:?}"
            )));
        }
        let with_views = w.sql_with_views(&|i| raw[i].clone());
        let by_views = per_row(client, &with_views).await;
        if by_views.as_ref() != Ok(&postgres) {
            failures.push(fail(format!(
                "(b) sql_with_views `{with_views}` gives {by_views:?}, the SQL {postgres:?}"
            )));
        }
        // (c) each position as Postgres evaluates it.
        let dnf = w.dnf();
        positions += dnf.positions.len();
        let prefix = "stack'handle";
        let columns: Vec<String> = (0..dnf.positions.len())
            .map(|p| format!("COALESCE({}, false)::text", w.position_sql(p)))
            .chain((0..dnf.positions.len()).map(|p| w.slot_sql(p, prefix)))
            .collect();
        let conditions = if columns.is_empty() {
            Ok(vec![Vec::new(); rows.len()])
        } else {
            query(
                client,
                &format!("SELECT {} FROM child ORDER BY id", columns.join(", ")),
            )
            .await
        };
        let conditions = match conditions {
            Ok(c) => c,
            Err(e) => {
                failures.push(fail(format!("positions fail in postgres: {e}")));
                continue;
            }
        };
        for (i, values) in rows.iter().enumerate() {
            let row = Row::new(&types, values);
            let got = w.eval_in(&row, &views).map(as_text);
            if got.as_ref() != Ok(&postgres[i]) {
                failures.push(fail(format!(
                    "(a) row {values:?}: postgres {:?}, eval_in {got:?}",
                    postgres[i]
                )));
                break;
            }
            let included = w.includes_in(&row, &views);
            if included != (postgres[i].as_deref() == Some("true")) {
                failures.push(fail(format!("(a) row {values:?}: includes_in {included}")));
                break;
            }
            let active = w.active_conditions(&row, &views);
            let (expected, slots) = conditions[i].split_at(dnf.positions.len());
            let expected: Vec<bool> = expected
                .iter()
                .map(|v| v.as_deref() == Some("true"))
                .collect();
            if active != expected {
                failures.push(fail(format!(
                    "(c) row {values:?}: active_conditions {active:?}, postgres {expected:?}"
                )));
                break;
            }
            let by_dnf = dnf.disjuncts.iter().any(|d| d.iter().all(|&p| active[p]));
            if by_dnf != included {
                failures.push(fail(format!(
                    "row {values:?}: includes_in {included}, DNF of active_conditions {by_dnf}"
                )));
                break;
            }
            // Tags: one per disjunct, one slot per position, each the one `slot_sql` gives
            // in Postgres (or empty outside the disjunct).
            let tags = w.tags(&row, prefix);
            let expected_tags: Vec<String> = dnf
                .disjuncts
                .iter()
                .map(|d| {
                    (0..dnf.positions.len())
                        .map(|p| match d.contains(&p) {
                            true => slots[p].clone().unwrap_or_default(),
                            false => String::new(),
                        })
                        .collect::<Vec<_>>()
                        .join("/")
                })
                .collect();
            if tags != expected_tags {
                failures.push(fail(format!(
                    "row {values:?}: tags {tags:?}, by slot_sql in postgres {expected_tags:?}"
                )));
                break;
            }
        }
    }
    println!(
        "seed {seed}: {accepted} clauses accepted ({positions} positions), {} rejected: {rejected:?}",
        CLAUSES - accepted
    );
    assert!(
        failures.is_empty(),
        "{} failures, first ones:\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
    assert!(
        accepted >= ACCEPTED_MIN,
        "only {accepted} clauses accepted: {rejected:?}"
    );
}

#[test]
fn subqueries_agree_with_postgres() {
    common::with_server("where_subquery_diff", async |client| {
        client
            .batch_execute(&family::create_sql())
            .await
            .expect("schema");
        run_seed(client, SEED_FIXED).await;
        run_seed(client, common::random_seed("subquery differential")).await;
    });
}

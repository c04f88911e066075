//! `timezone(zone, ts)` / `ts AT TIME ZONE zone` against Postgres as the oracle, value by value
//! (the text of the result, or the error message): every zone of the random generator's list
//! at chosen instants through parse, check and rendering, and every IANA zone of that list at
//! each of its transitions from 1900 to 2037 (a second before, at, half a second after, an hour
//! before; local times skipped and repeated around it) through evaluation.

mod common;

use bytes::Bytes;
use syncline_core::tuple::Value;
use syncline_where::{Row, RowTypes, Where};
use tokio_postgres::{Client, SimpleQueryMessage};

/// A result as text, or the error message.
type Outcome = Result<Option<String>, String>;

/// Instants (timestamptz): transitions of New York, Sydney, Berlin, Moscow and Apia's skipped
/// day, the earliest timestamp, before 1900, in the far future (past the tz database's
/// explicit transitions).
const INSTANTS: &[&str] = &[
    "'2024-03-10 06:59:59.5+00'",
    "'2024-03-10 07:00:00+00'",
    "'2024-11-03 05:59:59+00'",
    "'2024-11-03 06:00:00+00'",
    "'2024-04-06 16:00:00+00'",
    "'2024-10-05 16:00:00+00'",
    "'2024-10-27 01:00:00+00'",
    "'2012-07-01 00:00:00+00'",
    "'2005-07-01 00:00:00+00'",
    "'2011-12-30 10:00:00+00'",
    "'1890-06-01 12:00:00+00'",
    "'2150-07-01 12:00:00+00'",
    "'1999-12-31 23:59:59.999999+00'",
    "'4714-11-24 00:00:00+00 BC'",
    "'infinity'",
    "'-infinity'",
    "NULL",
];

/// Local times (timestamp): skipped and repeated hours of the same zones, and the earliest.
const LOCAL_TIMES: &[&str] = &[
    "'2024-03-10 02:30:00'",
    "'2024-03-10 03:00:00'",
    "'2024-11-03 01:30:00'",
    "'2024-11-03 02:00:00'",
    "'2024-04-07 02:30:00'",
    "'2024-10-06 02:30:00'",
    "'2024-10-27 02:30:00'",
    "'2024-03-31 02:30:00'",
    "'2011-12-30 12:00:00'",
    "'1890-06-01 12:00:00'",
    "'2150-07-01 12:00:00'",
    "'4714-11-24 00:30:00 BC'",
    "'infinity'",
    "NULL",
];

/// A row of the test table with `values` in the named columns and NULL elsewhere.
fn row_with(values: &[(&str, Option<&str>)]) -> Vec<Value> {
    let relation = common::relation();
    let mut row = vec![Value::Null; relation.columns.len()];
    for (name, value) in values {
        let (index, _) = relation.column(name).expect("column");
        if let Some(text) = value {
            row[index] = Value::Text(Bytes::from(text.to_string()));
        }
    }
    row
}

/// Checks `text` (a constant timestamp expression) through the public API: the clause
/// `(text) IS NOT DISTINCT FROM column` must fold the expression to a constant, render SQL
/// that checks to the same SQL again, and be true on a row whose `column` holds Postgres's
/// value. Returns Syncline's outcome (the expected one, or what differs) and the rendered SQL.
fn syncline(text: &str, column: &str, want: &Outcome) -> (Outcome, Option<String>) {
    let relation = common::relation();
    let clause = format!("({text}) IS NOT DISTINCT FROM {column}");
    let w = match Where::new(&clause, &relation, &[]) {
        Ok(w) => w,
        Err(e) => return (Err(e.message), None),
    };
    let sql = w.sql().to_string();
    let again = Where::new(&sql, &relation, &[]).map(|w| w.sql().to_string());
    assert_eq!(again, Ok(sql.clone()), "{text} rendered {sql}");
    if sql.contains("timezone(") {
        return (Err(format!("not folded: {sql}")), Some(sql));
    }
    let Ok(value) = want else {
        return (Ok(Some(format!("a value ({sql})"))), Some(sql));
    };
    let values = row_with(&[(column, value.as_deref())]);
    let types = RowTypes::of(&relation);
    match w.eval(&Row::new(&types, &values)) {
        Ok(Some(true)) => (want.clone(), Some(sql)),
        other => (
            Ok(Some(format!("not {value:?}: {other:?} ({sql})"))),
            Some(sql),
        ),
    }
}

async fn postgres(client: &Client, text: &str) -> Outcome {
    match client.simple_query(&format!("SELECT ({text})::text")).await {
        Ok(messages) => Ok(messages
            .iter()
            .find_map(|m| match m {
                SimpleQueryMessage::Row(row) => Some(row.get(0).map(str::to_string)),
                _ => None,
            })
            .flatten()),
        Err(e) => Err(e
            .as_db_error()
            .map_or(e.to_string(), |d| d.message().to_string())),
    }
}

async fn chosen_instants(client: &Client) -> usize {
    let zones = common::ZONES.iter().filter(|z| !matches!(**z, "iv" | "t"));
    let mut failures = Vec::new();
    let mut compared = 0;
    for zone in zones {
        let cases = INSTANTS
            .iter()
            .map(|ts| (format!("timezone({zone}, {ts}::timestamptz)"), "ts"))
            .chain(
                LOCAL_TIMES
                    .iter()
                    .map(|ts| (format!("{ts}::timestamp AT TIME ZONE {zone}"), "tz")),
            );
        for (text, column) in cases {
            compared += 1;
            let want = postgres(client, &text).await;
            let (got, sql) = syncline(&text, column, &want);
            let rendered = match (&sql, &want) {
                (Some(sql), Ok(value)) => {
                    let ty = if column == "ts" {
                        "timestamp"
                    } else {
                        "timestamptz"
                    };
                    let literal = value
                        .as_ref()
                        .map_or("NULL".to_string(), |v| format!("'{v}'"));
                    let query =
                        format!("(SELECT ({sql}) FROM (SELECT {literal}::{ty} AS {column}) v)");
                    match postgres(client, &query).await {
                        Ok(Some(t)) if t == "true" => want.clone(),
                        other => Err(format!("rendered SQL gives {other:?}")),
                    }
                }
                _ => want.clone(),
            };
            if want != got || want != rendered {
                failures.push(format!(
                    "{text}: postgres {want:?}, syncline {got:?}, rendered {sql:?} {rendered:?}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    compared
}

/// UTC instants and local times (microseconds) around each transition of `zone` in 1900-2037.
fn around_transitions(zone: &str) -> (Vec<i64>, Vec<i64>) {
    const SEC: i64 = 1_000_000;
    let tz = tzdb_data::find_tz(zone.as_bytes()).expect("zone");
    let (types, transitions) = (tz.local_time_types(), tz.transitions());
    let (mut instants, mut locals) = (Vec::new(), Vec::new());
    for (i, tr) in transitions.iter().enumerate() {
        let t = tr.unix_leap_time();
        if !(-2_208_988_800..2_145_916_800).contains(&t) {
            continue;
        }
        let after = types[tr.local_time_type_index()].ut_offset() as i64;
        let before = match i {
            0 => types[0].ut_offset() as i64,
            _ => types[transitions[i - 1].local_time_type_index()].ut_offset() as i64,
        };
        instants.extend([-SEC, 0, SEC / 2, -3600 * SEC].map(|d| t * SEC + d));
        for s in [t + before - 1, t + before, t + after - 1, t + after] {
            locals.extend([s * SEC, s * SEC + SEC / 2]);
        }
        locals.push((t + (before + after) / 2) * SEC);
    }
    (instants, locals)
}

/// A timestamp (microseconds since 1970) as Postgres input text, with `+00` for timestamptz.
fn micros_text(micros: i64, with_zone: bool) -> String {
    let t = chrono::DateTime::from_timestamp_micros(micros)
        .expect("instant in range")
        .naive_utc();
    let zone = if with_zone { "+00" } else { "" };
    format!("{}{zone}", t.format("%Y-%m-%d %H:%M:%S%.6f"))
}

/// Compares every zone of `names` around its transitions; returns the cases compared and the
/// disagreements. Syncline evaluates `timezone(zone, input) IS NOT DISTINCT FROM output` on rows
/// of each input and Postgres's result, which must all be true.
async fn around_transitions_of(client: &Client, names: &[&str]) -> (usize, Vec<String>) {
    let relation = common::relation();
    let types = RowTypes::of(&relation);
    let mut failures = Vec::new();
    let mut compared = 0;
    for name in names {
        let (instants, locals) = around_transitions(name);
        for (to_utc, values) in [(false, instants), (true, locals)] {
            if values.is_empty() {
                continue;
            }
            let (ty, input, output) = if to_utc {
                ("timestamp", "ts", "tz")
            } else {
                ("timestamptz", "tz", "ts")
            };
            let rows: Vec<String> = values
                .iter()
                .map(|v| format!("('{}'::{ty})", micros_text(*v, !to_utc)))
                .collect();
            let sql = format!(
                "SELECT x::text, timezone('{name}', x)::text FROM (VALUES {}) v(x)",
                rows.join(", ")
            );
            let messages = client.simple_query(&sql).await.expect("timezone query");
            let clause = format!("timezone('{name}', {input}) IS NOT DISTINCT FROM {output}");
            let w = Where::new(&clause, &relation, &[]).expect("timezone clause");
            for row in rows_of(&messages) {
                compared += 1;
                let (at, want) = (row[0].as_deref(), row[1].as_deref());
                let values = row_with(&[(input, at), (output, want)]);
                let got = w.eval(&Row::new(&types, &values));
                if got != Ok(Some(true)) {
                    failures.push(format!(
                        "{name} {at:?}: postgres {want:?}, syncline's `{clause}` gives {got:?}"
                    ));
                }
            }
        }
    }
    (compared, failures)
}

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

fn assert_none(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} disagree, first ones:\n{}",
        failures.len(),
        failures[..failures.len().min(20)].join("\n")
    );
}

#[test]
fn timezone_agrees_with_postgres() {
    common::with_server("where_timezone", async |client| {
        let chosen = chosen_instants(client).await;
        let names: Vec<&str> = common::ZONES
            .iter()
            .map(|z| z.trim_matches('\''))
            .filter(|z| z.contains('/') && tzdb_data::find_tz(z.as_bytes()).is_some())
            .collect();
        let (around, failures) = around_transitions_of(client, &names).await;
        assert_none(&failures);
        println!("timezone: {chosen} chosen cases and {around} transition cases agree");
    });
}

/// Every zone the server knows, around every transition from 1900 to 2037: shows where the
/// server's tz database and Syncline's differ (`cargo test -p syncline-where --test timezone
/// -- --ignored`). Not run by default: it depends on the server's tz database version.
#[test]
#[ignore]
fn tz_database_matches_server() {
    common::with_server("where_timezone", async |client| {
        let rows = client
            .query("SELECT name FROM pg_timezone_names ORDER BY name", &[])
            .await
            .expect("zone names");
        let names: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        let (known, unknown): (Vec<&str>, Vec<&str>) = names
            .iter()
            .map(String::as_str)
            .partition(|n| tzdb_data::find_tz(n.as_bytes()).is_some());
        let unknown: Vec<&str> = unknown
            .into_iter()
            .filter(|n| !n.starts_with("posix/") && !n.starts_with("right/"))
            .collect();
        println!("names only the server knows (besides posix/ and right/): {unknown:?}");
        let (compared, failures) = around_transitions_of(client, &known).await;
        println!("{compared} cases compared");
        assert_none(&failures);
    });
}

//! `timezone(zone, ts)` / `ts AT TIME ZONE zone` against Postgres as the oracle, value by value
//! (the text of the result, or the error message): every zone of the random generator's list
//! at chosen instants through parse, check and rendering, and every IANA zone of that list at
//! each of its transitions from 1900 to 2037 (a second before, at, half a second after, an hour
//! before; local times skipped and repeated around it) through evaluation.

mod common;

use syncline_where::check::check_value;
use syncline_where::expr::Expr;
use syncline_where::parse::parse_order_by;
use syncline_where::render::render;
use syncline_where::value::datetime::timestamp_to_text;
use syncline_where::value::timezone::{timezone, ZoneArg};
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

/// Parses and checks an expression (constant ones are folded, i.e. evaluated).
fn check(text: &str) -> Result<Expr, String> {
    let items = parse_order_by(text).map_err(|e| e.message)?;
    let node = items[0].node.as_deref().ok_or("no expression")?;
    check_value(node, &common::relation(), &[]).map_err(|e| e.message)
}

/// A constant expression's value by Syncline, and its rendering (which must check to the same).
fn syncline(text: &str) -> (Outcome, Option<String>) {
    let expr = match check(text) {
        Ok(expr) => expr,
        Err(e) => return (Err(e), None),
    };
    let sql = render(&expr);
    assert_eq!(check(&sql), Ok(expr.clone()), "{text} rendered {sql}");
    match expr {
        Expr::Const { value, ty } => (Ok(value.map(|v| v.to_text(&ty))), Some(sql)),
        other => (Err(format!("not folded: {other:?}")), None),
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
            .map(|ts| format!("timezone({zone}, {ts}::timestamptz)"))
            .chain(
                LOCAL_TIMES
                    .iter()
                    .map(|ts| format!("{ts}::timestamp AT TIME ZONE {zone}")),
            );
        for text in cases {
            compared += 1;
            let want = postgres(client, &text).await;
            let (got, sql) = syncline(&text);
            let rendered = match &sql {
                Some(sql) => postgres(client, sql).await,
                None => want.clone(),
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

/// Compares every zone of `names` around its transitions; returns the cases compared and the
/// disagreements.
async fn around_transitions_of(client: &Client, names: &[&str]) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    let mut compared = 0;
    for name in names {
        let (instants, locals) = around_transitions(name);
        for (to_utc, values) in [(false, instants), (true, locals)] {
            if values.is_empty() {
                continue;
            }
            let ty = if to_utc { "timestamp" } else { "timestamptz" };
            let rows: Vec<String> = values
                .iter()
                .map(|v| format!("('{}'::{ty})", timestamp_to_text(*v, !to_utc)))
                .collect();
            let sql = format!(
                "SELECT timezone('{name}', x)::text FROM (VALUES {}) v(x)",
                rows.join(", ")
            );
            let messages = client.simple_query(&sql).await.expect("timezone query");
            let want = messages.iter().filter_map(|m| match m {
                SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
                _ => None,
            });
            for (value, want) in values.iter().zip(want) {
                compared += 1;
                let got = timezone(ZoneArg::Name(name), *value, to_utc)
                    .map(|v| timestamp_to_text(v, to_utc))
                    .map_err(|e| e.to_string());
                if got.as_ref() != Ok(&want) {
                    let at = timestamp_to_text(*value, !to_utc);
                    failures.push(format!("{name} {at}: postgres {want}, syncline {got:?}"));
                }
            }
        }
    }
    (compared, failures)
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

//! Client mistakes are reported when a clause is checked, with Postgres's message, never left to
//! fail the snapshot (which clients see as a 503 and retry forever), with Postgres as the
//! oracle: each listed mistake fails in Postgres with the message Syncline gives; and random
//! constant-heavy clauses that Syncline accepts must plan in Postgres (their rendered SQL, on an
//! empty table of the same columns), and their rendered SQL must check to the same SQL again.

mod common;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use syncline_where::{Where, WHERE_BYTES_MAX};
use tokio_postgres::Client;

/// Clauses (with `$n` parameters) that fail in Postgres on the row [`ROW_SQL`] inserts:
/// constant errors, and errors of every row that reaches them.
fn mistakes() -> Vec<(String, Vec<String>)> {
    let fixed: &[(&str, &[&str])] = &[
        ("t LIKE 'a' ESCAPE 'ab'", &[]),
        ("NULL LIKE 'a' ESCAPE 'ab'", &[]),
        ("t LIKE v ESCAPE 'ab'", &[]),
        ("t NOT ILIKE v ESCAPE $1", &["#!"]),
        ("t LIKE 'ab\\'", &[]),
        ("like(t, 'ab\\') AND i4 = 1", &[]),
        ("t LIKE 'ab#' ESCAPE '#'", &[]),
        ("t = $1", &["a\u{0}b"]),
        ("i4 IN (1, $2)", &["1", "\u{0}"]),
        ("1 = 1 / 0", &[]),
        ("d = '4714-11-23 BC'", &[]),
        ("ts > '4714-11-23 23:59:59 BC'", &[]),
        ("tz = '4714-11-24 00:00:00+01 BC'", &[]),
        ("'2000-01-01'::date + 2147483647 = d", &[]),
        ("j = '\"\\u0000\"'", &[]),
    ];
    let mut out: Vec<(String, Vec<String>)> = fixed
        .iter()
        .map(|(c, p)| (c.to_string(), p.iter().map(|p| p.to_string()).collect()))
        .collect();
    let args = vec!["t"; 101].join(", ");
    out.push((format!("concat({args}) = t"), Vec::new()));
    out
}

/// A row every mistake reaches.
const ROW_SQL: &str = "INSERT INTO t (id, i4, t, v) VALUES (1, 1, 'abc', 'a%')";

/// `text` with `$n` replaced by parameter `n` as an untyped literal (NUL as an escape, which
/// Postgres rejects as it would the value).
fn inline_params(text: &str, params: &[String]) -> String {
    let mut sql = text.to_string();
    for (i, p) in params.iter().enumerate().rev() {
        let literal = if p.contains('\0') {
            format!("E'{}'", p.replace('\\', "\\\\").replace('\0', "\\x00"))
        } else {
            format!("'{}'", p.replace('\'', "''"))
        };
        sql = sql.replace(&format!("${}", i + 1), &literal);
    }
    sql
}

/// Postgres's error message for `SELECT … WHERE sql`, if it fails.
async fn postgres_error(client: &Client, sql: &str) -> Option<String> {
    let query = format!("SELECT count(*) FROM t WHERE {sql}");
    client.simple_query(&query).await.err().map(|e| {
        e.as_db_error()
            .map_or(e.to_string(), |d| d.message().to_string())
    })
}

/// The message without Syncline's `At location N: ` prefix (Postgres reports the position
/// apart).
fn without_location(message: &str) -> &str {
    match message.strip_prefix("At location ") {
        Some(rest) => rest.split_once(": ").map_or(message, |(_, m)| m),
        None => message,
    }
}

#[test]
fn mistakes_fail_in_postgres_with_the_same_message() {
    common::with_server("where_mistakes", async |client| {
        client
            .batch_execute(&format!("{} {ROW_SQL}", common::create_table_sql()))
            .await
            .expect("table");
        let relation = common::relation();
        let mut failures = Vec::new();
        for (clause, params) in mistakes() {
            let syncline = match Where::new(&clause, &relation, &params) {
                Ok(w) => format!("accepted as {}", w.sql()),
                Err(e) => without_location(&e.message).to_string(),
            };
            let postgres = postgres_error(client, &inline_params(&clause, &params)).await;
            if postgres.as_deref() != Some(syncline.as_str()) {
                failures.push(format!(
                    "{clause}: postgres {postgres:?}, syncline {syncline}"
                ));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    });
}

/// Literal texts, read as every type: edges of each type's range and input syntax.
const LITERALS: &[&str] = &[
    "0",
    "1",
    "-1",
    "32767",
    "32768",
    "-32769",
    "2147483647",
    "2147483648",
    "-2147483649",
    "9223372036854775807",
    "9223372036854775808",
    "1.5",
    "-0.5",
    "1e10",
    "1e308",
    "1e309",
    "1e-400",
    "3.4e38",
    "3.5e38",
    "NaN",
    "Infinity",
    "-Infinity",
    "abc",
    "",
    " 7 ",
    "t",
    "yes",
    "2024-02-29",
    "2023-02-29",
    "24:00:00",
    "24:00:01",
    "1 day",
    "-1 mons 2 days 03:00:00",
    "178000000 years",
    "{1,2}",
    "{1,",
    "{{1},{2,3}}",
    "{}",
    "{NULL}",
    "[1, 2]",
    "{\"a\": 1}",
    "\"\\u0000\"",
    "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    "infinity",
    "-infinity",
    "epoch",
    "294276-12-31 23:59:59",
    "294277-01-01",
    "4714-11-24 00:00:00 BC",
    "4714-11-23 BC",
    "5874897-12-31",
    "5874898-01-01",
    "2024-01-01 00:00:00+15:59",
    "2024-01-01 00:00:00+16",
    "America/New_York",
    "a%",
    "ab\\",
    "#",
    "##",
];

/// Types with a column of each in the test table (the enum is left out: only Postgres knows
/// its labels).
/// Edge values of each type's input: the ends of its range, just past them, special values.
const TYPED_LITERALS: &[(&str, &[&str])] = &[
    ("int2", &["32767", "-32768", "32768", "0", "1"]),
    (
        "int4",
        &["2147483647", "-2147483648", "2147483648", "0", "7"],
    ),
    (
        "int8",
        &[
            "9223372036854775807",
            "-9223372036854775808",
            "9223372036854775808",
            "1",
        ],
    ),
    (
        "numeric",
        &[
            "1.5",
            "NaN",
            "Infinity",
            "1e1000",
            "1e1001",
            "1e-1000",
            "123456789012345678901234567890.5",
        ],
    ),
    (
        "float4",
        &[
            "3.4e38", "3.5e38", "1e-46", "1.4e-45", "NaN", "Infinity", "0.1",
        ],
    ),
    (
        "float8",
        &[
            "1e308",
            "1e309",
            "1e-330",
            "4.9e-324",
            "NaN",
            "-Infinity",
            "0.1",
        ],
    ),
    ("bool", &["t", "yes", "off", "1", "maybe"]),
    ("text", &["abc", "", "a%", "ab\\", "#", " x "]),
    ("varchar", &["abc", "", "a  ", "ab%"]),
    ("bpchar", &["a", "ab  ", "", "abcde", " "]),
    (
        "date",
        &[
            "2024-02-29",
            "2023-02-29",
            "infinity",
            "4714-11-24 BC",
            "4714-11-23 BC",
            "5874897-12-31",
            "5874898-01-01",
            "epoch",
        ],
    ),
    (
        "time",
        &[
            "24:00:00",
            "24:00:01",
            "23:59:59.9999995",
            "allballs",
            "12:00",
        ],
    ),
    (
        "timestamp",
        &[
            "294276-12-31 23:59:59.999999",
            "294277-01-01 00:00:00",
            "4714-11-24 00:00:00 BC",
            "4714-11-23 23:59:59 BC",
            "infinity",
            "epoch",
            "2024-03-10 02:30",
        ],
    ),
    (
        "timestamptz",
        &[
            "294276-12-31 23:59:59.999999+00",
            "294276-12-31 23:59:59-01",
            "4714-11-24 00:00:00+00 BC",
            "4714-11-24 00:00:00+01 BC",
            "4714-11-23 BC",
            "2024-01-01 00:00:00+15:59",
            "2024-01-01 00:00:00+16",
            "-infinity",
        ],
    ),
    (
        "interval",
        &[
            "1 day",
            "178000000 years",
            "-178000000 years",
            "2147483647 days",
            "2147483648 days",
            "1 mon 2 days",
            "9223372036854775807 microseconds",
            "P1Y",
        ],
    ),
    (
        "uuid",
        &[
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "{a0eebc999c0b4ef8bb6d6bb9bd380a11}",
        ],
    ),
    (
        "jsonb",
        &["{\"a\": 1}", "[1, 2]", "\"\\u0000\"", "1e400", "null", "-0"],
    ),
    (
        "int4[]",
        &[
            "{1,2}",
            "{1,",
            "{{1},{2,3}}",
            "{}",
            "{NULL}",
            "{2147483648}",
            "[0:1]={1,2}",
        ],
    ),
    ("text[]", &["{a,b}", "{}", "{\"a b\",NULL}", "{{a},{b}}"]),
];

const TYPES: &[(&str, &str)] = &[
    ("int2", "i2"),
    ("int4", "i4"),
    ("int8", "i8"),
    ("numeric", "n"),
    ("float4", "f4"),
    ("float8", "f8"),
    ("bool", "b"),
    ("text", "t"),
    ("varchar", "v"),
    ("bpchar", "c"),
    ("date", "d"),
    ("time", "tm"),
    ("timestamp", "ts"),
    ("timestamptz", "tz"),
    ("interval", "iv"),
    ("uuid", "u"),
    ("jsonb", "j"),
    ("int4[]", "ai"),
    ("text[]", "at"),
];

const NUMERIC: &[&str] = &["int2", "int4", "int8", "numeric", "float4", "float8"];

/// Random expressions of a chosen type built mostly from constants: casts of edge literals,
/// arithmetic and functions on them, with a column here and there.
struct Gen<'a> {
    rng: &'a mut StdRng,
}

impl Gen<'_> {
    fn pick<'s>(&mut self, items: &[&'s str]) -> &'s str {
        items.choose(self.rng).copied().unwrap_or("")
    }

    /// A quoted literal: mostly from the type's own edge values, else any text.
    fn literal(&mut self, ty: &str) -> String {
        let own = TYPED_LITERALS
            .iter()
            .find(|(t, _)| *t == ty)
            .map_or(&[][..], |(_, pool)| *pool);
        let text = if !own.is_empty() && self.rng.gen_ratio(4, 5) {
            self.pick(own)
        } else {
            self.pick(LITERALS)
        };
        format!("'{}'", text.replace('\'', "''"))
    }

    fn any_type(&mut self) -> &'static str {
        TYPES.choose(self.rng).map_or("int4", |t| t.0)
    }

    fn column(ty: &str) -> &'static str {
        TYPES.iter().find(|t| t.0 == ty).map_or("i4", |t| t.1)
    }

    /// An expression of type `ty` (or an untyped literal).
    fn expr(&mut self, ty: &str, depth: u32) -> String {
        if depth == 0 || self.rng.gen_ratio(1, 3) {
            return match self.rng.gen_range(0..8) {
                0 => self.literal(ty),
                1 | 2 => Self::column(ty).to_string(),
                3 if NUMERIC.contains(&ty) => self
                    .pick(&[
                        "32767",
                        "2147483647",
                        "-2147483648",
                        "9223372036854775807",
                        "1e308",
                        "0",
                        "1.5",
                        "NULL",
                    ])
                    .to_string(),
                _ => format!("{}::{ty}", self.literal(ty)),
            };
        }
        let d = depth - 1;
        let other = self.any_type();
        if self.rng.gen_ratio(1, 5) {
            return format!("({})::{ty}", self.expr(other, d));
        }
        if self.rng.gen_ratio(1, 8) {
            let f = self.pick(&["COALESCE", "GREATEST", "LEAST"]);
            return format!("{f}({}, {})", self.expr(ty, d), self.expr(ty, d));
        }
        match ty {
            t if NUMERIC.contains(&t) => match self.rng.gen_range(0..6) {
                0 | 1 => {
                    let op = self.pick(&["+", "-", "*", "/", "%", "&", "|", "#", "^"]);
                    format!("({} {op} {})", self.expr(ty, d), self.expr(ty, d))
                }
                2 => {
                    let op = self.pick(&["-", "@", "~", "|/"]);
                    format!("({op} {})", self.expr(ty, d))
                }
                3 => format!(
                    "{}({})",
                    self.pick(&["int2", "int4", "int8", "float8"]),
                    self.expr(other, d)
                ),
                4 => self
                    .pick(&["array_ndims(ai)", "(d - d)", "(d - '2024-01-01')"])
                    .to_string(),
                _ => format!("({})[{}]", self.expr("int4[]", d), self.expr(ty, d)),
            },
            "text" | "varchar" => match self.rng.gen_range(0..5) {
                0 => format!("{}({})", self.pick(&["lower", "upper"]), self.expr(ty, d)),
                1 => format!("({} || {})", self.expr(ty, d), self.expr(other, d)),
                2 => {
                    let n = *[2usize, 3, 100, 101].choose(self.rng).unwrap_or(&2);
                    let args: Vec<String> = (0..n).map(|_| self.expr(other, 0)).collect();
                    format!("concat({})", args.join(", "))
                }
                3 => format!("(j ->> {})", self.expr("text", d)),
                _ => format!("({})::text", self.expr(other, d)),
            },
            "date" => format!(
                "({} {} {})",
                self.expr(ty, d),
                self.pick(&["+", "-"]),
                self.expr("int4", d)
            ),
            "timestamp" | "timestamptz" => match self.rng.gen_range(0..3) {
                0 => format!(
                    "({} {} {})",
                    self.expr(ty, d),
                    self.pick(&["+", "-"]),
                    self.expr("interval", d)
                ),
                1 => {
                    let from = if ty == "timestamp" {
                        "timestamptz"
                    } else {
                        "timestamp"
                    };
                    format!("timezone({}, {})", self.expr("text", d), self.expr(from, d))
                }
                _ => format!("({} + {})", self.expr("date", d), self.expr("interval", d)),
            },
            "interval" => match self.rng.gen_range(0..3) {
                0 => format!(
                    "({} {} {})",
                    self.expr(ty, d),
                    self.pick(&["+", "-"]),
                    self.expr(ty, d)
                ),
                1 => format!(
                    "{}({})",
                    self.pick(&["justify_days", "justify_hours", "justify_interval"]),
                    self.expr(ty, d)
                ),
                _ => format!(
                    "({} - {})",
                    self.expr("timestamp", d),
                    self.expr("timestamp", d)
                ),
            },
            "jsonb" => {
                let key = self.pick(&["text", "int4"]);
                format!("({} -> {})", self.expr(ty, d), self.expr(key, d))
            }
            "int4[]" | "text[]" => {
                let elem = ty.trim_end_matches("[]");
                match self.rng.gen_range(0..4) {
                    0 => format!("ARRAY[{}, {}]", self.expr(elem, d), self.expr(elem, d)),
                    1 => format!("array_append({}, {})", self.expr(ty, d), self.expr(elem, d)),
                    2 => format!(
                        "({})[{}:{}]",
                        self.expr(ty, d),
                        self.expr("int8", d),
                        self.expr("numeric", d)
                    ),
                    _ => format!("({} || {})", self.expr(ty, d), self.expr(ty, d)),
                }
            }
            _ => format!("({})::{ty}", self.expr("text", d)),
        }
    }

    fn clause(&mut self) -> String {
        let d = self.rng.gen_range(1..4);
        let ty = self.any_type();
        match self.rng.gen_range(0..7) {
            0 => format!("({}) IS NULL", self.expr(ty, d)),
            1 | 2 => {
                let cmp = self.pick(&["=", "<>", "<", ">="]);
                format!("({}) {cmp} ({})", self.expr(ty, d), self.expr(ty, d))
            }
            3 => format!(
                "({}) IN ({}, {})",
                self.expr(ty, d),
                self.expr(ty, d),
                self.expr(ty, d)
            ),
            4 => format!(
                "({}) BETWEEN ({}) AND ({})",
                self.expr(ty, d),
                self.expr(ty, d),
                self.expr(ty, d)
            ),
            5 => format!(
                "({}) {} ({}) ESCAPE ({})",
                self.expr("text", d),
                self.pick(&["LIKE", "NOT ILIKE"]),
                self.expr("text", d),
                self.pick(&["''", "'#'", "'\\'", "'ab'", "NULL", "t"])
            ),
            _ => format!(
                "({}) = ANY ({})",
                self.expr("int4", d),
                self.expr("int4[]", d)
            ),
        }
    }
}

/// Random clauses Syncline accepts must plan in Postgres: a failure there would fail the
/// snapshot, which the client sees as a 503.
#[test]
fn accepted_clauses_plan_in_postgres() {
    common::with_server("where_plans", async |client| {
        client
            .batch_execute(&common::create_table_sql())
            .await
            .expect("table");
        let relation = common::relation();
        for seed in [0x5EED_0005, common::random_seed("rejections")] {
            let mut rng = StdRng::seed_from_u64(seed);
            let (mut accepted, mut failures) = (0, Vec::new());
            for _ in 0..CLAUSES {
                let text = Gen { rng: &mut rng }.clause();
                let w = match Where::new(&text, &relation, &[]) {
                    Ok(w) => w,
                    Err(_) => continue,
                };
                accepted += 1;
                if let Some(error) = postgres_error(client, w.sql()).await {
                    failures.push(format!("`{text}` rendered `{}`: {error}", w.sql()));
                }
                if w.sql().len() <= WHERE_BYTES_MAX {
                    let again = Where::new(w.sql(), &relation, &[]).map(|w| w.sql().to_string());
                    if again.as_deref() != Ok(w.sql()) {
                        failures.push(format!(
                            "`{text}` rendered `{}` checks as {again:?}",
                            w.sql()
                        ));
                    }
                }
            }
            println!("seed {seed}: {accepted} of {CLAUSES} clauses accepted");
            assert!(
                failures.is_empty(),
                "seed {seed}: {} accepted clauses fail in Postgres, first ones:\n{}",
                failures.len(),
                failures[..failures.len().min(20)].join("\n")
            );
        }
    });
}

/// Random clauses per seed.
const CLAUSES: usize = 4000;

/// Electric's rejections of subqueries (`electric-subqueries.md` §1), each with its key and
/// exact text; `At location N` counts in the where text, except for the select-list error,
/// which Electric reports 15 further (counted in `SELECT 1 WHERE ` + the where text).
#[test]
fn subquery_rejections_match_electric() {
    use common::family;
    let only_in = "only `value IN (SELECT ...)` sublinks are supported right now";
    let left_side = "currently, left side of `IN (SELECT ...)` can only be a column reference or a list of column references";
    let clauses = "SELECT statement must not contain any clauses";
    let single = "Expected a single table reference";
    let cases: Vec<(String, &str, String)> = vec![
        ("EXISTS (SELECT id FROM parent)".into(), "where", format!("At location 0: {only_in}")),
        ("parent_id = ANY (SELECT id FROM parent)".into(), "where", format!("At location 10: {only_in}")),
        ("parent_id = (SELECT id FROM parent)".into(), "where", format!("At location 12: {only_in}")),
        ("parent_id = ALL (SELECT id FROM parent)".into(), "where", format!("At location 10: {only_in}")),
        ("flag AND ARRAY(SELECT id FROM parent) = '{}'".into(), "where", format!("At location 9: {only_in}")),
        ("lower(name) IN (SELECT name FROM parent)".into(), "where", format!("At location 12: {left_side}")),
        ("(org, 1) IN (SELECT id, org FROM parent)".into(), "where", format!("At location 9: {left_side}")),
        ("name NOT IN (SELECT lower FROM parent)".into(), "columns", "The following columns are not found on the table: lower".into()),
        ("org IN (SELECT name FROM parent)".into(), "where", "At location 4: left side of `IN (SELECT ...)` has type int4 but subquery returns text[]".into()),
        ("org IN (SELECT id, org FROM parent)".into(), "where", "At location 4: left side of `IN (SELECT ...)` has type int4 but subquery returns row of (int4, int4)[]".into()),
        ("(org, name) IN (SELECT id, org FROM parent)".into(), "where", "At location 12: left side of `IN (SELECT ...)` has type row of (int4, text) but subquery returns row of (int4, int4)[]".into()),
        ("ROW(org) IN (SELECT id FROM parent)".into(), "where", "At location 9: left side of `IN (SELECT ...)` has type row of (int4) but subquery returns int4[]".into()),
        ("mood IN (SELECT name FROM parent)".into(), "where", "At location 5: left side of `IN (SELECT ...)` has type enum mood but subquery returns text[]".into()),
        ("code IN (SELECT name FROM parent)".into(), "where", "At location 5: left side of `IN (SELECT ...)` has type bpchar but subquery returns text[]".into()),
        ("name NOT IN (SELECT org FROM parent)".into(), "where", "At location 5: left side of `IN (SELECT ...)` has type text but subquery returns int4[]".into()),
        ("parent_id IN (SELECT DISTINCT id FROM parent)".into(), "where", clauses.into()),
        ("parent_id IN (SELECT id FROM parent GROUP BY id)".into(), "where", clauses.into()),
        ("parent_id IN (SELECT id FROM parent HAVING true)".into(), "where", clauses.into()),
        ("parent_id IN (SELECT id FROM parent WINDOW w AS ())".into(), "where", clauses.into()),
        ("parent_id IN (SELECT id FROM parent LIMIT 1)".into(), "where", clauses.into()),
        ("parent_id IN (SELECT id FROM parent OFFSET 1)".into(), "where", clauses.into()),
        ("parent_id IN (SELECT id FROM parent ORDER BY id)".into(), "where", clauses.into()),
        ("parent_id IN (SELECT id FROM parent FOR UPDATE)".into(), "where", clauses.into()),
        ("parent_id IN (WITH p AS (SELECT 1) SELECT id FROM parent)".into(), "where", clauses.into()),
        ("parent_id IN (SELECT id FROM parent, org)".into(), "where", single.into()),
        ("parent_id IN (SELECT parent.id FROM parent JOIN org ON true)".into(), "where", "At location 36: Expected a plain column reference".into()),
        ("parent_id IN (SELECT id FROM parent JOIN org ON true)".into(), "where", single.into()),
        ("parent_id IN (SELECT id FROM (SELECT 1) s)".into(), "where", single.into()),
        ("parent_id IN (SELECT 1 UNION SELECT 2)".into(), "where", single.into()),
        ("parent_id IN (SELECT * FROM parent)".into(), "where", "At location 36: Expected a plain column reference".into()),
        ("parent_id IN (SELECT parent.id FROM parent)".into(), "where", "At location 36: Expected a plain column reference".into()),
        ("parent_id IN (SELECT id, id + 1 FROM parent)".into(), "where", "At location 40: Expected a plain column reference".into()),
        ("parent_id IN (SELECT id FROM nope)".into(), "table", "Table \"public\".\"nope\" does not exist. If the table name contains capitals or special characters you must quote it.".into()),
        ("parent_id IN (SELECT id FROM \"Parent\")".into(), "table", "Table \"public\".\"Parent\" does not exist. If the table name contains capitals or special characters you must quote it.".into()),
        ("org IN (SELECT id FROM parent WHERE id IN (SELECT org FROM s.org))".into(), "table", "Table \"s\".\"org\" does not exist. If the table name contains capitals or special characters you must quote it.".into()),
        ("(org, name) IN (SELECT nope, id, nada FROM parent)".into(), "columns", "The following columns are not found on the table: nope, nada".into()),
        ("parent_id IN (SELECT FROM parent)".into(), "columns", "The list of columns must not be empty".into()),
        ("parent_id IN (SELECT id FROM parent) OR parent_id NOT IN (SELECT id FROM parent)".into(), "where", "a subquery dependency cannot be used with both positive and negative polarity in the same filter".into()),
        ("org IN (SELECT id FROM parent) AND NOT (parent_id IN (SELECT id FROM public.parent))".into(), "where", "a subquery dependency cannot be used with both positive and negative polarity in the same filter".into()),
        (format!("parent_id IN (SELECT id FROM parent) AND org IN ({})", (1..=101).map(|i| i.to_string()).collect::<Vec<_>>().join(", ")), "where", "WHERE clause too complex for DNF decomposition (101 disjuncts exceeds limit of 100)".into()),
        ("parent_id IN (SELECT id FROM parent) AND (org BETWEEN 1 AND 2 OR org = 3 OR org > 10 OR flag OR score > 1 OR score < 0 OR code = 'x' OR code = 'y' OR code = 'z' OR code = 'w' OR code = 'v') AND NOT (name = 'a' AND name = 'b' AND name = 'c' AND name = 'd' AND name = 'e' AND name = 'f' AND name = 'g' AND name = 'h' AND name = 'i' AND name = 'j')".into(), "where", "WHERE clause too complex for DNF decomposition (110 disjuncts exceeds limit of 100)".into()),
        // The subquery's own clause: its errors count in the whole where text.
        ("parent_id IN (SELECT id FROM parent WHERE nope = 1)".into(), "where", "At location 42: unknown reference nope".into()),
        ("parent_id IN (SELECT id FROM parent WHERE id = $2)".into(), "where", "At location 47: parameter $2 was not provided".into()),
        ("parent_id IN (SELECT id FROM parent WHERE org)".into(), "where", "WHERE clause must return a boolean".into()),
        // Subqueries are checked (all of them, in order) before the clause around them.
        ("nope = 1 AND parent_id IN (SELECT id FROM nope)".into(), "table", "Table \"public\".\"nope\" does not exist. If the table name contains capitals or special characters you must quote it.".into()),
        ("nope = 1 AND parent_id IN (SELECT id FROM parent)".into(), "where", "At location 0: unknown reference nope".into()),
        ("parent_id IN (SELECT * FROM nope) AND org IN (SELECT id FROM nope2)".into(), "where", "At location 36: Expected a plain column reference".into()),
        // A sublink of another kind is checked as a subquery first.
        ("EXISTS (SELECT 1)".into(), "where", "At location 30: Expected a plain column reference".into()),
        ("EXISTS (SELECT id FROM nope)".into(), "table", "Table \"public\".\"nope\" does not exist. If the table name contains capitals or special characters you must quote it.".into()),
    ];
    let mut failures = Vec::new();
    for (clause, key, text) in &cases {
        let got = Where::with_tables(
            clause,
            &family::relation("child"),
            &["1".to_string()],
            &family::tables,
        );
        match got {
            Err(e) if e.key().as_str() == *key && e.message == *text => {}
            Err(e) => failures.push(format!(
                "{clause}\n  want {key}: {text}\n  got  {}: {}",
                e.key().as_str(),
                e.message
            )),
            Ok(w) => failures.push(format!(
                "{clause}\n  want {key}: {text}\n  accepted as {}",
                w.sql()
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

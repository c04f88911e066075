//! Differential test of value encoding: for every supported type, the text Syncline renders
//! from the binary COPY value equals Postgres's own `SELECT col::text`.

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use syncline_pg::catalog::load_relation;
use syncline_pg::snapshot::{RowEncoder, Snapshot, SnapshotQuery};
use syncline_pg::wire::{Mode, WireConnection};
use syncline_testkit::PgCluster;

/// Random values generated per type, on top of the fixed edge cases.
const RANDOM_VALUES_PER_TYPE: usize = 150;

fn seed() -> u64 {
    std::env::var("SYNCLINE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random)
}

/// `(column type, SQL literals)` for every type the binary decoders cover, plus two that go
/// through the `::text` fallback.
fn cases(rng: &mut StdRng) -> Vec<(&'static str, Vec<String>)> {
    let q = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let many = |rng: &mut StdRng, f: &dyn Fn(&mut StdRng) -> String| {
        (0..RANDOM_VALUES_PER_TYPE)
            .map(|_| f(rng))
            .collect::<Vec<_>>()
    };
    let with = |fixed: &[&str], random: Vec<String>| {
        fixed
            .iter()
            .map(|s| s.to_string())
            .chain(random)
            .collect::<Vec<_>>()
    };
    vec![
        ("bool", with(&["true", "false", "NULL"], vec![])),
        (
            "int2",
            with(
                &["-32768", "32767", "0", "NULL"],
                many(rng, &|r| r.gen::<i16>().to_string()),
            ),
        ),
        (
            "int4",
            with(
                &["-2147483648", "2147483647", "0"],
                many(rng, &|r| r.gen::<i32>().to_string()),
            ),
        ),
        (
            "int8",
            with(
                &["-9223372036854775808", "9223372036854775807"],
                many(rng, &|r| r.gen::<i64>().to_string()),
            ),
        ),
        (
            "oid",
            with(
                &["0", "4294967295"],
                many(rng, &|r| r.gen::<u32>().to_string()),
            ),
        ),
        (
            "float4",
            with(
                &[
                    "'NaN'",
                    "'Infinity'",
                    "'-Infinity'",
                    "'-0'",
                    "0",
                    "1.5",
                    "0.1",
                    "3.4028235e38",
                    "1e-45",
                    "1e-5",
                    "123456",
                    "1234567",
                    "0.0001",
                ],
                many(rng, &|r| loop {
                    let v = f32::from_bits(r.gen());
                    if v.is_finite() {
                        break format!("'{v:e}'");
                    }
                }),
            ),
        ),
        (
            "float8",
            with(
                &[
                    "'NaN'",
                    "'Infinity'",
                    "'-Infinity'",
                    "'-0'",
                    "0.1",
                    "1e15",
                    "123456789012345",
                    "1e-5",
                    "5e-324",
                    "1.7976931348623157e308",
                    "0.0001",
                    "-2.5e-7",
                ],
                many(rng, &|r| loop {
                    let v = f64::from_bits(r.gen());
                    if v.is_finite() {
                        break format!("'{v:e}'");
                    }
                }),
            ),
        ),
        (
            "numeric",
            with(
                &[
                    "'NaN'",
                    "'Infinity'",
                    "'-Infinity'",
                    "0",
                    "0.000",
                    "-0.5",
                    "123456789.123456789",
                    "1e-20",
                    "1e100",
                    "-99999999.99990000",
                    "0.00001234",
                    "10000",
                    "100000000.0001",
                ],
                many(rng, &|r| {
                    let int: u64 = r.gen_range(0..u64::MAX) >> r.gen_range(0..64);
                    let frac: String = (0..r.gen_range(0..25))
                        .map(|_| char::from(b'0' + r.gen_range(0..10)))
                        .collect();
                    let sign = if r.gen_bool(0.3) { "-" } else { "" };
                    if frac.is_empty() {
                        format!("{sign}{int}")
                    } else {
                        format!("{sign}{int}.{frac}")
                    }
                }),
            ),
        ),
        // Short decimals lying exactly halfway between two floats: Postgres never prints those.
        // In [2^25, 2^26) float4s are 4 apart, so 20k + 10 is such a midpoint; in [2^56, 2^57)
        // float8s are 16 apart, so 1000q with q odd is.
        (
            "float4",
            many(rng, &|r| {
                (20 * r.gen_range((1u64 << 25) / 20 + 1..(1u64 << 26) / 20) + 10).to_string()
            }),
        ),
        (
            "float8",
            many(rng, &|r| {
                format!(
                    "{}000",
                    2 * r.gen_range((1u64 << 56) / 2000 + 1..(1u64 << 57) / 2000) + 1
                )
            }),
        ),
        (
            "numeric(12,2)",
            with(
                &["0", "-1.5", "9999999999.99"],
                many(rng, &|r| format!("{:.2}", r.gen_range(-1e9..1e9))),
            ),
        ),
        (
            "text",
            with(
                &[
                    "''",
                    "'a'",
                    "'NULL'",
                    "'with \"quotes\" and \\backslash'",
                    "E'line\\nbreak\\ttab\\r\\x01'",
                    "'ünïcødé ✓ 🎉'",
                    "'  padded  '",
                ],
                many(rng, &|r| {
                    let s: String = (0..r.gen_range(0..40))
                        .map(|_| char::from_u32(r.gen_range(1..0x2FF)).unwrap_or('x'))
                        .collect();
                    q(&s)
                }),
            ),
        ),
        (
            "varchar(10)",
            with(&["''", "'abc'", "'0123456789'"], vec![]),
        ),
        ("char(5)", with(&["''", "'ab'", "'abcde'"], vec![])),
        ("name", with(&["'pg_class'", "''"], vec![])),
        (
            "uuid",
            with(
                &["'00000000-0000-0000-0000-000000000000'"],
                many(rng, &|r| format!("'{:032x}'", r.gen::<u128>())),
            ),
        ),
        (
            "bytea",
            with(
                &["''", "'\\x00ff'"],
                many(rng, &|r| {
                    let bytes: String = (0..r.gen_range(0..30))
                        .map(|_| format!("{:02x}", r.gen::<u8>()))
                        .collect();
                    format!("'\\x{bytes}'")
                }),
            ),
        ),
        (
            "date",
            with(
                &[
                    "'infinity'",
                    "'-infinity'",
                    "'4713-01-01 BC'",
                    "'5874897-12-31'",
                    "'0001-01-01'",
                    "'0001-12-31 BC'",
                    "'2000-02-29'",
                    "'1900-03-01'",
                ],
                many(rng, &|r| {
                    format!("date '2000-01-01' + {}", r.gen_range(-2_451_545..2_000_000))
                }),
            ),
        ),
        (
            "time",
            with(
                &["'00:00'", "'24:00:00'", "'23:59:59.999999'", "'12:00:00.5'"],
                many(rng, &|r| {
                    format!(
                        "time '00:00' + interval '{} microseconds'",
                        r.gen_range(0..86_400_000_000i64)
                    )
                }),
            ),
        ),
        (
            "timetz",
            with(
                &[
                    "'00:00+00'",
                    "'24:00:00-15:59'",
                    "'12:34:56.789+05:30'",
                    "'01:02:03-03'",
                    "'10:00+14'",
                    "'10:00:00-12:34:56'",
                ],
                many(rng, &|r| {
                    format!(
                        "'{:02}:{:02}:{:02}.{} {:+03}:{:02}'",
                        r.gen_range(0..24),
                        r.gen_range(0..60),
                        r.gen_range(0..60),
                        r.gen_range(0..1_000_000),
                        r.gen_range(-15..15),
                        r.gen_range(0..60)
                    )
                }),
            ),
        ),
        (
            "timestamp",
            with(
                &[
                    "'infinity'",
                    "'-infinity'",
                    "'4713-01-01 00:00:00 BC'",
                    "'294276-12-31 23:59:59.999999'",
                    "'0044-03-15 12:00:00 BC'",
                    "'2000-01-01 00:00:00.000001'",
                ],
                many(rng, &|r| {
                    format!(
                        "timestamp '2000-01-01' + interval '{} microseconds'",
                        r.gen_range(-210_000_000_000_000_000i64..9_000_000_000_000_000_000)
                    )
                }),
            ),
        ),
        (
            "timestamptz",
            with(
                &[
                    "'infinity'",
                    "'-infinity'",
                    "'0044-03-15 12:00:00+00 BC'",
                    "'2024-10-09 12:34:56.5+05:30'",
                    "'1970-01-01 00:00:00+00'",
                ],
                many(rng, &|r| {
                    format!(
                        "timestamptz '2000-01-01 00:00+00' + interval '{} microseconds'",
                        r.gen_range(-210_000_000_000_000_000i64..9_000_000_000_000_000_000)
                    )
                }),
            ),
        ),
        (
            "interval",
            with(
                &[
                    "'0'",
                    "'1 year 2 months 3 days 04:05:06.5'",
                    "'-1.5 seconds'",
                    "'-1 year -2 months +3 days -04:05:06.789'",
                    "'100000 hours'",
                    "'1 mon -1 sec'",
                    "'-0.000001 s'",
                ],
                many(rng, &|r| {
                    format!(
                        "make_interval(0, {}, 0, {}, 0, 0, 0) + interval '{} microseconds'",
                        r.gen_range(-2000..2000),
                        r.gen_range(-50000..50000),
                        r.gen_range(-1_000_000_000_000i64..1_000_000_000_000)
                    )
                }),
            ),
        ),
        (
            "json",
            with(
                &[
                    "'{\"a\": 1, \"b\": [true, null]}'",
                    "'\"str\\\\ing\"'",
                    "'[1, 2.50]'",
                ],
                vec![],
            ),
        ),
        (
            "jsonb",
            with(
                &[
                    "'{\"b\": 1, \"a\": [true, null, 1.50]}'",
                    "'\"x\"'",
                    "'{}'",
                    "'{\"k\": \"quote\\\" and \\\\u00e9\"}'",
                ],
                vec![],
            ),
        ),
        ("mood", with(&["'sad'", "'happy ok'", "NULL"], vec![])),
        ("posint", with(&["1", "2147483647"], vec![])),
        ("shorttext", with(&["'hi'", "''"], vec![])),
        (
            "int4[]",
            with(
                &[
                    "'{}'",
                    "'{1,NULL,3}'",
                    "'{{1,2},{3,4}}'",
                    "'[0:1]={7,8}'",
                    "'[-2:-2][3:4]={{1,2}}'",
                    "ARRAY[NULL]::int4[]",
                ],
                many(rng, &|r| {
                    format!("'{{{},{}}}'", r.gen::<i32>(), r.gen::<i32>())
                }),
            ),
        ),
        (
            "text[]",
            with(
                &[
                    "'{}'",
                    "'{\"\",NULL,\"NULL\",null}'",
                    "ARRAY['a b', 'c,d', 'e\"f', 'g\\h', '{x}', E'tab\\there', 'plain']",
                    "'{{a,b},{c,d}}'",
                    "ARRAY['null', 'Null']",
                ],
                vec![],
            ),
        ),
        ("varchar(5)[]", with(&["'{ab,\"c d\"}'"], vec![])),
        ("char(3)[]", with(&["'{a,bc}'"], vec![])),
        ("bool[]", with(&["'{t,f,NULL}'"], vec![])),
        (
            "int8[]",
            with(&["'{-9223372036854775808,9223372036854775807}'"], vec![]),
        ),
        (
            "float8[]",
            with(&["'{NaN,Infinity,-0,1.5e300,0.1}'"], vec![]),
        ),
        ("numeric[]", with(&["'{1.50,NaN,-0.001}'"], vec![])),
        (
            "uuid[]",
            with(&["'{00000000-0000-0000-0000-000000000001}'"], vec![]),
        ),
        (
            "bytea[]",
            with(&["ARRAY['\\x00'::bytea, ''::bytea]"], vec![]),
        ),
        (
            "date[]",
            with(&["'{infinity,2000-01-01,\"0001-01-01 BC\"}'"], vec![]),
        ),
        (
            "timestamp[]",
            with(
                &["ARRAY['2000-01-01 10:00'::timestamp, 'infinity']"],
                vec![],
            ),
        ),
        (
            "timestamptz[]",
            with(&["ARRAY['2000-01-01 10:00+02'::timestamptz]"], vec![]),
        ),
        (
            "interval[]",
            with(&["ARRAY['1 day'::interval, '-1 s']"], vec![]),
        ),
        (
            "jsonb[]",
            with(&["ARRAY['{\"a\": \"b c\"}'::jsonb, '1']"], vec![]),
        ),
        ("mood[]", with(&["'{sad,\"happy ok\"}'"], vec![])),
        ("posint[]", with(&["'{1,2}'"], vec![])),
        ("time[]", with(&["'{10:00:00.5,24:00}'"], vec![])),
        ("point", with(&["'(1.5,2)'"], vec![])),
        ("inet", with(&["'10.0.0.1/8'", "'::1'"], vec![])),
        ("int4range", with(&["'[1,10)'", "'empty'"], vec![])),
    ]
}

/// Postgres's own text for the column: `v::text`, except for `char(n)`, whose cast to text
/// strips the padding that Electric keeps (its output function keeps it).
fn oracle(ty: &str) -> &'static str {
    if ty.starts_with("char(") && !ty.ends_with("[]") {
        "CASE WHEN v IS NULL THEN NULL ELSE concat(v) END"
    } else {
        "v::text"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_values_render_as_postgres_text() {
    let seed = seed();
    println!("value encoding seed: {seed} (rerun with SYNCLINE_TEST_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let config = syncline_pg::ConnConfig::parse(&cluster.connection_string("postgres")).unwrap();
    let client = syncline_pg::connect(&config).await.unwrap();
    // The tests name their tables unqualified; Syncline's sessions search pg_catalog first.
    client
        .batch_execute("SET search_path = public")
        .await
        .unwrap();
    let mut conn = WireConnection::connect(&config, "values-test", Mode::Query)
        .await
        .unwrap();
    client
        .batch_execute(
            "CREATE TYPE mood AS ENUM ('sad', 'happy ok');
             CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
             CREATE DOMAIN shorttext AS varchar(8);",
        )
        .await
        .unwrap();
    let mut failures = Vec::new();
    let mut compared = 0;
    for (n, (ty, literals)) in cases(&mut rng).into_iter().enumerate() {
        let table = format!("values_{n}");
        client
            .batch_execute(&format!(
                "CREATE TABLE {table} (id int PRIMARY KEY, v {ty})"
            ))
            .await
            .unwrap();
        for (i, lit) in literals.iter().enumerate() {
            client
                .batch_execute(&format!("INSERT INTO {table} VALUES ({i}, {lit})"))
                .await
                .unwrap_or_else(|e| panic!("inserting {lit} as {ty}: {e}"));
        }
        let expected: HashMap<i32, Option<String>> = client
            .query(&format!("SELECT id, {} FROM {table}", oracle(ty)), &[])
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let relation = load_relation(&client, "public", &table)
            .await
            .unwrap()
            .unwrap();
        let query = SnapshotQuery::new(&relation, None, None).unwrap();
        let mut encoder = RowEncoder::for_query(&query);
        let mut snapshot = Snapshot::begin(&mut conn, &query).await.unwrap();
        let mut got = HashMap::new();
        let mut in_json = HashMap::new();
        let mut text = Vec::new();
        let mut line = Vec::new();
        while snapshot
            .next_chunk(&mut |row| {
                let id = i32::from_be_bytes(row.get(0).unwrap().try_into().unwrap());
                let value = match row.get(1) {
                    None => None,
                    Some(raw) => {
                        text.clear();
                        query.columns[1].decoder.write_text(raw, &mut text)?;
                        Some(String::from_utf8(text.clone()).unwrap())
                    }
                };
                got.insert(id, value);
                line.clear();
                encoder.encode(&row, &mut line)?;
                let message: serde_json::Value =
                    serde_json::from_slice(&line).unwrap_or_else(|e| {
                        panic!(
                            "{ty}: invalid JSON line ({e}): {}",
                            String::from_utf8_lossy(&line)
                        )
                    });
                in_json.insert(id, message["value"]["v"].as_str().map(str::to_owned));
                Ok(())
            })
            .await
            .unwrap()
        {}
        assert_eq!(got.len(), expected.len(), "{ty}: row count");
        for (id, want) in &expected {
            compared += 1;
            if got[id] != *want || in_json[id] != *want {
                failures.push(format!(
                    "{ty} {}: postgres {want:?}, syncline {:?}, in its JSON line {:?}",
                    literals[usize::try_from(*id).unwrap()],
                    got[id],
                    in_json[id]
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {compared} values differ (seed {seed}):\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(compared > 2000, "compared only {compared} values");
}

//! Fuzzes parse + check + render + evaluation: no input may panic, and the rendered SQL of an
//! accepted clause must check again to the same SQL (shape identity depends on it), and the
//! router must agree with evaluating the clause. Subqueries may read the table `t` itself
//! (nested too); their value sets hold the tuple of `1`s.
//!
//! Run as `ulimit -s 65536; ASAN_OPTIONS=detect_stack_use_after_return=0 cargo +nightly fuzz
//! run parse_check`: AddressSanitizer's fake stacks make libpg_query's stack-depth check report
//! `stack depth limit exceeded` for ordinary clauses, and its shadow memory does not follow the
//! stack switch `Where::new` makes on small stacks (false stack-buffer-overflow reports); a
//! 64 MiB main stack means no switch happens.

#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use syncline_core::relation::{ColumnDesc, PgType, RelationDesc, ReplicaIdentity, TypeKind};
use syncline_core::tuple::Value;
use syncline_where::{Change, Row, RowTypes, Router, TableRef, Views, Where, WHERE_BYTES_MAX};

/// Every value set holds exactly the tuple of `1`s.
struct Ones;

impl Views for Ones {
    fn contains(&self, _subquery: usize, values: &[&str]) -> bool {
        values.iter().all(|v| *v == "1")
    }

    fn contains_null(&self, _subquery: usize) -> bool {
        false
    }

    fn is_empty(&self, _subquery: usize) -> bool {
        false
    }
}

fn relation() -> RelationDesc {
    let base = |name: &str| PgType {
        oid: 0,
        name: name.into(),
        kind: TypeKind::Base,
    };
    let column = |name: &str, pg_type: PgType| ColumnDesc {
        name: name.into(),
        pg_type,
        type_mod: -1,
        not_null: false,
        pk_index: None,
        array_dims: 0,
    };
    let columns = vec![
        column("i", base("int4")),
        column("b", base("int8")),
        column("n", base("numeric")),
        column("f", base("float8")),
        column("t", base("text")),
        column("ok", base("bool")),
        column("d", base("date")),
        column("ts", base("timestamptz")),
        column("iv", base("interval")),
        column("j", base("jsonb")),
        column(
            "a",
            PgType {
                oid: 0,
                name: "_int4".into(),
                kind: TypeKind::Array(Box::new(base("int4"))),
            },
        ),
        column(
            "e",
            PgType {
                oid: 0,
                name: "mood".into(),
                kind: TypeKind::Enum,
            },
        ),
        column("u", base("uuid")),
        column("c", base("bpchar")),
    ];
    RelationDesc {
        oid: 1,
        schema: "public".into(),
        name: "t".into(),
        columns,
        replica_identity: ReplicaIdentity::Full,
    }
}

/// Rows with ordinary, edge and malformed values.
const ROWS: &[[&str; 14]] = &[
    [
        "1",
        "-9223372036854775808",
        "1.50",
        "NaN",
        "abc",
        "t",
        "2024-02-29",
        "2024-01-01 00:00:00+00",
        "1 day",
        r#"{"a": [1, 2]}"#,
        "{1,NULL}",
        "ok",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "ab  ",
    ],
    [
        "2147483647",
        "0",
        "-Infinity",
        "-0",
        "",
        "false",
        "infinity",
        "-infinity",
        "-1 mons 02:00:00",
        "null",
        "{{1,2},{3,4}}",
        "sad",
        "00000000-0000-0000-0000-000000000000",
        "",
    ],
    [
        "x",
        "1e3",
        "--1",
        "1e999",
        "\u{0}",
        "maybe",
        "2024-13-01",
        "yesterday",
        "1 fortnight",
        "{",
        "{1,",
        "nope",
        "zz",
        " a ",
    ],
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let relation = relation();
    let tables = |t: &TableRef| (t.schema == "public" && t.name == "t").then(self::relation);
    let params = vec!["5".to_string(), "a%".to_string(), "{1,2}".to_string()];
    let _ = Where::subquery_tables(text);
    let Ok(w) = Where::with_tables(text, &relation, &params, &tables) else {
        return;
    };
    if w.sql().len() > WHERE_BYTES_MAX {
        // Folded constants can render longer than the input limit; nothing to re-check.
        return;
    }
    let again = Where::with_tables(w.sql(), &relation, &[], &tables)
        .unwrap_or_else(|e| panic!("rendered `{}` of `{text}` fails: {e}", w.sql()));
    assert_eq!(again.sql(), w.sql(), "rendering of `{text}` is not stable");
    let types = RowTypes::of(&relation);
    let mut router = Router::new(&relation);
    router.add(1, Some(&w));
    for (i, subquery) in w.subqueries().iter().enumerate() {
        router.view_insert(1, i, &vec!["1"; subquery.columns.len()]);
    }
    let _ = w.sql_with_views(&|i| {
        vec![vec![Some("1".to_string()); w.subqueries()[i].columns.len()]]
    });
    for p in 0..w.dnf().positions.len() {
        let _ = w.position_sql(p);
        let _ = w.slot_hash(p, &[Some("1"), None], "prefix");
    }
    for values in ROWS {
        let values: Vec<Value> = values
            .iter()
            .map(|v| Value::Text(Bytes::from(v.to_string())))
            .collect();
        let row = Row::new(&types, &values);
        let _ = w.eval(&row);
        let _ = w.eval_in(&row, &Ones);
        let _ = w.active_conditions(&row, &Ones);
        let _ = w.tags(&row, "prefix");
        let change = Change::Insert(&values);
        assert_eq!(
            router.affected(&change),
            router.affected_by_scan(&change),
            "router and scan differ for `{text}`"
        );
    }
});

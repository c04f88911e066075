//! Subqueries without Postgres: the DNF pinned to Electric's decomposer test cases
//! (`test/electric/replication/eval/decomposer_test.exs`), tags and active conditions in
//! Electric's formats (`shapes/dnf_plan.ex`, `shapes/subquery_tags.ex`), `IN` semantics with
//! NULLs, canonical SQL, value-set SQL and the tables a clause reads.

mod common;

use bytes::Bytes;
use common::family::{self, SetViews};
use syncline_core::relation::{ColumnDesc, PgType, RelationDesc, ReplicaIdentity, TypeKind};
use syncline_core::tuple::Value;
use syncline_where::{PositionKind, Prepared, Row, RowTypes, TableRef, Where};

/// The relation of Electric's decomposer tests: `a`..`g` int4 and `name` text; and
/// `test_table (id int4)`.
fn letters(table: &str) -> RelationDesc {
    let column = |name: &str, ty: &str| ColumnDesc {
        name: name.into(),
        pg_type: PgType {
            oid: 0,
            name: ty.into(),
            kind: TypeKind::Base,
        },
        type_mod: -1,
        not_null: false,
        pk_index: None,
        array_dims: 0,
    };
    let columns = match table {
        "test_table" => vec![column("id", "int4")],
        _ => ["a", "b", "c", "d", "e", "f", "g"]
            .iter()
            .map(|c| column(c, "int4"))
            .chain(std::iter::once(column("name", "text")))
            .collect(),
    };
    RelationDesc {
        oid: 1,
        schema: "public".into(),
        name: table.into(),
        columns,
        replica_identity: ReplicaIdentity::Full,
    }
}

/// The DNF of `text` over the letters relation, as Electric's tests write it: per disjunct the
/// literals of its positions, each its SQL (`(NOT atom)` when negated).
fn dnf(text: &str) -> Vec<Vec<String>> {
    let tables = |t: &TableRef| (t.name == "test_table").then(|| letters("test_table"));
    let w = Where::with_tables(text, &letters("t"), &[], &tables).expect(text);
    let dnf = w.dnf();
    // Fixed width: the disjuncts' positions are consecutive, in order, and cover all.
    let mut next = 0;
    for members in &dnf.disjuncts {
        for &p in members {
            assert_eq!(p, next, "{text}: positions in disjunct order");
            next += 1;
        }
    }
    assert_eq!(next, dnf.positions.len());
    dnf.disjuncts
        .iter()
        .map(|members| members.iter().map(|&p| w.position_sql(p)).collect())
        .collect()
}

/// `("x" = 'n'::int4)`, an atom of Electric's tests (`"x" = n`).
fn eq(column: &str, n: i32) -> String {
    format!("(\"{column}\" = '{n}'::int4)")
}

fn not(atom: String) -> String {
    format!("(NOT {atom})")
}

#[test]
fn dnf_matches_electrics_decomposer_tests() {
    let (a, b, c, d, e, f, g) = (
        eq("a", 1),
        eq("b", 2),
        eq("c", 3),
        eq("d", 4),
        eq("e", 5),
        eq("f", 6),
        eq("g", 7),
    );
    let cases: Vec<(&str, Vec<Vec<String>>)> = vec![
        (
            "(a = 1 AND b = 2) OR (c = 3 AND d = 4) OR (a = 1 AND c = 3)",
            vec![
                vec![a.clone(), b.clone()],
                vec![c.clone(), d.clone()],
                vec![a.clone(), c.clone()],
            ],
        ),
        ("a = 1", vec![vec![a.clone()]]),
        (
            "a = 1 AND b = 2 AND c = 3",
            vec![vec![a.clone(), b.clone(), c.clone()]],
        ),
        (
            "a = 1 OR b = 2 OR c = 3",
            vec![vec![a.clone()], vec![b.clone()], vec![c.clone()]],
        ),
        (
            "a = 1 AND (b = 2 OR c = 3)",
            vec![vec![a.clone(), b.clone()], vec![a.clone(), c.clone()]],
        ),
        (
            "a = 1 AND (b IN (SELECT id FROM test_table) OR c = 3)",
            vec![
                vec![
                    a.clone(),
                    "(\"b\" IN (SELECT \"id\" FROM \"public\".\"test_table\"))".into(),
                ],
                vec![a.clone(), c.clone()],
            ],
        ),
        (
            "(a = 1 OR b = 2) AND (c = 3 OR d = 4)",
            vec![
                vec![a.clone(), c.clone()],
                vec![a.clone(), d.clone()],
                vec![b.clone(), c.clone()],
                vec![b.clone(), d.clone()],
            ],
        ),
        ("NOT a = 1 AND b = 2", vec![vec![not(a.clone()), b.clone()]]),
        (
            "NOT (a = 1 OR b = 2)",
            vec![vec![not(a.clone()), not(b.clone())]],
        ),
        (
            "NOT (a = 1 AND b = 2)",
            vec![vec![not(a.clone())], vec![not(b.clone())]],
        ),
        ("NOT NOT a = 1", vec![vec![a.clone()]]),
        (
            "lower(name) = 'test' OR upper(name) = 'TEST'",
            vec![
                vec!["(lower(\"name\") = 'test'::text)".into()],
                vec!["(upper(\"name\") = 'TEST'::text)".into()],
            ],
        ),
        (
            "(a = 1 AND b = 2 AND c = 3) OR d = 4",
            vec![vec![a.clone(), b.clone(), c.clone()], vec![d.clone()]],
        ),
        (
            "NOT (a = 1 AND b = 2) AND c = 3",
            vec![
                vec![not(a.clone()), c.clone()],
                vec![not(b.clone()), c.clone()],
            ],
        ),
        (
            "NOT ((a = 1 AND b = 2) OR c = 3)",
            vec![
                vec![not(a.clone()), not(c.clone())],
                vec![not(b.clone()), not(c.clone())],
            ],
        ),
        (
            "((a = 1 AND b = 2) OR (c = 3 AND d = 4)) AND ((d = 4 AND e = 5) OR (f = 6 AND g = 7))",
            vec![
                vec![a.clone(), b.clone(), d.clone(), e.clone()],
                vec![a.clone(), b.clone(), f.clone(), g.clone()],
                vec![c.clone(), d.clone(), d.clone(), e.clone()],
                vec![c.clone(), d.clone(), f.clone(), g.clone()],
            ],
        ),
        (
            "(a = 1 AND b = 2) OR (NOT a = 1 AND c = 3)",
            vec![vec![a.clone(), b.clone()], vec![not(a.clone()), c.clone()]],
        ),
        (
            "(a = 1 AND b = 2) OR (a = 1 AND c = 3) OR a = 1",
            vec![
                vec![a.clone(), b.clone()],
                vec![a.clone(), c.clone()],
                vec![a.clone()],
            ],
        ),
        // Electric's parser makes `IN (list)` the OR of its equalities, `NOT IN` its NOT.
        (
            "a IN (1, 4) AND b = 2",
            vec![vec![a.clone(), b.clone()], vec![eq("a", 4), b.clone()]],
        ),
        (
            "a NOT IN (1, 4)",
            vec![vec![not(a.clone()), not(eq("a", 4))]],
        ),
        // BETWEEN is the AND of two comparisons.
        (
            "a BETWEEN 1 AND 4",
            vec![vec![
                "(\"a\" >= '1'::int4)".into(),
                "(\"a\" <= '4'::int4)".into(),
            ]],
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(dnf(text), expected, "{text}");
    }
}

#[test]
fn dnf_limit_and_polarity_as_electric() {
    let tables = |t: &TableRef| (t.name == "test_table").then(|| letters("test_table"));
    let check = |text: &str| Where::with_tables(text, &letters("t"), &[], &tables);
    let ors = (1..=101)
        .map(|i| format!("a = {i}"))
        .collect::<Vec<_>>()
        .join(" OR ");
    let err = check(&format!("b IN (SELECT id FROM test_table) AND ({ors})")).unwrap_err();
    assert_eq!(
        err.message,
        "WHERE clause too complex for DNF decomposition (101 disjuncts exceeds limit of 100)"
    );
    assert_eq!(err.key().as_str(), "where");
    // Without a subquery Electric decomposes nothing: the clause is one plain position.
    let plain = check(&ors).unwrap();
    assert_eq!(plain.dnf().disjuncts, vec![vec![0]]);
    assert!(check(&format!(
        "b IN (SELECT id FROM test_table) AND ({})",
        (1..=100)
            .map(|i| format!("a = {i}"))
            .collect::<Vec<_>>()
            .join(" OR ")
    ))
    .is_ok());
    let err = check("b IN (SELECT id FROM test_table) OR c NOT IN (SELECT id FROM test_table)")
        .unwrap_err();
    assert_eq!(
        err.message,
        "a subquery dependency cannot be used with both positive and negative polarity in the same filter"
    );
    // Different subqueries may differ in polarity.
    let w = check(
        "b IN (SELECT id FROM test_table) OR c NOT IN (SELECT id FROM test_table WHERE id > 1)",
    )
    .unwrap();
    assert_eq!(w.subqueries().len(), 2);
    let kinds: Vec<(PositionKind, bool)> = w
        .dnf()
        .positions
        .iter()
        .map(|p| (p.kind.clone(), p.negated))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (
                PositionKind::Subquery {
                    subquery: 0,
                    columns: vec![1]
                },
                false
            ),
            (
                PositionKind::Subquery {
                    subquery: 1,
                    columns: vec![2]
                },
                true
            ),
        ]
    );
}

fn text(v: &str) -> Value {
    Value::Text(Bytes::from(v.to_string()))
}

/// A child row: id, parent_id, org, name, flag, score, code, mood (`None` is NULL).
fn child(values: [Option<&str>; 8]) -> Vec<Value> {
    values.iter().map(|v| v.map_or(Value::Null, text)).collect()
}

fn check_child(text: &str) -> Where {
    Where::with_tables(
        text,
        &family::relation("child"),
        &["1".into()],
        &family::tables,
    )
    .expect(text)
}

fn set(tuples: &[&[Option<&str>]]) -> Vec<Vec<Option<String>>> {
    tuples
        .iter()
        .map(|t| t.iter().map(|v| v.map(str::to_string)).collect())
        .collect()
}

#[test]
fn tags_and_active_conditions_in_electrics_formats() {
    let types = RowTypes::of(&family::relation("child"));
    let values = child([
        Some("1"),
        Some("7"),
        None,
        Some("x"),
        Some("t"),
        Some("1.50"),
        Some("ab"),
        None,
    ]);
    let row = Row::new(&types, &values);
    let prefix = "single_stackh1";
    let md5 = |s: &str| format!("{:x}", md5_of(s));

    // One bare subquery: one tag of one slot (no `/`), one active condition.
    let w = check_child("parent_id IN (SELECT id FROM parent WHERE active)");
    let tags = w.tags(&row, prefix);
    assert_eq!(tags.len(), 1);
    assert!(!tags[0].contains('/'));
    assert_eq!(tags[0], w.slot_hash(0, &[Some("7")], prefix));
    assert_eq!(tags[0], md5("single_stackh1v:7"));
    let views = SetViews(vec![set(&[&[Some("7")]])]);
    assert_eq!(w.active_conditions(&row, &views), vec![true]);
    let empty = SetViews(vec![vec![]]);
    assert_eq!(w.active_conditions(&row, &empty), vec![false]);

    // `sub OR flag`: tags ["h/", "/1"], active conditions per position.
    let w = check_child("parent_id IN (SELECT id FROM parent WHERE active) OR flag");
    let h = w.slot_hash(0, &[Some("7")], prefix);
    assert_eq!(
        w.tags(&row, prefix),
        vec![format!("{h}/"), "/1".to_string()]
    );
    assert_eq!(w.active_conditions(&row, &empty), vec![false, true]);
    assert!(w.includes_in(&row, &empty));

    // The hash is md5(prefix ‖ "v:" ‖ text), NULL is "NULL", booleans are `true`/`false`,
    // numerics lose trailing zeros, a row hashes `name:ns(v)` per outer column.
    let w = check_child(
        "org IN (SELECT org FROM parent) AND flag IN (SELECT active FROM parent) \
         AND score IN (SELECT score FROM parent) AND (parent_id, name) IN (SELECT id, name FROM parent)",
    );
    let tag = &w.tags(&row, prefix)[0];
    let slots: Vec<&str> = tag.split('/').collect();
    assert_eq!(slots.len(), 4);
    assert_eq!(slots[0], md5("single_stackh1NULL"));
    assert_eq!(slots[1], md5("single_stackh1v:true"));
    assert_eq!(slots[2], md5("single_stackh1v:1.5"));
    assert_eq!(slots[3], md5("single_stackh1parent_id:v:7name:v:x"));
    assert_eq!(w.slot_hash(1, &[Some("t")], prefix), slots[1]);
    assert_eq!(w.slot_hash(2, &[Some("1.500")], prefix), slots[2]);
    assert_eq!(w.slot_hash(0, &[None], prefix), slots[0]);
    assert_eq!(w.slot_hash(3, &[Some("7"), Some("x")], prefix), slots[3]);
}

/// md5 through the standard tool, so the test does not share the crate's code.
fn md5_of(s: &str) -> Md5Hex {
    let out = std::process::Command::new("md5sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().expect("stdin").write_all(s.as_bytes())?;
            child.wait_with_output()
        })
        .expect("md5sum");
    Md5Hex(String::from_utf8(out.stdout).expect("utf-8")[..32].to_string())
}

struct Md5Hex(String);

impl std::fmt::LowerHex for Md5Hex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A value set written out: tuples of texts, `None` for NULL.
type Tuples<'a> = &'a [&'a [Option<&'a str>]];
/// A row's left side `(parent_id, name)`.
type Pair<'a> = [Option<&'a str>; 2];

#[test]
fn in_has_sqls_three_valued_semantics() {
    let types = RowTypes::of(&family::relation("child"));
    let row_of = |parent: Option<&str>, name: Option<&str>| {
        child([Some("1"), parent, None, name, None, None, None, None])
    };
    let one = check_child("parent_id IN (SELECT id FROM parent)");
    let not_in = check_child("parent_id NOT IN (SELECT id FROM parent)");
    let cases: &[(Option<&str>, Tuples, Option<bool>)] = &[
        (Some("7"), &[&[Some("7")], &[Some("8")]], Some(true)),
        (Some("7"), &[&[Some("8")]], Some(false)),
        (Some("7"), &[&[Some("8")], &[None]], None),
        (Some("7"), &[&[Some("7")], &[None]], Some(true)),
        (None, &[&[Some("8")]], None),
        (None, &[], Some(false)),
        (Some("7"), &[], Some(false)),
    ];
    for (parent, tuples, expected) in cases {
        let values = row_of(*parent, None);
        let row = Row::new(&types, &values);
        let views = SetViews(vec![set(tuples)]);
        assert_eq!(
            one.eval_in(&row, &views),
            Ok(*expected),
            "{parent:?} IN {tuples:?}"
        );
        assert_eq!(
            not_in.eval_in(&row, &views),
            Ok(expected.map(|b| !b)),
            "{parent:?} NOT IN {tuples:?}"
        );
        // The literal of a negated position is true only when NOT IN is exactly true.
        assert_eq!(
            not_in.active_conditions(&row, &views),
            vec![*expected == Some(false)]
        );
    }
    // Rows compare column by column: a NULL on either side makes a possible match NULL, a
    // certain difference anywhere false.
    let pair = check_child("(parent_id, name) IN (SELECT id, name FROM parent)");
    let cases: &[(Pair, Tuples, Option<bool>)] = &[
        (
            [Some("7"), Some("x")],
            &[&[Some("7"), Some("x")]],
            Some(true),
        ),
        ([Some("7"), Some("x")], &[&[Some("7"), None]], None),
        ([Some("7"), Some("x")], &[&[Some("8"), None]], Some(false)),
        ([Some("7"), None], &[&[Some("7"), Some("y")]], None),
        ([Some("7"), None], &[&[Some("8"), Some("y")]], Some(false)),
        ([None, None], &[], Some(false)),
    ];
    for (left, tuples, expected) in cases {
        let values = row_of(left[0], left[1]);
        let row = Row::new(&types, &values);
        let views = SetViews(vec![set(tuples)]);
        assert_eq!(
            pair.eval_in(&row, &views),
            Ok(*expected),
            "{left:?} IN {tuples:?}"
        );
    }
    // Without value sets a clause with a subquery is an error, never a panic.
    let values = row_of(Some("7"), None);
    let row = Row::new(&types, &values);
    assert!(one.eval(&row).is_err());
    assert!(!one.includes(&row));
}

#[test]
fn canonical_sql_and_value_set_sql() {
    let w = check_child("parent_id IN (SELECT id FROM parent WHERE active = true)");
    assert_eq!(
        w.sql(),
        r#"("parent_id" IN (SELECT "id" FROM "public"."parent" WHERE ("active" = true)))"#
    );
    assert_eq!(
        w.subqueries()[0].sql,
        r#"SELECT "id" FROM "public"."parent" WHERE ("active" = true)"#
    );
    assert_eq!(w.columns(), vec![1]);
    let w = check_child(
        "parent_id NOT IN (SELECT id FROM public.parent WHERE org = $1) AND \
         (org, mood) IN (SELECT id, mood FROM parent) AND \
         (org, name) IN (SELECT org, name FROM parent WHERE id IN (SELECT parent_id FROM child WHERE org = $1))",
    );
    assert_eq!(w.subqueries().len(), 3);
    assert_eq!(
        w.sql(),
        concat!(
            r#"((NOT ("parent_id" IN (SELECT "id" FROM "public"."parent" WHERE ("org" = '1'::int4)))) AND "#,
            r#"(("org", "mood") IN (SELECT "id", "mood" FROM "public"."parent")) AND "#,
            r#"(("org", "name") IN (SELECT "org", "name" FROM "public"."parent" WHERE ("id" IN (SELECT "parent_id" FROM "public"."child" WHERE ("org" = '1'::int4))))))"#
        )
    );
    let sets = |i: usize| match i {
        0 => vec![vec![Some("1".to_string())], vec![None]],
        1 => vec![vec![Some("2".to_string()), Some("ok".to_string())]],
        _ => vec![vec![Some("3".to_string()), Some("it's".to_string())]],
    };
    assert_eq!(
        w.sql_with_views(&sets),
        concat!(
            r#"((NOT ("parent_id" IN ('1'::int4, NULL::int4))) AND "#,
            r#"(("org", "mood") IN (('2'::int4, 'ok'))) AND "#,
            r#"(("org", "name") IN (VALUES ('3'::int4, 'it''s'::text))))"#
        )
    );
    assert_eq!(
        w.sql_with_views(&|_| Vec::new()),
        "((NOT false) AND false AND false)"
    );
    // Identical subqueries are one; other projections of a table are not.
    let w = check_child(
        "parent_id IN (SELECT id FROM parent) OR org IN (SELECT id FROM public.parent) \
         OR org IN (SELECT org FROM parent)",
    );
    assert_eq!(w.subqueries().len(), 2);
    // The rendered SQL checks to itself.
    let again = check_child(w.sql());
    assert_eq!(again.sql(), w.sql());
}

#[test]
fn prepare_checks_a_clause_without_subqueries_and_names_the_tables_of_one_with() {
    let child = family::relation("child");
    let params = ["1".to_owned()];
    let prepared = |text: &str| Where::prepare(text, &child, &params);
    match prepared("org = $1 AND flag") {
        Ok(Prepared::Checked(w)) => {
            assert_eq!(w, Where::new("org = $1 AND flag", &child, &params).unwrap());
        }
        other => panic!("checked expected: {other:?}"),
    }
    let text = "parent_id IN (SELECT id FROM parent WHERE org IN (SELECT id FROM \"Org\"))";
    match prepared(text) {
        Ok(Prepared::ReadsTables(tables)) => {
            assert_eq!(tables, Where::subquery_tables(text).unwrap());
        }
        other => panic!("tables expected: {other:?}"),
    }
    for bad in ["org = ", "no_such_column = 1", "org = 'x'::int4 +"] {
        let expected = Where::new(bad, &child, &params).unwrap_err();
        assert_eq!(prepared(bad).unwrap_err(), expected, "{bad}");
    }
}

#[test]
fn tables_at_every_level_and_normal_texts() {
    let tables = Where::subquery_tables(
        "parent_id IN (SELECT id FROM parent WHERE org IN (SELECT id FROM \"Org\" WHERE id IN \
         (SELECT org FROM s.parent))) OR org IN (SELECT id FROM parent) OR x = 1",
    )
    .unwrap();
    let names: Vec<(&str, &str)> = tables
        .iter()
        .map(|t| (t.schema.as_str(), t.name.as_str()))
        .collect();
    assert_eq!(
        names,
        vec![("public", "parent"), ("public", "Org"), ("s", "parent")]
    );
    assert!(Where::subquery_tables("a = 1").unwrap().is_empty());
    assert!(Where::subquery_tables("a = ").is_err());

    let w = check_child("(flag, score, code) IN (SELECT active, score, code FROM parent)");
    assert_eq!(
        w.subqueries()[0].normalize(&[Some("t"), Some("1.500"), Some("ab   ")]),
        vec![Some("true".into()), Some("1.5".into()), Some("ab".into())]
    );
    assert_eq!(
        w.subqueries()[0].normalize(&[None, Some("-0.0"), Some("not a bool")]),
        vec![None, Some("0".into()), Some("not a bool".into())]
    );
    // Where::new knows no table: a subquery is the unknown-table error.
    let err = Where::new(
        "parent_id IN (SELECT id FROM parent)",
        &family::relation("child"),
        &[],
    )
    .unwrap_err();
    assert_eq!(err.key().as_str(), "table");
}

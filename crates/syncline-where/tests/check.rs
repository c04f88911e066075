//! Table-driven checks of parsing, checking and rendering: where text → canonical SQL or the
//! exact error a client receives.

mod common;

use syncline_where::Where;

fn outcome(text: &str, params: &[&str]) -> String {
    let params: Vec<String> = params.iter().map(|p| p.to_string()).collect();
    match Where::new(text, &common::relation(), &params) {
        Ok(w) => w.sql().to_string(),
        Err(e) => format!("error: {}", e.message),
    }
}

#[test]
fn renders_canonical_sql() {
    let cases: &[(&str, &[&str], &str)] = &[
        ("i4 = 5", &[], r#"("i4" = '5'::int4)"#),
        ("I4   =   $1", &["5"], r#"("i4" = '5'::int4)"#),
        ("i4 = $1", &["5"], r#"("i4" = '5'::int4)"#),
        (
            "t ILIKE $1 AND b",
            &["a%"],
            r#"(("t" ILIKE 'a%'::text) AND "b")"#,
        ),
        ("i8 IN (1, 2)", &[], r#"("i8" IN ('1'::int8, '2'::int8))"#),
        ("3 = ANY(ai)", &[], r#"('3'::int4 = ANY ("ai"))"#),
        (
            "i2 BETWEEN 1 AND 5",
            &[],
            r#"((CAST("i2" AS int4) >= '1'::int4) AND (CAST("i2" AS int4) <= '5'::int4))"#,
        ),
        ("e = 'ok'", &[], r#"("e" = 'ok')"#),
        ("t = 'it''s'", &[], r#"("t" = 'it''s'::text)"#),
        (
            "j ->> 'a' = '1'",
            &[],
            r#"(("j" ->> 'a'::text) = '1'::text)"#,
        ),
        ("1 + 1 = 2", &[], "true"),
        // NULL constants in AND/OR: dropped, one NULL ends the list (alone, it is the result),
        // so a strict operation over it is NULL without evaluating its other side.
        ("b = (NULL IN (i8, i2, 3))", &[], "NULL::bool"),
        (
            "b OR NULL OR i4 = 1 OR NULL",
            &[],
            r#"("b" OR ("i4" = '1'::int4) OR NULL::bool)"#,
        ),
        (
            "(b AND NULL) AND (NULL AND i4 = 1)",
            &[],
            r#"("b" AND ("i4" = '1'::int4) AND NULL::bool)"#,
        ),
        (
            "tz > '2024-01-01 02:00:00+02'",
            &[],
            r#"("tz" > '2024-01-01 00:00:00+00'::timestamptz)"#,
        ),
        (
            "COALESCE(NULL, i4, 1, 1 / 0) = 1 AND COALESCE('a', t) = t",
            &[],
            r#"((COALESCE("i4", '1'::int4) = '1'::int4) AND ('a'::text = "t"))"#,
        ),
        (
            "tz AT TIME ZONE 'America/New_York' > ts",
            &[],
            r#"(timezone('America/New_York'::text, "tz") > "ts")"#,
        ),
        (
            "timezone($1, ts) < tz",
            &["UTC+3"],
            r#"(timezone('UTC+3'::text, "ts") < "tz")"#,
        ),
        (
            "timezone(iv, d) = ts",
            &[],
            r#"(timezone("iv", CAST("d" AS timestamptz)) = "ts")"#,
        ),
        (
            "timezone('Europe/Berlin', '2024-07-01 02:00+02') = ts",
            &[],
            r#"('2024-07-01 02:00:00'::timestamp = "ts")"#,
        ),
        ("c = 'a'", &[], r#"("c" = 'a'::bpchar)"#),
        ("c = t", &[], r#"(CAST("c" AS text) = "t")"#),
        ("c = v", &[], r#"("c" = CAST("v" AS bpchar))"#),
        ("v = 'a'", &[], r#"("v" = 'a'::text)"#),
        (
            "c IN ('a', t)",
            &[],
            r#"(("c" = 'a'::bpchar) OR (CAST("c" AS text) = "t"))"#,
        ),
        (
            "c NOT IN ('a', 'b')",
            &[],
            r#"("c" NOT IN ('a'::bpchar, 'b'::bpchar))"#,
        ),
        ("c LIKE 'a%'", &[], r#"("c" LIKE 'a%'::text)"#),
        (
            "c || 'x' = t",
            &[],
            r#"((CAST("c" AS text) || 'x'::text) = "t")"#,
        ),
        ("i4 IN (1)", &[], r#"("i4" = '1'::int4)"#),
        ("ai[1] = 1", &[], r#"(("ai")['1'::int4] = '1'::int4)"#),
        (
            "ai[1.5:][:i2] = '{1}'",
            &[],
            r#"(("ai")['2'::int4:][:CAST("i2" AS int4)] = '{1}'::int4[])"#,
        ),
        ("(ARRAY[1, 2, 3])[2] = 2", &[], "true"),
    ];
    for (text, params, want) in cases {
        assert_eq!(outcome(text, params), *want, "{text}");
    }
}

/// 17 factors of scale 999: a product of scale 16983, above numeric's 16383.
const OVERFLOWING_SCALE: &str = "n = 1e-999 * 1e-999 * 1e-999 * 1e-999 * 1e-999 * 1e-999 * 1e-999 * 1e-999 * 1e-999 * 1e-999 * 1e-999 * 1e-999 * 1e-999 * 1e-999 * 1e-999 * 1e-999 * 1e-999";

#[test]
fn rejects_with_electric_messages() {
    let cases: &[(&str, &[&str], &str)] = &[
        (
            "1 x 1",
            &[],
            r#"error: At location 17: syntax error at or near "x""#,
        ),
        (
            "foo = 1",
            &[],
            "error: At location 0: unknown reference foo",
        ),
        (
            "i4 = 1 AND bar",
            &[],
            "error: At location 11: unknown reference bar",
        ),
        ("i4 + 1", &[], "error: WHERE clause must return a boolean"),
        (
            "count(i4) > 1",
            &[],
            "error: At location 0: aggregation is not supported in this context",
        ),
        (
            "foo(i4)",
            &[],
            "error: At location 0: unknown or unsupported function foo/1",
        ),
        (
            "i4 IN (SELECT 1)",
            &[],
            "error: At location 29: Expected a plain column reference",
        ),
        (
            "EXISTS (SELECT 1)",
            &[],
            "error: At location 30: Expected a plain column reference",
        ),
        (
            "true; DROP TABLE t",
            &[],
            "error: unescaped \";\" causing statement split",
        ),
        (
            "true ORDER BY 1",
            &[],
            "error: malformed query ending with SQL clauses",
        ),
        (
            "i4 = $2",
            &["1"],
            "error: At location 5: parameter $2 was not provided",
        ),
        (
            "i4 = 'abc'",
            &[],
            "error: At location 5: invalid input syntax for type integer: \"abc\"",
        ),
        (
            "e < 'ok'",
            &[],
            "error: At location 2: operator does not exist: \"mood\" < \"mood\"",
        ),
        ("1 / 0 = 1", &[], "error: division by zero"),
        (
            "n = 1e-2000",
            &[],
            "error: At location 4: invalid input syntax for type numeric: \"1e-2000\"",
        ),
        (
            OVERFLOWING_SCALE,
            &[],
            "error: value overflows numeric format",
        ),
        (
            "timezone('nowhere', '2024-01-01'::timestamptz) = ts",
            &[],
            "error: time zone \"nowhere\" not recognized",
        ),
        (
            "timezone('EST5EDT,M3.2.0,M11.1.0', '2024-01-01'::timestamp) = tz",
            &[],
            "error: time zone \"EST5EDT,M3.2.0,M11.1.0\" has daylight-saving rules, which are not supported",
        ),
        (
            "tm AT TIME ZONE 'UTC' = tm",
            &[],
            "error: At location 3: timezone() of time with time zone is not supported",
        ),
        (
            "timezone('UTC') = ts",
            &[],
            "error: At location 0: unknown or unsupported function timezone/1",
        ),
        (
            "now() > tz",
            &[],
            "error: At location 0: unknown or unsupported function now/0",
        ),
        (
            "t = $1",
            &["a\u{0}"],
            "error: At location 4: invalid byte sequence for encoding \"UTF8\": 0x00",
        ),
        ("t LIKE v ESCAPE 'ab'", &[], "error: invalid escape string"),
        (
            "t[1] = 'a'",
            &[],
            "error: At location 0: cannot subscript type text because it does not support subscripting",
        ),
        (
            "ai[t] = 1",
            &[],
            "error: At location 3: array subscript must have type integer",
        ),
        (
            "ai[1][1][1][1][1][1][1] = 1",
            &[],
            "error: number of array dimensions (7) exceeds the maximum allowed (6)",
        ),
        (
            "j['a'] = '1'",
            &[],
            "error: At location 0: jsonb subscripts are not supported",
        ),
        (
            "'{a}'::varchar[] = at",
            &[],
            "error: At location 17: operator does not exist: varchar[] = text[]",
        ),
        (
            "t LIKE 'ab\\'",
            &[],
            "error: LIKE pattern must not end with escape character",
        ),
        ("'xyz' LIKE 'ab\\'", &[], "false"),
        (
            "d < '4714-11-23 BC'",
            &[],
            "error: At location 4: date out of range: \"4714-11-23 BC\"",
        ),
        (
            "j = '\"\\u0000\"'",
            &[],
            "error: At location 4: unsupported Unicode escape sequence",
        ),
    ];
    for (text, params, want) in cases {
        assert_eq!(outcome(text, params), *want, "{text}");
    }
    let args = |n: usize| vec!["t"; n].join(", ");
    assert_eq!(
        outcome(&format!("i4 = 1 OR concat({}) = t", args(101)), &[]),
        "error: At location 10: cannot pass more than 100 arguments to a function"
    );
    assert!(!outcome(&format!("concat({}) = t", args(100)), &[]).starts_with("error"));
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let deep =
        |open: &str, close: &str, n: usize| format!("{}i4 = 1{}", open.repeat(n), close.repeat(n));
    for text in [
        deep("(", ")", 30_000),
        deep("NOT ", "", 10_000),
        deep("- ", "", 10_000).replace("i4 = 1", "i4") + " = 1",
        deep("lower(", ")", 5_000),
        deep("lower(", ")", 500),
        format!("{}1 = 1", "1 + ".repeat(3_000)),
        format!("i4 IN ({})", vec!["1"; 10_000].join(", ")),
        vec!["i4 = 1"; 5_000].join(" AND "),
    ] {
        let _ = outcome(&text, &[]);
    }
    assert_eq!(outcome(&deep("(", ")", 300), &[]), r#"("i4" = '1'::int4)"#);
    assert!(outcome(&deep("NOT ", "", 300), &[]).contains("nested too deeply"));
    let sum = |terms: usize| format!("{}i4 = 1", "i4 + ".repeat(terms));
    assert!(!outcome(&sum(20), &[]).starts_with("error"));
    assert_eq!(
        outcome(&sum(40), &[]),
        "error: expression nested too deeply"
    );
}

//! Identifiers as clients write them in `table` and `columns`: Postgres's rules, Electric's
//! error texts.
//!
//! Unquoted parts are folded to lower case (ASCII only, as Postgres does for multi-byte
//! encodings) and must look like an identifier; `"…"` keeps a part as written, with `""` for a
//! quote. A part longer than 63 characters is rejected rather than truncated (Postgres would
//! truncate it silently and match another name).

use std::sync::LazyLock;

use regex::Regex;

/// Longest identifier Postgres keeps (NAMEDATALEN - 1).
pub const IDENTIFIER_CHARS_MAX: usize = 63;

static UNQUOTED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[\pL_][\pL\pM_0-9$]*$").expect("valid regex"));

/// A client-supplied identifier that is not acceptable; the text is what the client sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct IdentError(pub String);

/// Parses one identifier, quoted or not.
pub fn parse_identifier(text: &str) -> Result<String, IdentError> {
    let quoted = text.starts_with('"') && text.ends_with('"');
    let parsed = if quoted {
        // A lone `"` both starts and ends with a quote: an empty quoted identifier.
        parse_quoted(text.get(1..text.len() - 1).unwrap_or(""))?
    } else {
        parse_unquoted(text)?
    };
    if parsed.chars().count() > IDENTIFIER_CHARS_MAX {
        return Err(IdentError(format!(
            "Identifier is too long (max length is {IDENTIFIER_CHARS_MAX})"
        )));
    }
    Ok(parsed)
}

fn parse_quoted(inner: &str) -> Result<String, IdentError> {
    if inner.is_empty() {
        return Err(zero_length());
    }
    if inner.replace("\"\"", "").contains('"') {
        return Err(IdentError(format!(
            "Invalid identifier with unescaped quote: {inner}"
        )));
    }
    Ok(inner.replace("\"\"", "\""))
}

fn parse_unquoted(text: &str) -> Result<String, IdentError> {
    if text.is_empty() {
        return Err(zero_length());
    }
    if !UNQUOTED.is_match(text) {
        return Err(IdentError(format!(
            "Invalid unquoted identifier contains special characters: {text}"
        )));
    }
    Ok(text.to_ascii_lowercase())
}

fn zero_length() -> IdentError {
    IdentError("Invalid zero-length delimited identifier".into())
}

/// Splits `text` at `sep` where it is outside double quotes.
fn split_outside_quotes(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted) = (0, false);
    for (i, c) in text.char_indices() {
        if c == '"' {
            quoted = !quoted;
        } else if c == sep && !quoted {
            parts.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&text[start..]);
    parts
}

/// Parses `table` or `schema.table` (schema defaults to `public`) into `(schema, table)`.
pub fn parse_relation(text: &str) -> Result<(String, String), IdentError> {
    match split_outside_quotes(text, '.').as_slice() {
        [table] => Ok(("public".into(), parse_identifier(table)?)),
        [schema, table] => Ok((parse_identifier(schema)?, parse_identifier(table)?)),
        _ => Err(IdentError(format!(
            "Invalid relation identifier, too many delimiters: {text}"
        ))),
    }
}

/// Parses a comma-separated `columns` list; commas inside quotes belong to the name.
pub fn parse_columns(text: &str) -> Result<Vec<String>, IdentError> {
    split_outside_quotes(text, ',')
        .into_iter()
        .map(parse_identifier)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        let ok = |t: &str, want: &str| assert_eq!(parse_identifier(t).as_deref(), Ok(want), "{t}");
        let err = |t: &str, want: &str| {
            assert_eq!(parse_identifier(t), Err(IdentError(want.into())), "{t}")
        };
        ok("FooBar", "foobar");
        ok(r#""FooBar""#, "FooBar");
        ok(r#"" ""#, " ");
        ok(r#""Foo""Bar""#, r#"Foo"Bar"#);
        ok("_ünï$1", "_ünï$1");
        ok(&"a".repeat(63), &"a".repeat(63));
        err(
            r#"Foo"Bar""#,
            r#"Invalid unquoted identifier contains special characters: Foo"Bar""#,
        );
        err(
            " ",
            "Invalid unquoted identifier contains special characters:  ",
        );
        err(
            "foob@r",
            "Invalid unquoted identifier contains special characters: foob@r",
        );
        err(
            "1abc",
            "Invalid unquoted identifier contains special characters: 1abc",
        );
        err(
            r#""Foo"Bar""#,
            r#"Invalid identifier with unescaped quote: Foo"Bar"#,
        );
        err(r#""""#, "Invalid zero-length delimited identifier");
        err("", "Invalid zero-length delimited identifier");
        err(r#"""#, "Invalid zero-length delimited identifier");
        err(&"a".repeat(64), "Identifier is too long (max length is 63)");
    }

    #[test]
    fn relations() {
        let ok = |t: &str, s: &str, n: &str| {
            assert_eq!(parse_relation(t), Ok((s.into(), n.into())), "{t}")
        };
        ok("foo", "public", "foo");
        ok("foo.bar", "foo", "bar");
        ok(r#""foo"."bar""#, "foo", "bar");
        ok(r#""foo.woah"."bar""#, "foo.woah", "bar");
        ok(r#""foo".bar"#, "foo", "bar");
        ok(
            r#"electric_test."issues for 12_0_3fa""#,
            "electric_test",
            "issues for 12_0_3fa",
        );
        assert_eq!(
            parse_relation(r#""foo"."bar"#),
            Err(IdentError(
                r#"Invalid unquoted identifier contains special characters: "bar"#.into()
            ))
        );
        assert_eq!(
            parse_relation("foo.bar.baz"),
            Err(IdentError(
                "Invalid relation identifier, too many delimiters: foo.bar.baz".into()
            ))
        );
    }

    #[test]
    fn columns() {
        let ok = |t: &str, want: &[&str]| {
            assert_eq!(
                parse_columns(t),
                Ok(want.iter().map(|s| s.to_string()).collect()),
                "{t}"
            )
        };
        ok("id", &["id"]);
        ok("id,name", &["id", "name"]);
        ok(r#""PoT@To",PoTaTo"#, &["PoT@To", "potato"]);
        ok(r#""PoTaTo,sunday",foo"#, &["PoTaTo,sunday", "foo"]);
        ok(r#""fo""o",bar"#, &[r#"fo"o"#, "bar"]);
        ok(r#""id","has,comma""#, &["id", "has,comma"]);
        for bad in ["", "foo,", ",foo", "foo,,bar"] {
            assert_eq!(
                parse_columns(bad),
                Err(IdentError(
                    "Invalid zero-length delimited identifier".into()
                )),
                "{bad}"
            );
        }
        assert!(parse_columns(r#""id,"name""#).is_err());
    }
}

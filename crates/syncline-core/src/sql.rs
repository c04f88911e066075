//! Quoting for the SQL Syncline writes: the one place identifiers and literals are quoted, so
//! text from a request can only ever be data.

/// Quotes an identifier the way Postgres's `quote_ident` does, always: `"a""b"`.
pub fn quote_ident(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        if c == '"' {
            out.push('"');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// `"schema"."name"`.
pub fn qualified(schema: &str, name: &str) -> String {
    format!("{}.{}", quote_ident(schema), quote_ident(name))
}

/// Quotes a string literal so that it means `value` whatever the session's
/// `standard_conforming_strings`: quotes are doubled, and text with a backslash is written as
/// an escape string (`E'a\\b'`), whose backslashes mean the same under either setting.
pub fn quote_literal(value: &str) -> String {
    let escape = value.contains('\\');
    let mut out = String::with_capacity(value.len() + 3);
    if escape {
        out.push('E');
    }
    out.push('\'');
    for c in value.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        assert_eq!(quote_ident("items"), "\"items\"");
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
        assert_eq!(qualified("public", "Items"), "\"public\".\"Items\"");
    }

    #[test]
    fn literals_mean_the_same_under_either_string_setting() {
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_literal(r"ends\"), r"E'ends\\'");
        assert_eq!(quote_literal(r"\'); DROP"), r"E'\\''); DROP'");
        assert_eq!(quote_literal(""), "''");
    }
}

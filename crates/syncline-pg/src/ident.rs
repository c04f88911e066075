//! Quoting identifiers and literals for the SQL that Syncline itself writes.

/// Quotes an identifier the way `quote_ident` does, always (`"a""b"`).
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

/// `"schema"."table"`.
pub fn qualified(schema: &str, table: &str) -> String {
    format!("{}.{}", quote_ident(schema), quote_ident(table))
}

/// Quotes a string literal (`'it''s'`); standard_conforming_strings is on in every supported
/// Postgres, so backslashes need no escaping.
pub fn quote_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes() {
        assert_eq!(quote_ident("items"), "\"items\"");
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
        assert_eq!(qualified("public", "Items"), "\"public\".\"Items\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
    }
}

//! Parsing with Postgres's own grammar (libpg_query) as `SELECT 1 WHERE <where>`, rejecting
//! anything that is more than one boolean expression.

use std::ffi::{c_char, c_int, CStr, CString};

use pg_query::protobuf::{node::Node as NodeEnum, Node, SelectStmt, SortBy};

use crate::error::WhereError;

/// The text put before the where clause; error locations from the parser count it.
pub(crate) const PREFIX: &str = "SELECT 1 WHERE ";
/// The text put before a subset's `ORDER BY` list; its syntax error locations count it.
pub(crate) const ORDER_BY_PREFIX: &str = "SELECT 1 ORDER BY ";
/// [`PREFIX`]'s length in the parser's location unit.
pub(crate) const PREFIX_LEN: i32 = location_len(PREFIX);
/// [`ORDER_BY_PREFIX`]'s length in the parser's location unit.
pub(crate) const ORDER_BY_PREFIX_LEN: i32 = location_len(ORDER_BY_PREFIX);

#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    reason = "asserted shorter than 256 bytes"
)]
const fn location_len(prefix: &str) -> i32 {
    assert!(prefix.len() < 256);
    prefix.len() as i32
}
/// Longest where clause (or `ORDER BY` list) accepted, in bytes (keeps parse time and memory
/// bounded).
pub const WHERE_BYTES_MAX: usize = 64 * 1024;

/// `PgQueryError` of libpg_query's `pg_query.h`.
#[repr(C)]
struct PgQueryError {
    message: *mut c_char,
    funcname: *mut c_char,
    filename: *mut c_char,
    lineno: c_int,
    cursorpos: c_int,
    context: *mut c_char,
}

/// `PgQueryParseResult` of libpg_query's `pg_query.h`.
#[repr(C)]
struct PgQueryParseResult {
    parse_tree: *mut c_char,
    stderr_buffer: *mut c_char,
    error: *mut PgQueryError,
}

extern "C" {
    fn pg_query_parse(input: *const c_char) -> PgQueryParseResult;
    fn pg_query_free_parse_result(result: PgQueryParseResult);
}

/// Parses the where text into its expression node.
pub(crate) fn parse_where(where_text: &str) -> Result<Node, WhereError> {
    let select = parse_select(PREFIX, where_text, "where clause")?;
    only_clause(&select, Clause::Where)?;
    select
        .where_clause
        .map(|node| *node)
        .ok_or_else(|| WhereError::new("malformed query ending with SQL clauses"))
}

/// Parses a subset's `ORDER BY` list (`a DESC NULLS LAST, lower(b)`) into its sort items.
pub(crate) fn parse_order_by(order_by: &str) -> Result<Vec<SortBy>, WhereError> {
    let select = parse_select(ORDER_BY_PREFIX, order_by, "order by")?;
    only_clause(&select, Clause::OrderBy)?;
    select
        .sort_clause
        .into_iter()
        .map(|node| match node.node {
            Some(NodeEnum::SortBy(sort)) => Ok(*sort),
            _ => Err(WhereError::new("malformed ORDER BY clause")),
        })
        .collect()
}

/// Parses `prefix + text` as exactly one `SELECT` statement.
fn parse_select(prefix: &str, text: &str, what: &str) -> Result<SelectStmt, WhereError> {
    if text.len() > WHERE_BYTES_MAX {
        return Err(WhereError::new(format!(
            "{what} longer than {WHERE_BYTES_MAX} bytes"
        )));
    }
    if text.contains('\0') {
        return Err(WhereError::new(format!("{what} contains a NUL byte")));
    }
    let sql = format!("{prefix}{text}");
    let result = match pg_query::parse(&sql, 0) {
        Ok(result) => result,
        Err(pg_query::Error::Decode(_)) => {
            return Err(WhereError::new("expression nested too deeply"))
        }
        Err(pg_query::Error::Parse(message)) => return Err(syntax_error(&sql, message)),
        Err(other) => return Err(WhereError::new(other.to_string())),
    };
    let stmts = result.protobuf.stmts;
    if stmts.len() != 1 {
        return Err(WhereError::new("unescaped \";\" causing statement split"));
    }
    match stmts
        .into_iter()
        .next()
        .and_then(|s| s.stmt)
        .and_then(|n| n.node)
    {
        Some(NodeEnum::SelectStmt(select)) => Ok(*select),
        _ => Err(WhereError::new("malformed query ending with SQL clauses")),
    }
}

/// The one clause a parsed `SELECT 1 …` may carry.
#[derive(PartialEq)]
enum Clause {
    Where,
    OrderBy,
}

/// Rejects any clause but `keep` that sneaked into `SELECT 1 …`.
fn only_clause(select: &SelectStmt, keep: Clause) -> Result<(), WhereError> {
    let extra = select.target_list.len() != 1
        || !select.from_clause.is_empty()
        || (select.where_clause.is_some() != (keep == Clause::Where))
        || (select.sort_clause.is_empty() == (keep == Clause::OrderBy))
        || !select.group_clause.is_empty()
        || select.having_clause.is_some()
        || !select.window_clause.is_empty()
        || select.limit_count.is_some()
        || select.limit_offset.is_some()
        || !select.locking_clause.is_empty()
        || select.with_clause.is_some()
        || !select.distinct_clause.is_empty()
        || select.into_clause.is_some()
        || !select.values_lists.is_empty()
        || select.larg.is_some()
        || select.rarg.is_some();
    if extra {
        return Err(WhereError::new("malformed query ending with SQL clauses"));
    }
    Ok(())
}

/// Re-parses through the C API to get the error message and cursor position, which the Rust
/// binding drops, and words it as Electric does: `At location N: message`, N counting the
/// prefix. Keeps the first `message` if the second parse does not fail.
fn syntax_error(sql: &str, message: String) -> WhereError {
    let Ok(input) = CString::new(sql) else {
        return WhereError::new("where clause contains a NUL byte");
    };
    // SAFETY: `input` is a valid NUL-terminated string that outlives the call; the result is
    // read only before it is freed with the matching libpg_query function.
    unsafe {
        let result = pg_query_parse(input.as_ptr());
        let error = if result.error.is_null() {
            WhereError::new(message)
        } else {
            let e = &*result.error;
            let message = CStr::from_ptr(e.message).to_string_lossy().into_owned();
            WhereError::at(e.cursorpos - 1, message)
        };
        pg_query_free_parse_result(result);
        error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_errors_carry_electric_locations() {
        assert_eq!(
            parse_where("1 x 1").unwrap_err().message,
            "At location 17: syntax error at or near \"x\""
        );
    }

    #[test]
    fn rejects_more_than_an_expression() {
        assert_eq!(
            parse_where("true; DROP TABLE x").unwrap_err().message,
            "unescaped \";\" causing statement split"
        );
        assert_eq!(
            parse_where("true ORDER BY 1").unwrap_err().message,
            "malformed query ending with SQL clauses"
        );
        assert_eq!(
            parse_where("true LIMIT 1").unwrap_err().message,
            "malformed query ending with SQL clauses"
        );
        assert_eq!(
            parse_where("true UNION SELECT 2").unwrap_err().message,
            "malformed query ending with SQL clauses"
        );
        assert!(parse_where("a = 1").is_ok());
    }

    #[test]
    fn order_by_lists_only() {
        assert_eq!(parse_order_by("a DESC NULLS LAST, b").unwrap().len(), 2);
        assert_eq!(
            parse_order_by("a LIMIT 1").unwrap_err().message,
            "malformed query ending with SQL clauses"
        );
        assert_eq!(
            parse_order_by("a; DROP TABLE x").unwrap_err().message,
            "unescaped \";\" causing statement split"
        );
        assert_eq!(
            parse_order_by("a b c").unwrap_err().message,
            "At location 20: syntax error at or near \"b\""
        );
        assert!(parse_order_by("").is_err());
    }
}

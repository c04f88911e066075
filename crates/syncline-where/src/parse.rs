//! Parsing with Postgres's own grammar (libpg_query) as `SELECT 1 WHERE <where>`, rejecting
//! anything that is more than one boolean expression.

use std::ffi::{c_char, c_int, CStr, CString};

use pg_query::protobuf::{node::Node as NodeEnum, Node, SelectStmt};

use crate::error::WhereError;

/// The text put before the where clause; error locations from the parser count it.
pub const PREFIX: &str = "SELECT 1 WHERE ";
/// Longest where clause accepted, in bytes (keeps parse time and memory bounded).
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
pub fn parse_where(where_text: &str) -> Result<Node, WhereError> {
    if where_text.len() > WHERE_BYTES_MAX {
        return Err(WhereError::new(format!(
            "where clause longer than {WHERE_BYTES_MAX} bytes"
        )));
    }
    if where_text.contains('\0') {
        return Err(WhereError::new("where clause contains a NUL byte"));
    }
    let sql = format!("{PREFIX}{where_text}");
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
    let select = match stmts
        .into_iter()
        .next()
        .and_then(|s| s.stmt)
        .and_then(|n| n.node)
    {
        Some(NodeEnum::SelectStmt(select)) => select,
        _ => return Err(WhereError::new("malformed query ending with SQL clauses")),
    };
    only_where(*select)
}

/// Keeps the where clause of `SELECT 1 WHERE ...`, rejecting any other clause that sneaked in.
fn only_where(select: SelectStmt) -> Result<Node, WhereError> {
    let extra = select.target_list.len() != 1
        || !select.from_clause.is_empty()
        || !select.group_clause.is_empty()
        || select.having_clause.is_some()
        || !select.window_clause.is_empty()
        || !select.sort_clause.is_empty()
        || select.limit_count.is_some()
        || select.limit_offset.is_some()
        || !select.locking_clause.is_empty()
        || select.with_clause.is_some()
        || !select.distinct_clause.is_empty()
        || select.into_clause.is_some()
        || !select.values_lists.is_empty()
        || select.larg.is_some()
        || select.rarg.is_some();
    match select.where_clause {
        Some(node) if !extra => Ok(*node),
        _ => Err(WhereError::new("malformed query ending with SQL clauses")),
    }
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
}

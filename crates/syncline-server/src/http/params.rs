//! Parameters of `GET`/`HEAD`/`POST /v1/shape`, validated with Electric's rules and texts.
//!
//! Electric validates in stages and stops at the first stage that fails (an Ecto changeset
//! whose later steps skip an invalid changeset); the stages here follow it:
//!
//! 1. cast every field at once (`is invalid` for a value of the wrong shape, column-list
//!    syntax), then require `offset`;
//! 2. parse `offset`; 3. `handle` vs offset; 4. `live` vs offset; 5. `live_sse` vs `live`;
//! 6. require `table` and parse it, then check `params` numbering;
//! 7. subset parameters (cast, limit/offset bounds, `order_by` requirement, then numbering).
//!
//! As Ecto does, a string that is empty after trimming counts as not given (`offset=` is
//! "can't be blank", `columns=` selects all columns). Checks that need the catalog (table
//! existence, column names, primary key, where-clause typing) come after this parse; their
//! texts are in [`super::param_errors`]. Electric runs those inside stage 6, so a request that
//! is wrong in both a catalog check and a later stage reports the later stage here: same
//! status, different message.

use std::collections::BTreeMap;

use super::ident::{parse_columns, parse_relation};
use super::param_errors::ParamErrors;
use super::query::{self, Raw};
use super::request_offset::RequestOffset;
use super::subset_body::{scalar_text, SubsetBody};

pub use crate::shapes::{LogMode, Replica};

/// A valid shape request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeParams {
    /// Root table schema (`public` when not given), unquoted.
    pub schema: String,
    /// Root table name, unquoted.
    pub table: String,
    /// Where to read from.
    pub offset: RequestOffset,
    /// The handle the client holds; always `None` for `-1` and `now` (there it is only a
    /// cache-buster).
    pub handle: Option<String>,
    /// Long-poll / live mode.
    pub live: bool,
    /// Server-sent events (`live_sse`, else `experimental_live_sse`); only with `live`.
    pub live_sse: bool,
    /// The client's `cursor`, verbatim; it only feeds the next `electric-cursor`.
    pub cursor: Option<String>,
    /// The shape's where clause, unparsed.
    pub where_clause: Option<String>,
    /// Values of `$1`, `$2`, … (index 0 is `$1`), from `params[n]=v`.
    pub where_params: Vec<String>,
    /// Selected columns in request order, unquoted; `None` selects all (or the queryable ones).
    pub columns: Option<Vec<String>>,
    /// `queryable_columns`: the columns subset where clauses, subset ordering and `columns`
    /// may use, and the default selection.
    pub queryable_columns: Option<Vec<String>>,
    /// `experimental_compaction`: merge successive updates of a key in the shape's older
    /// chunks.
    pub compaction: bool,
    /// `replica`.
    pub replica: Replica,
    /// `log`.
    pub log: LogMode,
    /// `secret`, else the deprecated `api_secret`.
    pub secret: Option<String>,
    /// Present when any `subset__*` parameter (or a POST body) asks for a subset snapshot.
    pub subset: Option<SubsetParams>,
}

/// A subset snapshot request (`subset__*` parameters or a POST body).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubsetParams {
    /// Extra where clause, ANDed with the shape's.
    pub where_clause: Option<String>,
    /// Values of `$1`, `$2`, … in the subset where clause.
    pub params: Vec<String>,
    /// `LIMIT` (> 0).
    pub limit: Option<u64>,
    /// `OFFSET` (≥ 0).
    pub offset: Option<u64>,
    /// `ORDER BY` text, unparsed; required with `limit` or `offset`.
    pub order_by: Option<String>,
}

/// The secret a request carries: `secret`, else `api_secret` (an empty `secret` still wins,
/// as in Electric). Checked before any other validation, so it reads the query on its own.
pub fn request_secret(query: &str) -> Option<String> {
    secret(&query::decode(query))
}

fn secret(q: &BTreeMap<String, Raw>) -> Option<String> {
    match q.get("secret").or(q.get("api_secret")) {
        Some(Raw::Str(s)) => Some(s.clone()),
        _ => None,
    }
}

/// Validates a shape request: the raw query string (still percent-encoded) and, for POST, the
/// parsed body. Unknown parameters are ignored.
pub fn parse_shape_params(
    query: &str,
    body: Option<&SubsetBody>,
) -> Result<ShapeParams, ParamErrors> {
    let q = query::decode(query);
    let mut errors = ParamErrors::default();

    // Stage 1: cast everything, then require `offset`.
    let table = cast(&mut errors, "table", q.get("table"), string);
    let offset_given = q.get("offset").is_some_and(|raw| !raw.is_blank());
    let offset = cast(&mut errors, "offset", q.get("offset"), string);
    let handle = cast(&mut errors, "handle", q.get("handle"), string);
    let where_clause = cast(&mut errors, "where", q.get("where"), string);
    let columns = cast(&mut errors, "columns", q.get("columns"), column_list);
    let queryable_columns = cast(
        &mut errors,
        "queryable_columns",
        q.get("queryable_columns"),
        column_list,
    );
    let replica = cast(&mut errors, "replica", q.get("replica"), replica);
    let compaction = cast(
        &mut errors,
        "experimental_compaction",
        q.get("experimental_compaction"),
        boolean,
    );
    let log = cast(&mut errors, "log", q.get("log"), log_mode);
    let where_params = cast(&mut errors, "params", q.get("params"), string_map);
    if !offset_given {
        errors.add("offset", "can't be blank");
    }
    let Some(offset) = offset.filter(|_| errors.is_empty()) else {
        return Err(errors);
    };

    // Stage 2: the offset itself.
    let offset: RequestOffset =
        offset
            .parse()
            .map_err(|e: super::request_offset::RequestOffsetError| {
                ParamErrors::single("offset", e.to_string())
            })?;

    // Stages 3–5: handle and live flags against the offset.
    let handle = match offset {
        RequestOffset::BeforeAll | RequestOffset::Now => None,
        RequestOffset::After(_) => Some(
            handle
                .ok_or_else(|| ParamErrors::single("handle", "can't be blank when offset != -1"))?,
        ),
    };
    let live = flag(q.get("live"));
    match (live, offset) {
        (true, RequestOffset::BeforeAll) => {
            return Err(ParamErrors::single(
                "live",
                "can't be true when offset == -1",
            ))
        }
        (true, RequestOffset::Now) => {
            return Err(ParamErrors::single(
                "live",
                "can't be true when offset is 'now'",
            ))
        }
        _ => {}
    }
    let live_sse = flag(q.get("live_sse").or(q.get("experimental_live_sse")));
    if live_sse && !live {
        return Err(ParamErrors::single(
            "live_sse",
            "can't be true unless live is also true",
        ));
    }

    // Stage 6: the shape definition (catalog checks follow in the caller).
    let table = table.ok_or_else(|| ParamErrors::single("table", "can't be blank"))?;
    let (schema, table) = parse_relation(&table).map_err(|e| ParamErrors::single("table", e.0))?;
    let where_params =
        numbered(where_params.unwrap_or_default()).map_err(|e| ParamErrors::single("params", e))?;

    // Stage 7: subset.
    let subset = subset(&q, body).transpose()?;

    Ok(ShapeParams {
        schema,
        table,
        offset,
        handle,
        live,
        live_sse,
        cursor: match q.get("cursor") {
            Some(Raw::Str(s)) => Some(s.clone()),
            _ => None,
        },
        where_clause,
        where_params,
        columns,
        queryable_columns,
        compaction: compaction.unwrap_or_default(),
        replica: replica.unwrap_or_default(),
        log: log.unwrap_or_default(),
        secret: secret(&q),
        subset,
    })
}

/// `live`, `live_sse`: absent is false; any value but the literal `false` (also a bare
/// `&live`) is true.
fn flag(raw: Option<&Raw>) -> bool {
    raw.is_some_and(|raw| !matches!(raw, Raw::Str(s) if s == "false"))
}

const INVALID: &str = "is invalid";

/// Casts one given, non-blank value; `Err` holds the client's message.
type Caster<T> = fn(&Raw) -> Result<T, String>;

/// Runs a caster, recording its failure under `field`; blank values are not given.
fn cast<T>(
    errors: &mut ParamErrors,
    field: &str,
    raw: Option<&Raw>,
    caster: Caster<T>,
) -> Option<T> {
    let raw = raw.filter(|raw| !raw.is_blank())?;
    caster(raw)
        .map_err(|message| errors.add(field, message))
        .ok()
}

/// Same as [`cast`] for subset fields.
fn cast_subset<T>(
    errors: &mut ParamErrors,
    field: &str,
    raw: Option<&Raw>,
    caster: Caster<T>,
) -> Option<T> {
    let raw = raw.filter(|raw| !raw.is_blank())?;
    caster(raw)
        .map_err(|message| errors.add_subset(field, message))
        .ok()
}

fn string(raw: &Raw) -> Result<String, String> {
    match raw {
        Raw::Str(s) => Ok(s.clone()),
        _ => Err(INVALID.into()),
    }
}

/// Ecto's integer cast: an integer, or a string that is one (optional sign, digits only).
/// Values beyond i64 are "is invalid" here (Elixir integers are unbounded).
fn integer(raw: &Raw) -> Result<i64, String> {
    match raw {
        Raw::Int(n) => Ok(*n),
        Raw::Str(s) => {
            let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(INVALID.into());
            }
            s.parse().map_err(|_| INVALID.to_owned())
        }
        _ => Err(INVALID.into()),
    }
}

/// `columns`: a comma-separated identifier list (the client's form), or `columns[]=…` taken
/// as given (Electric's list cast only rejects empty names).
fn column_list(raw: &Raw) -> Result<Vec<String>, String> {
    match raw {
        Raw::Str(s) => parse_columns(s).map_err(|e| e.0),
        Raw::List(names) if names.iter().any(String::is_empty) => {
            Err("Invalid zero-length identifier".into())
        }
        Raw::List(names) => Ok(names.clone()),
        _ => Err(INVALID.into()),
    }
}

/// Ecto's boolean cast: `true`/`1` or `false`/`0`.
fn boolean(raw: &Raw) -> Result<bool, String> {
    match raw {
        Raw::Str(s) if s == "true" || s == "1" => Ok(true),
        Raw::Str(s) if s == "false" || s == "0" => Ok(false),
        _ => Err(INVALID.into()),
    }
}

fn replica(raw: &Raw) -> Result<Replica, String> {
    match raw {
        Raw::Str(s) if s == "default" => Ok(Replica::Default),
        Raw::Str(s) if s == "full" => Ok(Replica::Full),
        _ => Err(INVALID.into()),
    }
}

fn log_mode(raw: &Raw) -> Result<LogMode, String> {
    match raw {
        Raw::Str(s) if s == "full" => Ok(LogMode::Full),
        Raw::Str(s) if s == "changes_only" => Ok(LogMode::ChangesOnly),
        _ => Err(INVALID.into()),
    }
}

/// `params`: only the deep-object form `params[n]=v`; a JSON string is "is invalid".
fn string_map(raw: &Raw) -> Result<BTreeMap<String, String>, String> {
    match raw {
        Raw::Map(map) => Ok(map.clone()),
        _ => Err(INVALID.into()),
    }
}

/// `subset__params`: `subset__params[n]=v`, a JSON object (in the body), or a string holding
/// a JSON object.
fn json_or_map(raw: &Raw) -> Result<BTreeMap<String, String>, String> {
    match raw {
        Raw::Map(map) => Ok(map.clone()),
        Raw::Str(text) => match serde_json::from_str(text) {
            Ok(serde_json::Value::Object(members)) => members
                .into_iter()
                .map(|(k, v)| scalar_text(v).map(|text| (k, text)))
                .collect::<Option<_>>()
                .ok_or_else(|| INVALID.to_owned()),
            Ok(_) => Err("params must be a JSON object".into()),
            Err(_) => Err("params must be valid JSON".into()),
        },
        _ => Err(INVALID.into()),
    }
}

/// Orders `{"1": v1, "2": v2, …}` into `[v1, v2, …]`: keys must be numbers, 1..n, no gaps.
fn numbered(params: BTreeMap<String, String>) -> Result<Vec<String>, &'static str> {
    let mut numbered = params
        .into_iter()
        .map(|(key, value)| {
            let n = (!key.is_empty() && key.bytes().all(|b| b.is_ascii_digit()))
                .then(|| key.parse::<u64>().ok())
                .flatten()
                .ok_or("Parameters can only use numbers as keys")?;
            Ok((n, value))
        })
        .collect::<Result<Vec<(u64, String)>, &'static str>>()?;
    numbered.sort_by_key(|(n, _)| *n);
    if numbered.iter().zip(1..).any(|((n, _), want)| *n != want) {
        return Err("Parameters must be numbered sequentially, starting from 1");
    }
    Ok(numbered.into_iter().map(|(_, value)| value).collect())
}

const SUBSET_FIELDS: [&str; 5] = ["where", "params", "limit", "offset", "order_by"];

/// The subset request, if any: body members win over `subset__<field>` query parameters.
fn subset(
    q: &BTreeMap<String, Raw>,
    body: Option<&SubsetBody>,
) -> Option<Result<SubsetParams, ParamErrors>> {
    let raw: BTreeMap<&str, &Raw> = SUBSET_FIELDS
        .into_iter()
        .filter_map(|field| {
            let from_body = body.and_then(|b| b.fields.get(field));
            from_body
                .or_else(|| q.get(&format!("subset__{field}")))
                .map(|raw| (field, raw))
        })
        .collect();
    if raw.is_empty() {
        return None;
    }
    let mut errors = ParamErrors::default();
    let get = |field| raw.get(field).copied();
    let where_clause = cast_subset(&mut errors, "where", get("where"), string);
    let order_by = cast_subset(&mut errors, "order_by", get("order_by"), string);
    let limit = cast_subset(&mut errors, "limit", get("limit"), integer);
    let offset = cast_subset(&mut errors, "offset", get("offset"), integer);
    let params = cast_subset(&mut errors, "params", get("params"), json_or_map);
    if limit.is_some_and(|n| n <= 0) {
        errors.add_subset("limit", "must be greater than 0");
    }
    if offset.is_some_and(|n| n < 0) {
        errors.add_subset("offset", "must be greater than or equal to 0");
    }
    let order_by_failed = get("order_by").is_some_and(|raw| !raw.is_blank()) && order_by.is_none();
    if (limit.is_some() || offset.is_some()) && order_by.is_none() && !order_by_failed {
        errors.add_subset(
            "order_by",
            "order_by is required when limit or offset is present",
        );
    }
    if !errors.is_empty() {
        return Some(Err(errors));
    }
    let params = match numbered(params.unwrap_or_default()) {
        Ok(params) => params,
        Err(e) => return Some(Err(ParamErrors::single_subset("params", e))),
    };
    Some(Ok(SubsetParams {
        where_clause,
        params,
        limit: limit.map(non_negative),
        offset: offset.map(non_negative),
        order_by,
    }))
}

/// A validated non-negative count.
fn non_negative(n: i64) -> u64 {
    u64::try_from(n).expect("validated non-negative")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::subset_body::parse_subset_body;
    use syncline_core::LogOffset;

    fn ok(query: &str) -> ShapeParams {
        parse_shape_params(query, None).unwrap_or_else(|e| panic!("{query}: {}", e.body()))
    }

    fn err(query: &str) -> String {
        match parse_shape_params(query, None) {
            Ok(p) => panic!("{query}: accepted as {p:?}"),
            Err(e) => e.body(),
        }
    }

    fn with_body(query: &str, body: &str) -> Result<ShapeParams, String> {
        let body = parse_subset_body(body.as_bytes()).unwrap().unwrap();
        parse_shape_params(query, Some(&body)).map_err(|e| e.body())
    }

    /// The 400 body Electric sends for `errors`.
    fn invalid(errors: &str) -> String {
        format!(r#"{{"message":"Invalid request","errors":{errors}}}"#)
    }

    #[test]
    fn minimal_initial_request() {
        let p = ok("table=items&offset=-1");
        assert_eq!(
            p,
            ShapeParams {
                schema: "public".into(),
                table: "items".into(),
                offset: RequestOffset::BeforeAll,
                handle: None,
                live: false,
                live_sse: false,
                cursor: None,
                where_clause: None,
                where_params: vec![],
                columns: None,
                queryable_columns: None,
                compaction: false,
                replica: Replica::Default,
                log: LogMode::Full,
                secret: None,
                subset: None,
            }
        );
    }

    #[test]
    fn full_live_request() {
        let p = ok(
            "table=electric_test.%22issues%20for%2012_0_3fa%22&offset=26800584_4\
             &handle=3833821-1729874417404123&live=true&cursor=1234&where=a%20%3D%20%241\
             &params%5B1%5D=x&params[2]=y&columns=%22id%22,%22has,comma%22&replica=full\
             &log=changes_only&secret=s3&experimental_live_sse=true&cache-buster=9&unknown=1",
        );
        assert_eq!(p.schema, "electric_test");
        assert_eq!(p.table, "issues for 12_0_3fa");
        assert_eq!(p.offset, RequestOffset::After(LogOffset::new(26800584, 4)));
        assert_eq!(p.handle.as_deref(), Some("3833821-1729874417404123"));
        assert!(p.live && p.live_sse);
        assert_eq!(p.cursor.as_deref(), Some("1234"));
        assert_eq!(p.where_clause.as_deref(), Some("a = $1"));
        assert_eq!(p.where_params, ["x", "y"]);
        assert_eq!(
            p.columns,
            Some(vec!["id".to_string(), "has,comma".to_string()])
        );
        assert_eq!(p.replica, Replica::Full);
        assert_eq!(p.log, LogMode::ChangesOnly);
        assert_eq!(p.secret.as_deref(), Some("s3"));
        assert_eq!(p.subset, None);
    }

    #[test]
    fn handle_is_dropped_for_minus_one_and_now() {
        assert_eq!(ok("table=t&offset=-1&handle=h").handle, None);
        assert_eq!(
            ok("table=t&offset=-1_0&handle=h").offset,
            RequestOffset::BeforeAll
        );
        let now = ok("table=t&offset=now&handle=h");
        assert_eq!((now.offset, now.handle), (RequestOffset::Now, None));
    }

    #[test]
    fn live_flags() {
        let base = "table=t&offset=0_0&handle=h";
        for (extra, live, sse) in [
            ("", false, false),
            ("&live=false", false, false),
            ("&live=true", true, false),
            ("&live", true, false),
            ("&live=", true, false),
            ("&live=0", true, false),
            ("&live=False", true, false),
            ("&live[x]=1", true, false),
            ("&live=true&live_sse=true", true, true),
            ("&live=true&live_sse", true, true),
            ("&live=true&live_sse=false", true, false),
            ("&live=true&experimental_live_sse=true", true, true),
            // live_sse wins over its deprecated name
            (
                "&live=true&live_sse=false&experimental_live_sse=true",
                true,
                false,
            ),
            ("&live_sse=false", false, false),
        ] {
            let p = ok(&format!("{base}{extra}"));
            assert_eq!((p.live, p.live_sse), (live, sse), "{extra}");
        }
    }

    #[test]
    fn blank_values_count_as_absent() {
        let p = ok("table=t&offset=-1&where=%20&columns=&replica=&log=&params=&handle=");
        assert_eq!(p.where_clause, None);
        assert_eq!(p.columns, None);
        assert_eq!(p.replica, Replica::Default);
        assert_eq!(p.log, LogMode::Full);
        assert!(p.where_params.is_empty());
        // the cursor and secret are read verbatim
        let p = ok("table=t&offset=-1&cursor=&secret=&api_secret=x");
        assert_eq!(p.cursor.as_deref(), Some(""));
        assert_eq!(p.secret.as_deref(), Some(""));
    }

    #[test]
    fn secrets() {
        assert_eq!(
            request_secret("secret=a&api_secret=b").as_deref(),
            Some("a")
        );
        assert_eq!(request_secret("api_secret=b").as_deref(), Some("b"));
        assert_eq!(request_secret("secret=a%2Bb+c").as_deref(), Some("a+b c"));
        assert_eq!(request_secret("table=t"), None);
        assert_eq!(request_secret("secret[x]=a"), None);
    }

    #[test]
    fn where_params_are_numbered() {
        let p = ok(
            "table=t&offset=-1&params[2]=b&params[1]=a&params[3]=&params[10]=j\
             &params[4]=d&params[5]=e&params[6]=f&params[7]=g&params[8]=h&params[9]=i",
        );
        assert_eq!(
            p.where_params,
            ["a", "b", "", "d", "e", "f", "g", "h", "i", "j"]
        );
    }

    #[test]
    fn validation_errors() {
        let cases: &[(&str, &str)] = &[
            // offset
            ("table=t", r#"{"offset":["can't be blank"]}"#),
            ("table=t&offset=", r#"{"offset":["can't be blank"]}"#),
            ("table=t&offset=%20", r#"{"offset":["can't be blank"]}"#),
            ("", r#"{"offset":["can't be blank"]}"#),
            ("table=t&offset=abc", r#"{"offset":["has invalid format"]}"#),
            ("table=t&offset=-2", r#"{"offset":["has invalid format"]}"#),
            (
                "table=t&offset=1_2_3",
                r#"{"offset":["has invalid format"]}"#,
            ),
            ("table=t&offset[]=-1", r#"{"offset":["is invalid"]}"#),
            // cast errors are reported together, with a missing offset
            (
                "replica=partial&log=some&columns=a,&params=%7B%221%22%3A%22x%22%7D",
                r#"{"columns":["Invalid zero-length delimited identifier"],"log":["is invalid"],"offset":["can't be blank"],"params":["is invalid"],"replica":["is invalid"]}"#,
            ),
            (
                "table=t&offset=-1&replica=FULL",
                r#"{"replica":["is invalid"]}"#,
            ),
            ("table=t&offset=-1&log=full,", r#"{"log":["is invalid"]}"#),
            ("table[]=t&offset=-1", r#"{"table":["is invalid"]}"#),
            (
                "table=t&offset=-1&where[a]=1",
                r#"{"where":["is invalid"]}"#,
            ),
            (
                "table=t&offset=-1&handle[]=h",
                r#"{"handle":["is invalid"]}"#,
            ),
            (
                "table=t&offset=-1&params[]=a",
                r#"{"params":["is invalid"]}"#,
            ),
            (
                "table=t&offset=-1&params[1][x]=a",
                r#"{"params":["is invalid"]}"#,
            ),
            ("table=t&offset=-1&params=x", r#"{"params":["is invalid"]}"#),
            (
                "table=t&offset=-1&columns=id,foob@r",
                r#"{"columns":["Invalid unquoted identifier contains special characters: foob@r"]}"#,
            ),
            (
                "table=t&offset=-1&columns[]=id&columns[]=",
                r#"{"columns":["Invalid zero-length identifier"]}"#,
            ),
            (
                "table=t&offset=-1&columns[x]=id",
                r#"{"columns":["is invalid"]}"#,
            ),
            // handle
            (
                "table=t&offset=0_0",
                r#"{"handle":["can't be blank when offset != -1"]}"#,
            ),
            (
                "table=t&offset=0_inf&handle=",
                r#"{"handle":["can't be blank when offset != -1"]}"#,
            ),
            // live vs offset; the handle check comes first
            (
                "table=t&offset=-1&live=true",
                r#"{"live":["can't be true when offset == -1"]}"#,
            ),
            (
                "table=t&offset=-1&live",
                r#"{"live":["can't be true when offset == -1"]}"#,
            ),
            (
                "table=t&offset=now&live=true",
                r#"{"live":["can't be true when offset is 'now'"]}"#,
            ),
            (
                "table=t&offset=1_0&live=true",
                r#"{"handle":["can't be blank when offset != -1"]}"#,
            ),
            (
                "table=t&offset=1_0&handle=h&live_sse=true",
                r#"{"live_sse":["can't be true unless live is also true"]}"#,
            ),
            (
                "table=t&offset=-1&experimental_live_sse=true",
                r#"{"live_sse":["can't be true unless live is also true"]}"#,
            ),
            (
                "offset=-1&live=true",
                r#"{"live":["can't be true when offset == -1"]}"#,
            ),
            // table
            ("offset=-1", r#"{"table":["can't be blank"]}"#),
            ("table=&offset=-1", r#"{"table":["can't be blank"]}"#),
            (
                "table=%22%22&offset=-1",
                r#"{"table":["Invalid zero-length delimited identifier"]}"#,
            ),
            (
                "table=my%20table&offset=-1",
                r#"{"table":["Invalid unquoted identifier contains special characters: my table"]}"#,
            ),
            (
                "table=a.b.c&offset=-1",
                r#"{"table":["Invalid relation identifier, too many delimiters: a.b.c"]}"#,
            ),
            // params numbering (after the table)
            (
                "table=t&offset=-1&params[a]=1",
                r#"{"params":["Parameters can only use numbers as keys"]}"#,
            ),
            (
                "table=t&offset=-1&params[1]=a&params[-2]=b",
                r#"{"params":["Parameters can only use numbers as keys"]}"#,
            ),
            (
                "table=t&offset=-1&params[2]=b",
                r#"{"params":["Parameters must be numbered sequentially, starting from 1"]}"#,
            ),
            (
                "table=t&offset=-1&params[0]=a&params[1]=b",
                r#"{"params":["Parameters must be numbered sequentially, starting from 1"]}"#,
            ),
            (
                "table=t&offset=-1&params[1]=a&params[01]=b",
                r#"{"params":["Parameters must be numbered sequentially, starting from 1"]}"#,
            ),
            (
                "table=%22%22&offset=-1&params[2]=b",
                r#"{"table":["Invalid zero-length delimited identifier"]}"#,
            ),
        ];
        for (query, errors) in cases {
            assert_eq!(err(query), invalid(errors), "{query}");
        }
    }

    #[test]
    fn subset_from_the_query() {
        let p = ok(
            "table=t&offset=-1&subset__where=a%20%3E%20%241&subset__params[1]=5\
             &subset__limit=10&subset__offset=0&subset__order_by=a%20DESC&subset__where_expr=x",
        );
        assert_eq!(
            p.subset,
            Some(SubsetParams {
                where_clause: Some("a > $1".into()),
                params: vec!["5".into()],
                limit: Some(10),
                offset: Some(0),
                order_by: Some("a DESC".into()),
            })
        );
        let p = ok("table=t&offset=-1&subset__params=%7B%222%22%3A2%2C%221%22%3A%22x%22%7D");
        assert_eq!(p.subset.unwrap().params, ["x", "2"]);
        let p = ok("table=t&offset=-1&subset__where=true&subset__limit=%2B3&subset__order_by=a");
        assert_eq!(p.subset.as_ref().unwrap().limit, Some(3));
        // Only `_expr` members do not make a subset request; blank members do.
        assert_eq!(ok("table=t&offset=-1&subset__where_expr=x").subset, None);
        assert_eq!(
            ok("table=t&offset=-1&subset__where=").subset,
            Some(SubsetParams::default())
        );
    }

    #[test]
    fn subset_from_a_body() {
        let p = with_body(
            "table=t&offset=-1&subset__where=ignored&subset__limit=2",
            r#"{"where":"a > $1","params":{"1":5},"order_by":"a","where_expr":{}}"#,
        )
        .unwrap();
        assert_eq!(
            p.subset,
            Some(SubsetParams {
                where_clause: Some("a > $1".into()),
                params: vec!["5".into()],
                limit: Some(2),
                offset: None,
                order_by: Some("a".into()),
            })
        );
        let p = with_body(
            "table=t&offset=-1",
            r#"{"limit":"4","offset":1,"order_by":"a"}"#,
        )
        .unwrap();
        let subset = p.subset.unwrap();
        assert_eq!((subset.limit, subset.offset), (Some(4), Some(1)));
        let p = with_body("table=t&offset=-1", r#"{"params":"{\"1\":\"x\"}"}"#).unwrap();
        assert_eq!(p.subset.unwrap().params, ["x"]);
        // A body without subset members is no subset request.
        assert_eq!(
            with_body("table=t&offset=-1", r#"{"other":1}"#)
                .unwrap()
                .subset,
            None
        );
        // The main validation comes first.
        assert_eq!(
            with_body("table=t", r#"{"limit":0}"#).unwrap_err(),
            invalid(r#"{"offset":["can't be blank"]}"#)
        );
    }

    #[test]
    fn subset_errors() {
        let q = "table=t&offset=-1";
        let cases: &[(&str, &str)] = &[
            (
                "&subset__limit=10",
                r#"{"subset":{"order_by":["order_by is required when limit or offset is present"]}}"#,
            ),
            (
                "&subset__offset=0",
                r#"{"subset":{"order_by":["order_by is required when limit or offset is present"]}}"#,
            ),
            (
                "&subset__limit=0",
                r#"{"subset":{"limit":["must be greater than 0"],"order_by":["order_by is required when limit or offset is present"]}}"#,
            ),
            (
                "&subset__limit=-1&subset__order_by=a",
                r#"{"subset":{"limit":["must be greater than 0"]}}"#,
            ),
            (
                "&subset__offset=-1&subset__order_by=a",
                r#"{"subset":{"offset":["must be greater than or equal to 0"]}}"#,
            ),
            // a limit that is not an integer is not "present" for the order_by rule
            (
                "&subset__limit=ten",
                r#"{"subset":{"limit":["is invalid"]}}"#,
            ),
            (
                "&subset__limit=1.5&subset__order_by=a",
                r#"{"subset":{"limit":["is invalid"]}}"#,
            ),
            (
                "&subset__offset=%201",
                r#"{"subset":{"offset":["is invalid"]}}"#,
            ),
            (
                "&subset__limit=99999999999999999999&subset__order_by=a",
                r#"{"subset":{"limit":["is invalid"]}}"#,
            ),
            (
                "&subset__where[x]=1",
                r#"{"subset":{"where":["is invalid"]}}"#,
            ),
            (
                "&subset__order_by[]=a&subset__limit=1",
                r#"{"subset":{"order_by":["is invalid"]}}"#,
            ),
            (
                "&subset__params=%5B1%5D",
                r#"{"subset":{"params":["params must be a JSON object"]}}"#,
            ),
            (
                "&subset__params=%7Bx",
                r#"{"subset":{"params":["params must be valid JSON"]}}"#,
            ),
            (
                "&subset__params=%7B%221%22%3A%5B1%5D%7D",
                r#"{"subset":{"params":["is invalid"]}}"#,
            ),
            (
                "&subset__params[]=a",
                r#"{"subset":{"params":["is invalid"]}}"#,
            ),
            (
                "&subset__params[2]=a",
                r#"{"subset":{"params":["Parameters must be numbered sequentially, starting from 1"]}}"#,
            ),
            (
                "&subset__params[x]=a",
                r#"{"subset":{"params":["Parameters can only use numbers as keys"]}}"#,
            ),
            // numbering is checked only once the casts passed
            (
                "&subset__params[2]=a&subset__limit=x",
                r#"{"subset":{"limit":["is invalid"]}}"#,
            ),
        ];
        for (extra, errors) in cases {
            let query = format!("{q}{extra}");
            assert_eq!(err(&query), invalid(errors), "{query}");
        }
        let body_cases: &[(&str, &str)] = &[
            (
                r#"{"limit":1.0,"order_by":"a"}"#,
                r#"{"subset":{"limit":["is invalid"]}}"#,
            ),
            (
                r#"{"limit":true,"order_by":"a"}"#,
                r#"{"subset":{"limit":["is invalid"]}}"#,
            ),
            (r#"{"where":5}"#, r#"{"subset":{"where":["is invalid"]}}"#),
            (
                r#"{"params":[1]}"#,
                r#"{"subset":{"params":["is invalid"]}}"#,
            ),
            (
                r#"{"params":"[1]"}"#,
                r#"{"subset":{"params":["params must be a JSON object"]}}"#,
            ),
            (
                r#"{"limit":5}"#,
                r#"{"subset":{"order_by":["order_by is required when limit or offset is present"]}}"#,
            ),
        ];
        for (body, errors) in body_cases {
            assert_eq!(with_body(q, body).unwrap_err(), invalid(errors), "{body}");
        }
    }
}

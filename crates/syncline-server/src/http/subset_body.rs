//! The JSON body of `POST /v1/shape`: subset parameters sent outside the URL.
//!
//! The official client (`subsetMethod: 'POST'`) sends `{"where", "params", "limit", "offset",
//! "order_by"}` (plus `where_expr`/`order_by_expr`, which the server ignores). Problems with the
//! body itself are not validation errors: they have their own status and body shape.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use serde_json::Value;

use super::query::Raw;

/// Largest accepted body (Plug.Parsers' default `length`, which Electric keeps). Read the body
/// with a limit of one byte more and report [`BodyError::TooLarge`] when it is exceeded.
pub const SUBSET_BODY_BYTES_MAX: usize = 8_000_000;

/// The top-level members of a `POST /v1/shape` body, ready to be cast with the query string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubsetBody {
    pub(crate) fields: BTreeMap<String, Raw>,
}

/// A body that cannot be used at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// More than [`SUBSET_BODY_BYTES_MAX`] bytes.
    TooLarge,
    /// Valid JSON, but not an object.
    NotAnObject,
    /// Not JSON; the parser's explanation goes to `details`.
    InvalidJson(String),
}

impl BodyError {
    /// 413 for a body that is too large, else 400.
    pub fn status(&self) -> StatusCode {
        match self {
            BodyError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::NotAnObject | BodyError::InvalidJson(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// The response body (`application/json`).
    ///
    /// `details` is serde_json's message (e.g. `expected value at line 1 column 1`), not
    /// Jason's: the texts of two JSON parsers cannot match.
    pub fn body(&self) -> String {
        match self {
            BodyError::TooLarge => r#"{"error":"Request body too large"}"#.to_owned(),
            BodyError::NotAnObject => {
                r#"{"error":"Request body must be a JSON object"}"#.to_owned()
            }
            BodyError::InvalidJson(details) => format!(
                r#"{{"error":"Invalid JSON in request body","details":{}}}"#,
                serde_json::to_string(details).expect("strings serialise")
            ),
        }
    }
}

/// Parses a `POST /v1/shape` body; an empty body carries no subset parameters.
pub fn parse_subset_body(body: &[u8]) -> Result<Option<SubsetBody>, BodyError> {
    if body.len() > SUBSET_BODY_BYTES_MAX {
        return Err(BodyError::TooLarge);
    }
    if body.is_empty() {
        return Ok(None);
    }
    let value: Value =
        serde_json::from_slice(body).map_err(|e| BodyError::InvalidJson(e.to_string()))?;
    let Value::Object(members) = value else {
        return Err(BodyError::NotAnObject);
    };
    let fields = members
        .into_iter()
        .filter(|(_, v)| !v.is_null()) // Ecto casts `null` as "not given"
        .map(|(k, v)| (k, raw(v)))
        .collect();
    Ok(Some(SubsetBody { fields }))
}

fn raw(value: Value) -> Raw {
    match value {
        Value::String(s) => Raw::Str(s),
        Value::Number(n) => n.as_i64().map_or(Raw::Other, Raw::Int),
        Value::Object(members) => members
            .into_iter()
            .map(|(k, v)| scalar_text(v).map(|text| (k, text)))
            .collect::<Option<BTreeMap<_, _>>>()
            .map_or(Raw::Other, Raw::Map),
        Value::Null | Value::Bool(_) | Value::Array(_) => Raw::Other,
    }
}

/// A parameter value as Elixir's `to_string` renders it; nested values have no text form
/// (Electric fails with a 500 there; we reject them as "is invalid").
pub(crate) fn scalar_text(value: Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some(String::new()),
        Value::Array(_) | Value::Object(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_an_object() {
        let body = parse_subset_body(
            br#"{"where":"a > $1","params":{"1":5,"2":"x","3":true,"4":null},"limit":10,
                 "offset":"2","order_by":"a","where_expr":{"type":"ref"},"nothing":null}"#,
        )
        .unwrap()
        .unwrap();
        let f = &body.fields;
        assert_eq!(f["where"], Raw::Str("a > $1".into()));
        assert_eq!(
            f["params"],
            Raw::Map(BTreeMap::from([
                ("1".into(), "5".into()),
                ("2".into(), "x".into()),
                ("3".into(), "true".into()),
                ("4".into(), "".into()),
            ]))
        );
        assert_eq!(f["limit"], Raw::Int(10));
        assert_eq!(f["offset"], Raw::Str("2".into()));
        assert!(!f.contains_key("nothing"));
    }

    #[test]
    fn values_no_field_accepts() {
        let body = parse_subset_body(
            br#"{"a":1.5,"b":[1],"c":false,"d":{"1":[2]},"e":18446744073709551615}"#,
        )
        .unwrap()
        .unwrap();
        for key in ["a", "b", "c", "d", "e"] {
            assert_eq!(body.fields[key], Raw::Other, "{key}");
        }
    }

    #[test]
    fn empty_body_has_no_subset() {
        assert_eq!(parse_subset_body(b""), Ok(None));
    }

    #[test]
    fn rejections() {
        let too_large = vec![b' '; SUBSET_BODY_BYTES_MAX + 1];
        let err = parse_subset_body(&too_large).unwrap_err();
        assert_eq!(err, BodyError::TooLarge);
        assert_eq!(err.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(err.body(), r#"{"error":"Request body too large"}"#);

        for not_object in [&b"[1]"[..], b"\"x\"", b"3", b"null"] {
            let err = parse_subset_body(not_object).unwrap_err();
            assert_eq!(err, BodyError::NotAnObject);
            assert_eq!(err.status(), StatusCode::BAD_REQUEST);
            assert_eq!(
                err.body(),
                r#"{"error":"Request body must be a JSON object"}"#
            );
        }

        let err = parse_subset_body(b"{\"where\":").unwrap_err();
        assert_eq!(err.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            err.body(),
            r#"{"error":"Invalid JSON in request body","details":"EOF while parsing a value at line 1 column 9"}"#
        );
    }
}

//! Responses shared by the shape API's handlers: errors with Electric's bodies and caching,
//! 409 must-refetch, and header helpers.

use axum::body::Body;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::Response;

use super::caching::{self, CacheConfig, ResponseFacts};
use super::param_errors::ParamErrors;
use super::JSON;
use crate::state::AppState;

/// Seconds a client should wait before retrying after a 503.
const RETRY_AFTER_S: &str = "10";

/// The deployment's cache lifetimes.
pub fn cache_config(state: &AppState) -> CacheConfig {
    CacheConfig {
        max_age_s: state.config.cache_max_age,
        stale_age_s: state.config.cache_stale_age,
        ..CacheConfig::default()
    }
}

/// 409 must-refetch, pointing at `handle`.
pub fn conflict(method: &Method, handle: Option<&str>) -> Response {
    let mut response = json(
        StatusCode::CONFLICT,
        r#"[{"headers":{"control":"must-refetch"}}]"#.into(),
    );
    let facts = ResponseFacts {
        method: method.clone(),
        status: StatusCode::CONFLICT,
        handle_known: handle.is_some(),
        offset: None,
        live: false,
        live_sse: false,
        subset: false,
    };
    caching::cache_headers(&facts, &CacheConfig::default()).apply(response.headers_mut());
    if let Some(handle) = handle {
        response
            .headers_mut()
            .insert("electric-handle", header_value(handle));
    }
    response
}

/// 400 with Electric's validation body.
pub fn invalid(method: &Method, errors: &ParamErrors) -> Response {
    let mut response = json(StatusCode::BAD_REQUEST, errors.body());
    let facts = ResponseFacts {
        method: method.clone(),
        status: StatusCode::BAD_REQUEST,
        handle_known: false,
        offset: None,
        live: false,
        live_sse: false,
        subset: false,
    };
    caching::cache_headers(&facts, &CacheConfig::default()).apply(response.headers_mut());
    response
}

/// 503 for a snapshot that failed or timed out (Electric marks it a known error).
pub fn snapshot_failed(error: &str) -> Response {
    let mut response = unavailable(&format!(
        r#"{{"message":{}}}"#,
        serde_json::Value::from(error)
    ));
    response.headers_mut().insert(
        "electric-internal-known-error",
        HeaderValue::from_static("true"),
    );
    response
}

/// 503 with `retry-after`.
pub fn unavailable(body: &str) -> Response {
    let mut response = json(StatusCode::SERVICE_UNAVAILABLE, body.to_owned());
    response
        .headers_mut()
        .insert("retry-after", HeaderValue::from_static(RETRY_AFTER_S));
    response
}

/// 500.
pub fn internal_error() -> Response {
    json(
        StatusCode::INTERNAL_SERVER_ERROR,
        r#"{"message":"Internal server error"}"#.into(),
    )
}

/// A JSON response.
pub fn json(status: StatusCode, body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
    response
}

/// A header value from text (empty if the text cannot be one).
pub fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

//! Responses shared by the shape API's handlers: errors with Electric's bodies and caching,
//! 409 must-refetch, and header helpers.

use axum::body::Body;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::Response;
use syncline_core::wire::{self, header, JSON_CONTENT_TYPE};

use super::caching::{self, CacheConfig, ResponseFacts};
use super::param_errors::ParamErrors;
use syncline_pg::{ErrorKind, PgError};

use crate::admission::Rejected;
use crate::state::AppState;

/// Seconds a client should wait before retrying after a 503.
const RETRY_AFTER_S: u64 = 10;
/// Seconds a client should wait before retrying a request whose gate stayed shut (Electric: 5).
const NOT_READY_RETRY_AFTER_S: u64 = 5;

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
    let mut response = json(StatusCode::CONFLICT, wire::MUST_REFETCH_BODY.into());
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
            .insert(header::HANDLE, header_value(handle));
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
    response
        .headers_mut()
        .insert(header::KNOWN_ERROR, HeaderValue::from_static("true"));
    response
}

/// 503 for a request turned away by admission control, with its `retry-after`.
pub fn rejected(rejected: &Rejected) -> Response {
    let mut response = unavailable(&rejected.body());
    response
        .headers_mut()
        .insert("retry-after", HeaderValue::from(rejected.retry_after_s));
    response
}

/// 503 for a request the server is not ready for (see [`crate::health::Gate`]).
pub fn not_ready(message: &str) -> Response {
    let body = format!(r#"{{"message":{}}}"#, serde_json::Value::from(message));
    unavailable_for(&body, NOT_READY_RETRY_AFTER_S)
}

/// 503 with `retry-after`.
pub fn unavailable(body: &str) -> Response {
    unavailable_for(body, RETRY_AFTER_S)
}

/// 503 telling the client to retry after `seconds`; never cached.
fn unavailable_for(body: &str, seconds: u64) -> Response {
    let mut response = json(StatusCode::SERVICE_UNAVAILABLE, body.to_owned());
    let headers = response.headers_mut();
    headers.insert("retry-after", HeaderValue::from(seconds));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static(caching::NO_STORE));
    headers.insert(
        caching::SURROGATE_CONTROL,
        HeaderValue::from_static(caching::NO_STORE),
    );
    response
}

/// The answer to a Postgres error met while serving a request: the request's own fault
/// (invalid data or SQL, a missing or unreadable table) is a 400 with Postgres's message under
/// `field` (`subset` true: under `errors.subset`); an unreachable or unavailable database is
/// Electric's 503; anything else is a 500 saying what happened. Clients retry 5xx forever, so
/// nothing the request caused is ever one.
pub fn postgres_failed(method: &Method, error: &PgError, field: &str, subset: bool) -> Response {
    let message = error
        .server_message()
        .map_or_else(|| error.to_string(), str::to_owned);
    match error.kind() {
        ErrorKind::InvalidRequest | ErrorKind::Permission | ErrorKind::UndefinedObject => {
            let errors = if subset {
                ParamErrors::single_subset(field, message)
            } else {
                ParamErrors::single(field, message)
            };
            invalid(method, &errors)
        }
        ErrorKind::Unavailable | ErrorKind::Authentication => {
            tracing::warn!(%error, "Postgres is unavailable");
            database_unreachable()
        }
        _ => {
            tracing::warn!(%error, "Postgres failed");
            json(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    r#"{{"message":{}}}"#,
                    serde_json::Value::from(error.to_string())
                ),
            )
        }
    }
}

/// Electric's 503 when the database cannot be reached.
pub fn database_unreachable() -> Response {
    unavailable(r#"{"code":"database_unreachable","error":"Database is unreachable"}"#)
}

/// 401 for a request without the API secret.
pub fn unauthorized() -> Response {
    json(
        StatusCode::UNAUTHORIZED,
        r#"{"message":"Unauthorized - Invalid API secret"}"#.into(),
    )
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
        .insert(CONTENT_TYPE, HeaderValue::from_static(JSON_CONTENT_TYPE));
    response
}

/// A header value from text (empty if the text cannot be one).
pub fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

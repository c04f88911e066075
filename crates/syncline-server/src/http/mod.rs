//! Electric's HTTP shape API: routing, headers every response carries, health.

mod auth;
mod body;
pub mod caching;
pub mod compression;
pub mod connection;
mod http1;
mod ident;
pub mod param_errors;
pub mod params;
mod position;
mod query;
mod reply;
pub mod request_offset;
pub mod schema_header;
pub mod server;
mod shape_api;
mod sse;
mod subset;
pub mod subset_body;

use std::future::{ready, Future};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{
    ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS,
    CACHE_CONTROL, CONTENT_TYPE, ORIGIN, VARY,
};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_util::future::Either;
use futures_util::FutureExt;
use syncline_core::wire::{header, JSON_CONTENT_TYPE};

use crate::health::Phase;
use crate::metrics::StatusLabels;
use crate::state::AppState;

/// The `electric-server` header: the protocol version Syncline speaks.
const SERVER_HEADER: &str = concat!("Syncline/", env!("CARGO_PKG_VERSION"));

/// The HTTP application.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new().fallback(dispatch).with_state(state)
}

static REQUEST_IDS: AtomicU64 = AtomicU64::new(1);

/// Routes by the normalised path (`/v1/shape/`, `/v1//shape` and `/v1/%73hape` are the shape
/// route), then adds the headers every response carries.
///
/// Only the shape route waits; the others answer at once. A plain function returning a
/// mapped future, not an `async fn`: the future then keeps what the headers need beside the
/// shape route's own future, once (an `async fn` keeps room for its arguments for as long as
/// it runs, and an awaited future in an `async` block is moved into a second place; a
/// long-poll may wait minutes).
fn dispatch(
    State(state): State<Arc<AppState>>,
    request: Request,
) -> impl Future<Output = Response> + Send {
    let started = std::time::Instant::now();
    let raw_path = request.uri().path().to_owned();
    // Copied, not shared: a shared value keeps the connection's read buffer alive while a
    // long-poll waits.
    let origin = request
        .headers()
        .get(ORIGIN)
        .map(|v| HeaderValue::from_bytes(v.as_bytes()).expect("a header value stays valid"));
    let path = normalise_path(request.uri().path());
    let is_shape = path == "/v1/shape";
    let method = request.method().clone();
    let over_limit = request
        .extensions()
        .get::<connection::OverLimit>()
        .is_some();
    // Health and metrics answer even over the connection limit (its reserve is for them).
    let reserved = matches!(path.as_str(), "/v1/health" | "/metrics");
    let answer = if over_limit && !reserved {
        let mut response = reply::unavailable(r#"{"message":"Too many connections"}"#);
        response.headers_mut().insert(
            axum::http::header::CONNECTION,
            HeaderValue::from_static("close"),
        );
        Either::Left(ready(response))
    } else if is_shape {
        Either::Right(shape_api::handle(state.clone(), request))
    } else {
        Either::Left(ready(route(&state, &path, &method, request)))
    };
    answer.map(move |mut response| {
        let unauthorized = response.status() == StatusCode::UNAUTHORIZED;
        let headers = response.headers_mut();
        headers.insert(header::SERVER, HeaderValue::from_static(SERVER_HEADER));
        let id = format!("{:016x}", REQUEST_IDS.fetch_add(1, Ordering::Relaxed));
        headers.insert("x-request-id", HeaderValue::from_str(&id).expect("hex"));
        if !unauthorized {
            // The origin is echoed: a cached response must not answer another origin.
            if origin.is_some() {
                headers.append(VARY, HeaderValue::from_static("origin"));
            }
            headers.insert(
                ACCESS_CONTROL_ALLOW_ORIGIN,
                origin.unwrap_or(HeaderValue::from_static("*")),
            );
            headers.insert(
                ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static(if is_shape {
                    "GET, POST, HEAD, DELETE, OPTIONS"
                } else {
                    "GET, HEAD"
                }),
            );
            headers.insert(
                ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static(header::EXPOSED),
            );
        }
        if !headers.contains_key(CACHE_CONTROL) {
            headers.insert(
                CACHE_CONTROL,
                HeaderValue::from_static("max-age=0, private, must-revalidate"),
            );
        }
        let status = response.status().as_u16();
        state.metrics.request(method.as_str(), status);
        tracing::debug!(
            method = %method,
            path = raw_path,
            status,
            duration_ms = started.elapsed().as_secs_f64() * 1e3,
            request_id = id,
            "request"
        );
        response
    })
}

/// The response of a route other than the shape route's.
fn route(state: &Arc<AppState>, path: &str, method: &Method, request: Request) -> Response {
    let metrics_here = state.config.prometheus_port.is_none();
    match (path, method) {
        ("/v1/health", &Method::GET | &Method::HEAD) => health(state),
        ("/metrics", &Method::GET) if metrics_here => {
            let query = request.uri().query().unwrap_or("");
            if auth::authorized(state.config.secret.as_deref(), query) {
                metrics(state)
            } else {
                reply::unauthorized()
            }
        }
        ("/status" | "/status/metrics", &Method::GET | &Method::HEAD) => {
            let query = request.uri().query().unwrap_or("");
            if !auth::authorized(state.config.secret.as_deref(), query) {
                reply::unauthorized()
            } else if path == "/status" {
                status_page()
            } else {
                metrics(state)
            }
        }
        ("/", &Method::GET | &Method::HEAD) => StatusCode::OK.into_response(),
        _ => (StatusCode::NOT_FOUND, "Not found").into_response(),
    }
}

/// `/status`: a page of live charts (replication lag, throughput, shapes, requests, errors,
/// running snapshots) fed once a second from `/status/metrics`, the same numbers as `/metrics`
/// (both need the secret, like `/metrics`). Plain HTML and JS, nothing loaded from elsewhere.
fn status_page() -> Response {
    Response::builder()
        .header(CONTENT_TYPE, "text/html; charset=utf-8")
        .header(CACHE_CONTROL, "no-cache")
        .body(Body::from(include_str!("status.html")))
        .expect("valid response")
}

/// The application serving only `/metrics` (for `ELECTRIC_PROMETHEUS_PORT`).
pub fn metrics_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route(
            "/metrics",
            axum::routing::get(|State(state): State<Arc<AppState>>| async move { metrics(&state) }),
        )
        .with_state(state)
}

/// Prometheus's text format, with the gauges that are read off the state brought up to date.
fn metrics(state: &AppState) -> Response {
    let m = &state.metrics;
    let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    m.shapes.set(gauge(state.shapes.len()));
    let writers = state.shapes.writers();
    m.shape_logs_open.set(gauge(writers.open));
    m.shape_logs_held.set(gauge(writers.held));
    m.shape_logs_parked.set(gauge(writers.parked));
    let (_, reported) = health_status(state);
    for status in ["starting", "waiting", "active", "degraded"] {
        m.health
            .get_or_create(&StatusLabels { status })
            .set(i64::from(status == reported));
    }
    Response::builder()
        .header(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")
        .header(CACHE_CONTROL, "no-cache")
        .body(Body::from(m.render()))
        .expect("valid response")
}

/// Collapses repeated slashes and drops a trailing one, as Electric's router does. Percent-
/// encoded paths are left as they are, so they match no route (404), like Electric.
fn normalise_path(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    format!("/{}", parts.join("/"))
}

/// The HTTP status and the `status` text of `/v1/health`.
fn health_status(state: &AppState) -> (StatusCode, &'static str) {
    let status = state.health.status();
    match (status.phase, &status.problem) {
        (Phase::Active, None) => (StatusCode::OK, "active"),
        (Phase::Active, Some(_)) => (StatusCode::SERVICE_UNAVAILABLE, "degraded"),
        (phase, _) => (StatusCode::ACCEPTED, phase.name()),
    }
}

/// `/v1/health`: Electric's `{"status":…}` (200 active, 202 waiting or starting), this
/// server's `role` (`writer`, `standby` or `replica`), and the reason when there is one;
/// `degraded` (503) when an active server cannot write shape logs.
fn health(state: &AppState) -> Response {
    let status = state.health.status();
    let (code, name) = health_status(state);
    let role = status.role.name();
    let body = match &status.problem {
        None => format!(r#"{{"status":"{name}","role":"{role}"}}"#),
        Some(problem) => format!(
            r#"{{"status":"{name}","role":"{role}","reason":{}}}"#,
            serde_json::Value::from(problem.as_str())
        ),
    };
    Response::builder()
        .status(code)
        .header(CONTENT_TYPE, JSON_CONTENT_TYPE)
        .header(CACHE_CONTROL, caching::HEALTH_CACHE_CONTROL)
        .body(Body::from(body))
        .expect("valid response")
}

#[cfg(test)]
mod tests {
    use super::normalise_path;

    #[test]
    fn shape_route_spellings() {
        for p in ["/v1/shape", "/v1/shape/", "/v1//shape", "//v1/shape"] {
            assert_eq!(normalise_path(p), "/v1/shape", "{p}");
        }
        assert_eq!(normalise_path("/"), "/");
        assert_eq!(normalise_path("/v1/shapes"), "/v1/shapes");
        assert_eq!(normalise_path("/v1%2Fshape"), "/v1%2Fshape");
        assert_eq!(normalise_path("/v1/%73hape"), "/v1/%73hape");
    }
}

//! Electric's HTTP shape API: routing, headers every response carries, health.

pub mod admission;
mod body;
pub mod caching;
pub mod param_errors;
pub mod params;
mod query;
mod reply;
pub mod schema_header;
mod shape_api;
mod sse;
mod subset;
pub mod subset_body;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{
    ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS,
    CACHE_CONTROL, CONTENT_TYPE, ORIGIN,
};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;

use crate::state::{AppState, Health};

/// The `electric-server` header: the protocol version Syncline speaks.
const SERVER_HEADER: &str = concat!("Syncline/", env!("CARGO_PKG_VERSION"));
/// Headers browsers may read.
const EXPOSE_HEADERS: &str = "electric-cursor,electric-handle,electric-has-data,electric-offset,electric-schema,electric-up-to-date,electric-internal-known-error,retry-after";
/// JSON content type of every body.
const JSON: &str = "application/json; charset=utf-8";

/// The HTTP application.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new().fallback(dispatch).with_state(state)
}

static REQUEST_IDS: AtomicU64 = AtomicU64::new(1);

/// Routes by the normalised path (`/v1/shape/`, `/v1//shape` and `/v1/%73hape` are the shape
/// route), then adds the headers every response carries.
async fn dispatch(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let origin = request.headers().get(ORIGIN).cloned();
    let path = normalise_path(request.uri().path());
    let is_shape = path == "/v1/shape";
    let method = request.method().clone();
    let metrics_here = state.config.prometheus_port.is_none();
    let mut response = match (path.as_str(), &method) {
        ("/v1/shape", _) => shape_api::handle(state.clone(), request).await,
        ("/v1/health", &Method::GET | &Method::HEAD) => health(&state),
        ("/metrics", &Method::GET) if metrics_here => metrics(&state),
        ("/", &Method::GET | &Method::HEAD) => StatusCode::OK.into_response(),
        _ => (StatusCode::NOT_FOUND, "Not found").into_response(),
    };
    let unauthorized = response.status() == StatusCode::UNAUTHORIZED;
    let headers = response.headers_mut();
    headers.insert("electric-server", HeaderValue::from_static(SERVER_HEADER));
    let id = REQUEST_IDS.fetch_add(1, Ordering::Relaxed);
    headers.insert(
        "x-request-id",
        HeaderValue::from_str(&format!("{id:016x}")).expect("hex"),
    );
    if !unauthorized {
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
            HeaderValue::from_static(EXPOSE_HEADERS),
        );
    }
    if !headers.contains_key(CACHE_CONTROL) {
        headers.insert(
            CACHE_CONTROL,
            HeaderValue::from_static("max-age=0, private, must-revalidate"),
        );
    }
    state
        .metrics
        .request(method.as_str(), response.status().as_u16());
    response
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
    m.shapes.set(state.registry().len() as i64);
    Response::builder()
        .header(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")
        .header(CACHE_CONTROL, "no-cache")
        .body(Body::from(m.render()))
        .expect("valid response")
}

/// Percent-decodes unreserved characters, collapses repeated slashes and drops a trailing one.
fn normalise_path(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                decoded.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        decoded.push(bytes[i]);
        i += 1;
    }
    let text = String::from_utf8_lossy(&decoded);
    let parts: Vec<&str> = text.split('/').filter(|p| !p.is_empty()).collect();
    format!("/{}", parts.join("/"))
}

fn health(state: &AppState) -> Response {
    let (status, text) = match state.health() {
        Health::Active => (StatusCode::OK, "active"),
        Health::Waiting => (StatusCode::ACCEPTED, "waiting"),
        Health::Starting => (StatusCode::ACCEPTED, "starting"),
    };
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, JSON)
        .header(CACHE_CONTROL, "no-cache, no-store, must-revalidate")
        .body(Body::from(format!("{{\"status\":\"{text}\"}}")))
        .expect("valid response")
}

#[cfg(test)]
mod tests {
    use super::normalise_path;

    #[test]
    fn shape_route_spellings() {
        for p in [
            "/v1/shape",
            "/v1/shape/",
            "/v1//shape",
            "/v1/%73hape",
            "//v1/shape",
        ] {
            assert_eq!(normalise_path(p), "/v1/shape", "{p}");
        }
        assert_eq!(normalise_path("/"), "/");
        assert_eq!(normalise_path("/v1/shapes"), "/v1/shapes");
        assert_eq!(normalise_path("/v1/%zz"), "/v1/%zz");
        assert_eq!(normalise_path("/v1/%7"), "/v1/%7");
    }
}

//! HTTP caching: `cache-control` per response case, the live `electric-cursor`, etags and
//! `If-None-Match`.
//!
//! Caching is how Electric scales reads: CDNs keep `-1` and catch-up chunks, and collapse
//! identical live requests (the cursor makes live URLs unique per long-poll window).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::header::{CACHE_CONTROL, IF_NONE_MATCH};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use syncline_core::LogOffset;

use super::request_offset::RequestOffset;

/// `cache-control` of an `offset=-1` response: long in browsers, an hour in shared caches.
pub const INITIAL_CACHE_CONTROL: &str =
    "public, max-age=604800, s-maxage=3600, stale-while-revalidate=2629746";
/// `cache-control` of a live long-poll response.
pub const LIVE_CACHE_CONTROL: &str = "public, max-age=5, stale-while-revalidate=5";
/// `cache-control` of POST/DELETE responses and of subset snapshots.
pub const NO_CACHE: &str = "no-cache";
/// `cache-control` and `surrogate-control` of errors (except 409).
pub const NO_STORE: &str = "no-store";
/// `cache-control` of `/v1/health`.
pub const HEALTH_CACHE_CONTROL: &str = "no-cache, no-store, must-revalidate";
/// `cache-control` of routes that set none (Plug's default).
pub const DEFAULT_CACHE_CONTROL: &str = "max-age=0, private, must-revalidate";
/// The `surrogate-control` header name.
pub const SURROGATE_CONTROL: HeaderName = HeaderName::from_static("surrogate-control");

/// Cache lifetimes a deployment configures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// `max-age` of non-live responses (`ELECTRIC_CACHE_MAX_AGE`, default 60; tests use 1).
    pub max_age_s: u64,
    /// `stale-while-revalidate` of non-live responses (`ELECTRIC_CACHE_STALE_AGE`, default
    /// 300; tests use 3).
    pub stale_age_s: u64,
    /// How long an SSE response stays open (default 60 s).
    pub sse_timeout: Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_age_s: 60,
            stale_age_s: 300,
            sse_timeout: Duration::from_secs(60),
        }
    }
}

/// What decides a shape response's caching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseFacts {
    /// Request method (HEAD counts as GET).
    pub method: Method,
    /// Response status.
    pub status: StatusCode,
    /// A 409 that carries the new handle.
    pub handle_known: bool,
    /// The requested offset, when the parameters were valid.
    pub offset: Option<RequestOffset>,
    /// `live=true`.
    pub live: bool,
    /// `live_sse=true`.
    pub live_sse: bool,
    /// A subset snapshot (`subset__*` or POST body).
    pub subset: bool,
}

/// The caching headers of one response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheHeaders {
    /// `cache-control` value.
    pub cache_control: HeaderValue,
    /// `surrogate-control` value (errors only).
    pub surrogate_control: Option<HeaderValue>,
}

impl CacheHeaders {
    /// Writes the headers into a response.
    pub fn apply(self, headers: &mut HeaderMap) {
        headers.insert(CACHE_CONTROL, self.cache_control);
        if let Some(value) = self.surrogate_control {
            headers.insert(SURROGATE_CONTROL, value);
        }
    }
}

/// Electric's `cache-control` decision, first match wins: successful subset → `no-cache`;
/// methods other than GET/HEAD/OPTIONS → `no-cache`; 409 → 60 s (1 s without a new handle);
/// other errors → `no-store` (+ `surrogate-control`); `offset=-1`; SSE (just under the SSE
/// timeout); long-poll; everything else with the configured ages.
pub fn cache_headers(facts: &ResponseFacts, config: &CacheConfig) -> CacheHeaders {
    let fixed = |value: &'static str| CacheHeaders {
        cache_control: HeaderValue::from_static(value),
        surrogate_control: None,
    };
    let computed = |value: String| CacheHeaders {
        cache_control: HeaderValue::try_from(value).expect("ASCII header value"),
        surrogate_control: None,
    };
    let get_like = [Method::GET, Method::HEAD, Method::OPTIONS].contains(&facts.method);
    if (facts.subset && facts.status.is_success()) || !get_like {
        return fixed(NO_CACHE);
    }
    if facts.status == StatusCode::CONFLICT {
        let max_age = if facts.handle_known { 60 } else { 1 };
        return computed(format!("public, max-age={max_age}, must-revalidate"));
    }
    if facts.status.as_u16() >= 400 {
        return CacheHeaders {
            cache_control: HeaderValue::from_static(NO_STORE),
            surrogate_control: Some(HeaderValue::from_static(NO_STORE)),
        };
    }
    match (facts.offset, facts.live, facts.live_sse) {
        (Some(RequestOffset::BeforeAll), _, _) => fixed(INITIAL_CACHE_CONTROL),
        (_, true, true) => {
            let max_age = (config.sse_timeout.as_secs().saturating_sub(1)).max(1);
            computed(format!("public, max-age={max_age}"))
        }
        (_, true, false) => fixed(LIVE_CACHE_CONTROL),
        (_, false, _) => computed(format!(
            "public, max-age={}, stale-while-revalidate={}",
            config.max_age_s, config.stale_age_s
        )),
    }
}

/// The cursor epoch, 2024-10-09T00:00:00Z, in Unix seconds.
pub const CURSOR_EPOCH_UNIX_S: u64 = 1_728_432_000;
/// Smallest jitter added to a cursor that would not move forward.
pub const CURSOR_JITTER_MIN_S: u64 = 1;
/// Largest such jitter.
pub const CURSOR_JITTER_MAX_S: u64 = 3600;

/// The `electric-cursor` of a live response.
///
/// With T = the long-poll timeout in whole seconds: the end of the current T-second window
/// since the epoch, `⌈(now − epoch)/T⌉·T`; if that is not past the client's numeric `cursor`,
/// `cursor + jitter` instead, so a client never gets the URL it just used. `jitter` must
/// return a value in [`CURSOR_JITTER_MIN_S`]`..=`[`CURSOR_JITTER_MAX_S`]; it is only called
/// in that case. 0 when T < 1 s.
pub fn electric_cursor(
    now: SystemTime,
    long_poll_timeout: Duration,
    client_cursor: Option<&str>,
    jitter: impl FnOnce() -> u64,
) -> u64 {
    let window_s = long_poll_timeout.as_secs();
    if window_s == 0 {
        return 0;
    }
    let since_epoch_s = now
        .duration_since(UNIX_EPOCH + Duration::from_secs(CURSOR_EPOCH_UNIX_S))
        .unwrap_or_default()
        .as_secs();
    let next = since_epoch_s.div_ceil(window_s) * window_s;
    match client_cursor.and_then(|c| c.parse::<u64>().ok()) {
        Some(client) if next <= client => client + jitter(),
        _ => next,
    }
}

/// The etag of a response, quoted: `"<handle>:<requested offset>:<response offset>"`.
pub fn etag(handle: &str, requested: RequestOffset, response: LogOffset) -> String {
    format!("\"{handle}:{}:{response}\"", request_offset_text(requested))
}

/// The etag of a no-change response (live timeout, `now`): the usual parts plus `unique`, a
/// value no other response of this process carries (e.g. nanoseconds of a monotonic clock), so
/// caches can never revalidate it.
pub fn no_change_etag(
    handle: &str,
    requested: RequestOffset,
    response: LogOffset,
    unique: u64,
) -> String {
    format!(
        "\"{handle}:{}:{response}:{unique}\"",
        request_offset_text(requested)
    )
}

fn request_offset_text(offset: RequestOffset) -> String {
    match offset {
        RequestOffset::BeforeAll => "-1".to_owned(),
        RequestOffset::Now => "now".to_owned(),
        RequestOffset::After(offset) => offset.to_string(),
    }
}

/// True when an `If-None-Match` header names `etag` (as returned by [`etag`]): every header
/// line is a comma list; entries are compared with surrounding whitespace and quotes removed.
pub fn if_none_match_hits(request_headers: &HeaderMap, etag: &str) -> bool {
    let wanted = etag.trim_matches('"');
    request_headers
        .get_all(IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|entry| entry.trim().trim_matches('"') == wanted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(offset: Option<RequestOffset>, live: bool, live_sse: bool) -> ResponseFacts {
        ResponseFacts {
            method: Method::GET,
            status: StatusCode::OK,
            handle_known: true,
            offset,
            live,
            live_sse,
            subset: false,
        }
    }

    /// `cache-control` and `surrogate-control` values.
    type Control = (String, Option<String>);

    fn control(facts: &ResponseFacts, config: &CacheConfig) -> Control {
        let h = cache_headers(facts, config);
        (
            h.cache_control.to_str().unwrap().to_owned(),
            h.surrogate_control.map(|v| v.to_str().unwrap().to_owned()),
        )
    }

    #[test]
    fn cache_control_cases() {
        let cfg = CacheConfig::default();
        let tests_cfg = CacheConfig {
            max_age_s: 1,
            stale_age_s: 3,
            sse_timeout: Duration::from_secs(60),
        };
        let short_sse = CacheConfig {
            sse_timeout: Duration::from_millis(1500),
            ..cfg
        };
        let catch_up = Some(RequestOffset::After(LogOffset::new(5, 0)));
        let ok = |v: &str| (v.to_owned(), None);
        let cases: Vec<(ResponseFacts, &CacheConfig, Control)> = vec![
            (
                facts(Some(RequestOffset::BeforeAll), false, false),
                &cfg,
                ok("public, max-age=604800, s-maxage=3600, stale-while-revalidate=2629746"),
            ),
            (
                facts(catch_up, false, false),
                &cfg,
                ok("public, max-age=60, stale-while-revalidate=300"),
            ),
            (
                facts(catch_up, false, false),
                &tests_cfg,
                ok("public, max-age=1, stale-while-revalidate=3"),
            ),
            (
                facts(Some(RequestOffset::Now), false, false),
                &cfg,
                ok("public, max-age=60, stale-while-revalidate=300"),
            ),
            (
                facts(catch_up, true, false),
                &cfg,
                ok("public, max-age=5, stale-while-revalidate=5"),
            ),
            (facts(catch_up, true, true), &cfg, ok("public, max-age=59")),
            (
                facts(catch_up, true, true),
                &short_sse,
                ok("public, max-age=1"),
            ),
            (
                ResponseFacts {
                    status: StatusCode::CONFLICT,
                    ..facts(catch_up, true, false)
                },
                &cfg,
                ok("public, max-age=60, must-revalidate"),
            ),
            (
                ResponseFacts {
                    status: StatusCode::CONFLICT,
                    handle_known: false,
                    ..facts(catch_up, false, false)
                },
                &cfg,
                ok("public, max-age=1, must-revalidate"),
            ),
            (
                ResponseFacts {
                    method: Method::POST,
                    ..facts(catch_up, false, false)
                },
                &cfg,
                ok("no-cache"),
            ),
            (
                ResponseFacts {
                    method: Method::POST,
                    status: StatusCode::BAD_REQUEST,
                    ..facts(None, false, false)
                },
                &cfg,
                ok("no-cache"),
            ),
            (
                ResponseFacts {
                    method: Method::DELETE,
                    status: StatusCode::ACCEPTED,
                    ..facts(None, false, false)
                },
                &cfg,
                ok("no-cache"),
            ),
            (
                ResponseFacts {
                    subset: true,
                    ..facts(catch_up, false, false)
                },
                &cfg,
                ok("no-cache"),
            ),
            (
                ResponseFacts {
                    method: Method::HEAD,
                    ..facts(Some(RequestOffset::BeforeAll), false, false)
                },
                &cfg,
                ok("public, max-age=604800, s-maxage=3600, stale-while-revalidate=2629746"),
            ),
        ];
        for (f, c, want) in &cases {
            assert_eq!(control(f, c), *want, "{f:?}");
        }
        for status in [400, 401, 404, 500, 503] {
            for subset in [false, true] {
                let f = ResponseFacts {
                    status: StatusCode::from_u16(status).unwrap(),
                    subset,
                    ..facts(Some(RequestOffset::BeforeAll), true, true)
                };
                assert_eq!(
                    control(&f, &cfg),
                    ("no-store".into(), Some("no-store".into())),
                    "{f:?}"
                );
            }
        }
    }

    #[test]
    fn applies_headers() {
        let mut headers = HeaderMap::new();
        let f = ResponseFacts {
            status: StatusCode::NOT_FOUND,
            ..facts(None, false, false)
        };
        cache_headers(&f, &CacheConfig::default()).apply(&mut headers);
        assert_eq!(headers["cache-control"], "no-store");
        assert_eq!(headers["surrogate-control"], "no-store");

        let mut headers = HeaderMap::new();
        cache_headers(&facts(None, true, false), &CacheConfig::default()).apply(&mut headers);
        assert_eq!(
            headers["cache-control"],
            "public, max-age=5, stale-while-revalidate=5"
        );
        assert!(!headers.contains_key("surrogate-control"));
    }

    fn at(since_epoch_s: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(CURSOR_EPOCH_UNIX_S + since_epoch_s)
    }

    #[test]
    fn cursor_is_the_end_of_the_current_window() {
        let t = Duration::from_secs(20);
        let no_jitter = || panic!("jitter used");
        assert_eq!(electric_cursor(at(0), t, None, no_jitter), 0);
        assert_eq!(electric_cursor(at(1), t, None, no_jitter), 20);
        assert_eq!(electric_cursor(at(20), t, None, no_jitter), 20);
        assert_eq!(electric_cursor(at(21), t, None, no_jitter), 40);
        // Sub-second parts are dropped before rounding up, as DateTime.diff does.
        let frac = at(20) + Duration::from_millis(999);
        assert_eq!(electric_cursor(frac, t, None, no_jitter), 20);
        // T is whole seconds of the timeout.
        assert_eq!(
            electric_cursor(at(21), Duration::from_millis(20_999), None, no_jitter),
            40
        );
        // A client cursor behind the window, or not a number, does not matter.
        assert_eq!(electric_cursor(at(21), t, Some("20"), no_jitter), 40);
        assert_eq!(electric_cursor(at(21), t, Some("abc"), no_jitter), 40);
        assert_eq!(electric_cursor(at(21), t, Some(""), no_jitter), 40);
        // A clock before the epoch counts as the epoch.
        let before = UNIX_EPOCH + Duration::from_secs(CURSOR_EPOCH_UNIX_S - 100);
        assert_eq!(electric_cursor(before, t, None, no_jitter), 0);
    }

    #[test]
    fn cursor_jumps_past_the_clients() {
        let t = Duration::from_secs(20);
        assert_eq!(electric_cursor(at(21), t, Some("40"), || 7), 47);
        assert_eq!(electric_cursor(at(21), t, Some("1000"), || 3600), 4600);
        assert_eq!(electric_cursor(at(21), t, Some("41"), || 1), 42);
    }

    #[test]
    fn cursor_is_zero_below_one_second() {
        let used = || panic!("jitter used");
        for ms in [0, 1, 999] {
            assert_eq!(
                electric_cursor(at(12345), Duration::from_millis(ms), Some("0"), used),
                0
            );
        }
    }

    #[test]
    fn etags() {
        let resp = LogOffset::new(26800584, 4);
        assert_eq!(
            etag(
                "3833821-1729874417404123",
                RequestOffset::BeforeAll,
                LogOffset::ZERO
            ),
            "\"3833821-1729874417404123:-1:0_0\""
        );
        assert_eq!(
            etag("h", RequestOffset::After(LogOffset::SNAPSHOT_END), resp),
            "\"h:0_inf:26800584_4\""
        );
        assert_eq!(
            no_change_etag("h", RequestOffset::Now, resp, 991),
            "\"h:now:26800584_4:991\""
        );
    }

    #[test]
    fn if_none_match() {
        let tag = etag(
            "h",
            RequestOffset::After(LogOffset::new(1, 2)),
            LogOffset::new(3, 4),
        );
        let hits = |values: &[&str]| {
            let mut headers = HeaderMap::new();
            for v in values {
                headers.append(IF_NONE_MATCH, HeaderValue::from_str(v).unwrap());
            }
            if_none_match_hits(&headers, &tag)
        };
        assert!(hits(&["\"h:1_2:3_4\""]));
        assert!(hits(&["h:1_2:3_4"]));
        assert!(hits(&["\"x\", \"h:1_2:3_4\""]));
        assert!(hits(&["\"x\",h:1_2:3_4 "]));
        assert!(hits(&["\"x\"", "\"h:1_2:3_4\""]));
        assert!(!hits(&[]));
        assert!(!hits(&["\"h:1_2:3_5\""]));
        assert!(!hits(&["W/\"h:1_2:3_4\""]));
        assert!(!hits(&["*"]));
    }
}

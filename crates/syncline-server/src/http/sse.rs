//! Live mode over server-sent events (`live=true&live_sse=true`): one long response that sends
//! each message as `data: <json>\n\n`, ends every batch with `up-to-date`, and keeps idle
//! connections open with `: keep-alive` comments.
//!
//! The stream closes after the SSE timeout (the client reconnects from its offset), and without
//! a word when the shape goes away: the reconnect then gets 409. Messages go out as soon as
//! they are durable, across chunk ends (SSE responses are never cached, so they need not stop
//! at chunk boundaries).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::header::{CONNECTION, CONTENT_TYPE, ETAG};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use syncline_core::LogOffset;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::body::{range_bytes, up_to_date};
use super::caching::{self, ResponseFacts};
use super::reply::{cache_config, header_value};
use super::shape_api::Serve;
use crate::shape::Shape;
use crate::state::AppState;

/// How often an idle stream sends a keep-alive comment (Electric: 21 s).
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(21);
/// Event batches queued ahead of a slow client.
const BATCHES_QUEUED_MAX: usize = 4;

type Batch = Result<Bytes, io::Error>;

impl Serve<'_> {
    /// Answers a live SSE request reading after `from`.
    pub(super) fn sse(self, from: LogOffset) -> Response {
        let config = cache_config(self.state);
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        headers.insert(CONNECTION, HeaderValue::from_static("keep-alive"));
        headers.insert("electric-handle", header_value(&self.shape.handle));
        headers.insert("electric-offset", header_value(&from.to_string()));
        headers.insert("electric-cursor", header_value(&self.cursor().to_string()));
        headers.insert(
            ETAG,
            header_value(&caching::etag(&self.shape.handle, self.params.offset, from)),
        );
        let facts = ResponseFacts {
            method: self.method.clone(),
            status: StatusCode::OK,
            handle_known: true,
            offset: Some(self.params.offset),
            live: true,
            live_sse: true,
            subset: false,
        };
        caching::cache_headers(&facts, &config).apply(&mut headers);
        let (batches, mut body) = mpsc::channel(BATCHES_QUEUED_MAX);
        if *self.method != Method::HEAD {
            let (state, shape, ticket) = (self.state.clone(), self.shape.clone(), self.ticket);
            let deadline = Instant::now() + config.sse_timeout;
            tokio::spawn(async move {
                stream(state, shape, from, deadline, batches).await;
                drop(ticket);
            });
        }
        let mut response = Response::new(Body::from_stream(futures_util::stream::poll_fn(
            move |cx| body.poll_recv(cx),
        )));
        *response.headers_mut() = headers;
        response
    }
}

/// Sends what the shape has after `from`, then each new durable batch, until `deadline`, the
/// shape going away, or the client leaving.
async fn stream(
    state: Arc<AppState>,
    shape: Arc<Shape>,
    mut from: LogOffset,
    deadline: Instant,
    batches: mpsc::Sender<Batch>,
) {
    let mut changes = shape.subscribe();
    loop {
        let st = changes.borrow_and_update().clone();
        if st.gone || st.failed.is_some() {
            return;
        }
        if st.snapshot_done {
            match catch_up(&state, &shape, &mut from) {
                Ok(Some(events)) => {
                    if batches.send(Ok(events)).await.is_err() {
                        return;
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(handle = %shape.handle, error = %e, "shape log read failed");
                    let _ = batches.send(Err(e)).await;
                    return;
                }
            }
        }
        let idle = Instant::now() + KEEP_ALIVE_INTERVAL;
        tokio::select! {
            changed = changes.changed() => if changed.is_err() {
                return;
            },
            _ = tokio::time::sleep_until(idle.min(deadline)) => {
                if Instant::now() >= deadline {
                    return;
                }
                let keep_alive = Bytes::from_static(b": keep-alive\n\n");
                if batches.send(Ok(keep_alive)).await.is_err() {
                    return;
                }
            }
            _ = batches.closed() => return,
        }
    }
}

/// The events for everything readable after `from` up to the end of the durable log (one
/// chunk at a time), closed with `up-to-date`; `None` when there is nothing new.
fn catch_up(state: &AppState, shape: &Shape, from: &mut LogOffset) -> io::Result<Option<Bytes>> {
    let mut events = Vec::new();
    loop {
        let read = tokio::task::block_in_place(|| {
            shape.with_reader(&state.store, |r| r.read(Some(*from)))
        })
        .map_err(io::Error::other)?;
        let Some(range) = read.body.as_ref() else {
            break;
        };
        let end = read.end_offset.unwrap_or(*from);
        for message in split_messages(&range_bytes(range)?) {
            events.extend_from_slice(b"data: ");
            events.extend_from_slice(message);
            events.extend_from_slice(b"\n\n");
        }
        *from = end;
        if read.up_to_date {
            events.extend_from_slice(b"data: ");
            events.extend_from_slice(up_to_date(end.tx).as_bytes());
            events.extend_from_slice(b"\n\n");
            break;
        }
    }
    Ok((!events.is_empty()).then(|| Bytes::from(events)))
}

/// The messages of a stored range (`,{…},{…}`): each JSON object, found by tracking strings and
/// nesting, without parsing values.
fn split_messages(range: &[u8]) -> Vec<&[u8]> {
    let mut messages = Vec::new();
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let mut start = 0;
    for (i, &b) in range.iter().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                if depth == 0 {
                    start = i;
                }
                depth += 1;
            }
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    messages.push(&range[start..=i]);
                }
            }
            _ => {}
        }
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::split_messages;

    #[test]
    fn splits_stored_messages_at_their_own_braces() {
        let stored = br#",{"key":"a}","value":{"t":"{\"x\"]"}},{"headers":{"control":"snapshot-end","xip_list":["1"]}}"#;
        let parts: Vec<&str> = split_messages(stored)
            .into_iter()
            .map(|m| std::str::from_utf8(m).unwrap())
            .collect();
        assert_eq!(
            parts,
            [
                r#"{"key":"a}","value":{"t":"{\"x\"]"}}"#,
                r#"{"headers":{"control":"snapshot-end","xip_list":["1"]}}"#
            ]
        );
        for part in parts {
            serde_json::from_str::<serde_json::Value>(part).unwrap();
        }
    }
}

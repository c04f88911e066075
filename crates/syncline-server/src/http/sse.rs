//! Live mode over server-sent events (`live=true&live_sse=true`): one long response that sends
//! each message as `data: <json>\n\n`, ends every batch with `up-to-date`, and keeps idle
//! connections open with `: keep-alive` comments.
//!
//! The stream closes after the SSE timeout (the client reconnects from its offset), when the
//! server shuts down (likewise, through a load balancer to another server), and without a word
//! when the shape goes away: the reconnect then gets 409. Messages go out as soon as
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
use syncline_core::wire::{self, header};
use syncline_core::LogOffset;
use syncline_storage::Messages;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio::time::Instant;

use super::body::range_bytes;
use super::caching::{self, ResponseFacts};
use super::position;
use super::reply::{cache_config, header_value};
use super::shape_api::Serve;
use crate::shapes::{Shape, ShapeState};

/// How often an idle stream sends a keep-alive comment (Electric: 21 s).
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(21);
/// Event batches queued ahead of a slow client.
const BATCHES_QUEUED_MAX: usize = 4;

type Batch = Result<Bytes, io::Error>;

impl Serve<'_> {
    /// Answers a live SSE request for the client's offset `from`, reading the log after
    /// `start` (see [`super::position`]).
    pub(super) fn sse(self, from: LogOffset, start: LogOffset) -> Response {
        let config = cache_config(self.state);
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        headers.insert(CONNECTION, HeaderValue::from_static("keep-alive"));
        headers.insert(header::HANDLE, header_value(&self.shape.handle));
        headers.insert(header::OFFSET, header_value(&from.to_string()));
        headers.insert(header::CURSOR, header_value(&self.cursor().to_string()));
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
            let (shape, ticket) = (self.shape.clone(), self.ticket);
            let health = self.state.health.clone();
            let deadline = Instant::now() + config.sse_timeout;
            tokio::spawn(async move {
                tokio::select! {
                    () = stream(shape, start, deadline, batches) => {}
                    () = health.wait_stopping() => {}
                }
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
    shape: Arc<Shape>,
    mut from: LogOffset,
    deadline: Instant,
    batches: mpsc::Sender<Batch>,
) {
    let mut changes = shape.subscribe();
    let mut messages = Messages::new();
    let mut behind = false;
    // The state the last read was made at: it found everything durable then, so until the
    // state changes another read would find nothing (and a later read is one a change woke).
    let mut read_at: Option<ShapeState> = None;
    loop {
        let st = changes.borrow_and_update();
        if st.gone || st.failed.is_some() {
            return;
        }
        if st.snapshot_done && read_at.as_ref() != Some(&st) {
            let woken = read_at.replace(st.clone()).is_some();
            // A stream woken by new data reads what was just written, from the page cache:
            // on the runtime's thread, and read and framed once for all the streams woken with
            // it, as woken long-polls read (`Shape::read_shared`). A stream starting at the
            // log's end reads the same way: it finds nothing new. Thousands of streams each
            // handing the thread over would make the runtime start a thread for each. A
            // stream behind the end hands the thread over: at its first catch-up, and after
            // its client fell behind (its last batch waited for room in the queue, while
            // more data may have come).
            let batch = if (woken && !behind) || position::at_end(&st, Some(from)) {
                shape.sse_batch_shared(st, from, || catch_up(&shape, from, &mut messages))
            } else {
                crate::blocking::in_place(|| catch_up(&shape, from, &mut messages))
                    .map(|batch| batch.map(|(events, end)| (Bytes::from(events), end)))
            };
            match batch {
                Ok(Some((events, end))) => {
                    from = end;
                    behind = match batches.try_send(Ok(events)) {
                        Ok(()) => false,
                        Err(TrySendError::Full(batch)) => {
                            if batches.send(batch).await.is_err() {
                                return;
                            }
                            true
                        }
                        Err(TrySendError::Closed(_)) => return,
                    };
                    continue;
                }
                Ok(None) => {}
                // The shape went away during the read (its files are deleted with it): the
                // stream ends as it does for a shape that is gone, cleanly.
                Err(_) if shape.state().gone => return,
                Err(e) => {
                    tracing::warn!(handle = %shape.handle, error = %e, "shape log read failed");
                    let _ = batches.send(Err(e)).await;
                    return;
                }
            }
        }
        let idle = Instant::now() + KEEP_ALIVE_INTERVAL;
        tokio::select! {
            () = changes.changed() => {}
            _ = tokio::time::sleep_until(idle.min(deadline)) => {
                if Instant::now() >= deadline {
                    return;
                }
                let keep_alive = Bytes::from_static(wire::SSE_KEEP_ALIVE);
                if batches.send(Ok(keep_alive)).await.is_err() {
                    return;
                }
            }
            _ = batches.closed() => return,
        }
    }
}

/// The events for everything readable after `from` up to the end of the durable log (one
/// chunk at a time), closed with `up-to-date`, and the offset they end at; `None` when there
/// is nothing new. Each message is framed where the log's records say it lies, without
/// parsing it. Reads on the calling thread.
fn catch_up(
    shape: &Shape,
    mut from: LogOffset,
    messages: &mut Messages,
) -> io::Result<Option<(Vec<u8>, LogOffset)>> {
    let mut events = Vec::new();
    loop {
        let read = shape
            .with_reader(|r| r.read_messages(Some(from), messages))
            .map_err(io::Error::other)?;
        let Some(range) = read.body.as_ref() else {
            break;
        };
        let end = read.end_offset.unwrap_or(from);
        let body = range_bytes(range)?;
        for span in messages.spans() {
            let stored = span.json(&body);
            assert_eq!(
                stored.first(),
                Some(&wire::STORED_SEPARATOR),
                "stored messages start with a separator"
            );
            wire::write_sse_event(&mut events, &stored[1..]);
        }
        from = end;
        if read.up_to_date {
            wire::write_sse_event(&mut events, &wire::up_to_date(end.tx));
            break;
        }
    }
    Ok((!events.is_empty()).then_some((events, from)))
}

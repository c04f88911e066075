//! A client of Electric's HTTP shape protocol for load generation: one shape, followed over
//! keep-alive HTTP from `offset=-1` through `electric-handle` and `electric-offset`, then
//! live (`live=true` with the last `electric-cursor`) once `electric-up-to-date` was seen:
//! long-polls, or one server-sent-events stream ([`LiveMode::Sse`], `live_sse=true`) read
//! batch by batch, each ending with an `up-to-date` event.
//!
//! It only needs a base URL, so it drives any server that speaks the protocol. Many clients
//! share one [`Pool`] (hyper's keep-alive connections) on one tokio runtime. By default a
//! client only counts the change messages it receives, by finding their `"operation":`
//! header key in the body without parsing JSON, which keeps its CPU per response small; with
//! `apply` it parses every body and keeps the shape's rows by key.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use hyper::header::HeaderMap;
use hyper::StatusCode;
use memchr::memmem::Finder;
use reqwest::Url;
use serde_json::Value;

pub(crate) use super::http_pool::Error;
use super::http_pool::{Pool, Response};

/// A change message's header key as a server writes it. Object keys are never escaped, and
/// a quote inside a value is, so this only matches a message header (or a column named
/// `operation`, which the benchmark tables do not have).
const OPERATION_KEY: &[u8] = b"\"operation\":";
/// How long to wait before retrying a 503 or 429 that gives no `retry-after`.
const RETRY_AFTER_DEFAULT: Duration = Duration::from_secs(1);
/// What ends one server-sent event.
const SSE_EVENT_END: &[u8] = b"\n\n";
/// The start of an event's data line.
const SSE_DATA: &[u8] = b"data: ";
/// The key of an `up-to-date` control message's LSN, with its opening quote.
const LAST_SEEN_LSN_KEY: &[u8] = b"\"global_last_seen_lsn\":\"";
/// Searchers for those, built once.
static OPERATION: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(OPERATION_KEY));
static EVENT_END: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(SSE_EVENT_END));
static LAST_SEEN_LSN: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(LAST_SEEN_LSN_KEY));

/// How a client's live requests wait for changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum LiveMode {
    /// One long-poll per answer (`live=true`).
    #[default]
    LongPoll,
    /// One response that stays open and sends each batch as server-sent events
    /// (`live=true&live_sse=true`), opened again when the server closes it.
    Sse,
}

impl LiveMode {
    /// The mode's name in the scenarios' JSON.
    pub(crate) fn name(self) -> &'static str {
        match self {
            LiveMode::LongPoll => "long-poll",
            LiveMode::Sse => "sse",
        }
    }
}

/// Counts of what one client did.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Stats {
    /// Requests sent.
    pub(crate) requests: u64,
    /// Change messages received.
    pub(crate) changes: u64,
    /// 409 answers or `must-refetch` controls, after which the shape was read again from
    /// `offset=-1`.
    pub(crate) refetches: u64,
    /// 503 or 429 answers, retried after their `retry-after`.
    pub(crate) unavailable: u64,
}

/// One client following one shape.
pub(crate) struct ShapeClient {
    /// The connection pool the client's requests go through.
    http: Pool,
    /// `<base>/v1/shape?<shape parameters>`, without a position.
    shape_url: Url,
    /// The shape's handle, once a server gave one.
    handle: Option<String>,
    /// Where the next request reads from.
    offset: String,
    /// The last `electric-cursor`, sent back on live requests.
    cursor: Option<String>,
    /// Whether the shape was up to date once, so that requests are live.
    live: bool,
    /// How live requests wait.
    mode: LiveMode,
    /// The open SSE response, in [`LiveMode::Sse`] once live.
    sse: Option<SseStream>,
    /// The shape's rows by key, when the client applies what it receives.
    rows: Option<HashMap<String, Value>>,
    /// What the client did.
    stats: Stats,
}

/// One answer as the client saw it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Answer {
    /// When the whole body was read.
    pub(crate) at: Instant,
    /// Change messages in it.
    pub(crate) changes: u64,
    /// Whether it carried `electric-up-to-date`.
    pub(crate) up_to_date: bool,
}

impl ShapeClient {
    /// A client for the shape `params` (`table`, `where`, …) of the server at `base_url`
    /// (e.g. `http://127.0.0.1:3000`), through `http`, waiting live by `mode`; with `apply` it
    /// keeps the rows.
    pub(crate) fn new(
        http: Pool,
        base_url: &str,
        params: &[(&str, &str)],
        mode: LiveMode,
        apply: bool,
    ) -> Result<ShapeClient, Error> {
        let mut shape_url = Url::parse(base_url)?.join("v1/shape")?;
        shape_url.query_pairs_mut().extend_pairs(params);
        Ok(ShapeClient {
            http,
            shape_url,
            handle: None,
            offset: "-1".into(),
            cursor: None,
            live: false,
            mode,
            sse: None,
            rows: apply.then(HashMap::new),
            stats: Stats::default(),
        })
    }

    /// What the client did so far.
    pub(crate) fn stats(&self) -> Stats {
        self.stats
    }

    /// The shape's handle, once a server gave one.
    pub(crate) fn handle(&self) -> Option<&str> {
        self.handle.as_deref()
    }

    /// The shape's rows by key, when the client applies what it receives.
    pub(crate) fn rows(&self) -> Option<&HashMap<String, Value>> {
        self.rows.as_ref()
    }

    /// Reads until an answer carries `electric-up-to-date` (from `offset=-1` for a new
    /// client); returns that answer.
    pub(crate) async fn sync(&mut self) -> Result<Answer, Error> {
        loop {
            let answer = self.request().await?;
            if answer.up_to_date {
                return Ok(answer);
            }
        }
    }

    /// Reads until at least `changes` more change messages have arrived and an answer
    /// carries `electric-up-to-date`; returns that answer, with all the changes counted.
    /// `sent` is called just before each request goes out. A shape that must be read again
    /// (409 or `must-refetch`) is an error here: the changes waited for would come back mixed
    /// with the whole shape.
    pub(crate) async fn wait_changes(
        &mut self,
        changes: u64,
        mut sent: impl FnMut(),
    ) -> Result<Answer, Error> {
        let mut seen = 0;
        let refetches = self.stats.refetches;
        loop {
            sent();
            let mut answer = self.request().await?;
            if self.stats.refetches != refetches {
                return Err("the shape had to be read again (409 or must-refetch)".into());
            }
            seen += answer.changes;
            if seen >= changes && answer.up_to_date {
                answer.changes = seen;
                return Ok(answer);
            }
        }
    }

    /// Takes in one answer from where the client is: the next response, or in
    /// [`LiveMode::Sse`] once live the next batch of events.
    pub(crate) async fn request(&mut self) -> Result<Answer, Error> {
        loop {
            let answer = if self.live && self.mode == LiveMode::Sse {
                self.sse_batch().await?
            } else {
                self.poll().await?
            };
            if let Some(answer) = answer {
                return Ok(answer);
            }
        }
    }

    /// The shape's URL at the client's position; `sse` asks for a server-sent-events stream.
    fn url(&self, sse: bool) -> Url {
        let mut url = self.shape_url.clone();
        let mut query = url.query_pairs_mut();
        query.append_pair("offset", &self.offset);
        if let Some(handle) = &self.handle {
            query.append_pair("handle", handle);
        }
        if self.live {
            query.append_pair("live", "true");
            if sse {
                query.append_pair("live_sse", "true");
            }
            if let Some(cursor) = &self.cursor {
                query.append_pair("cursor", cursor);
            }
        }
        drop(query);
        url
    }

    /// Sends one request (a long-poll once live) and takes in its answer; `None` when it must
    /// be sent again (after a 409, a `must-refetch`, a 503 or 429).
    async fn poll(&mut self) -> Result<Option<Answer>, Error> {
        let url = self.url(false);
        self.stats.requests += 1;
        let response = self.http.get(url.as_str(), None).await?;
        let status = response.status();
        let head = Head::of(response.headers());
        let body = response.bytes().await?;
        let at = Instant::now();
        match status {
            StatusCode::OK => {}
            StatusCode::NO_CONTENT => {
                return Ok(Some(Answer {
                    at,
                    changes: 0,
                    up_to_date: true,
                }))
            }
            _ => return self.not_ok(&url, status, head, &body).await,
        }
        let (Some(handle), Some(offset)) = (head.handle, head.offset) else {
            return Err(format!("GET {url}: no electric-handle or electric-offset").into());
        };
        let changes = match &mut self.rows {
            Some(rows) => match apply(rows, &body)? {
                Applied::Changes(n) => n,
                Applied::MustRefetch => {
                    self.refetch(Some(handle));
                    return Ok(None);
                }
            },
            None => u64::try_from(OPERATION.find_iter(&body).count())?,
        };
        self.stats.changes += changes;
        self.handle = Some(handle);
        self.offset = offset;
        if head.cursor.is_some() {
            self.cursor = head.cursor;
        }
        self.live |= head.up_to_date;
        Ok(Some(Answer {
            at,
            changes,
            up_to_date: head.up_to_date,
        }))
    }

    /// A response other than 200 or 204: after a 409 the shape is read again, after a 503
    /// or 429 the request waits its `retry-after` (`None`: send it again); anything else is
    /// an error.
    async fn not_ok(
        &mut self,
        url: &Url,
        status: StatusCode,
        head: Head,
        body: &[u8],
    ) -> Result<Option<Answer>, Error> {
        match status {
            StatusCode::CONFLICT => {
                self.refetch(head.handle);
                Ok(None)
            }
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => {
                self.stats.unavailable += 1;
                let wait = head
                    .retry_after
                    .and_then(|s| s.parse().ok())
                    .map_or(RETRY_AFTER_DEFAULT, Duration::from_secs);
                tokio::time::sleep(wait).await;
                Ok(None)
            }
            _ => Err(format!("GET {url}: {status} {}", String::from_utf8_lossy(body)).into()),
        }
    }

    /// Reads the next batch of the SSE stream, through its `up-to-date` event, opening the
    /// stream first if none is open; `None` when it must be tried again (the stream could
    /// not be opened, or the server closed it before the batch was whole: it is opened
    /// again from the last `up-to-date`, which sends the batch again).
    ///
    /// As Electric's client does, the offset after an `up-to-date` event is
    /// `<global_last_seen_lsn>_0`.
    async fn sse_batch(&mut self) -> Result<Option<Answer>, Error> {
        if self.sse.is_none() {
            let url = self.url(true);
            self.stats.requests += 1;
            let response = self
                .http
                .get(url.as_str(), Some("text/event-stream"))
                .await?;
            let status = response.status();
            let head = Head::of(response.headers());
            if status != StatusCode::OK {
                let body = response.bytes().await?;
                return self.not_ok(&url, status, head, &body).await;
            }
            let Some(handle) = head.handle else {
                return Err(format!("GET {url}: no electric-handle").into());
            };
            self.handle = Some(handle);
            if head.cursor.is_some() {
                self.cursor = head.cursor;
            }
            self.sse = Some(SseStream {
                response,
                pending: Vec::new(),
            });
        }
        let stream = self.sse.as_mut().expect("opened above");
        let mut changes = 0;
        loop {
            let mut parsed = 0;
            while let Some(len) = EVENT_END.find(&stream.pending[parsed..]) {
                let event = &stream.pending[parsed..parsed + len];
                parsed += len + SSE_EVENT_END.len();
                for data in event
                    .split(|&b| b == b'\n')
                    .filter_map(|line| line.strip_prefix(SSE_DATA))
                {
                    if let Some(lsn) = last_seen_lsn(data) {
                        self.offset = format!("{lsn}_0");
                        stream.pending.drain(..parsed);
                        self.stats.changes += changes;
                        return Ok(Some(Answer {
                            at: Instant::now(),
                            changes,
                            up_to_date: true,
                        }));
                    }
                    if OPERATION.find(data).is_none() {
                        continue;
                    }
                    changes += 1;
                    if let Some(rows) = &mut self.rows {
                        apply_message(rows, serde_json::from_slice(data)?)?;
                    }
                }
            }
            stream.pending.drain(..parsed);
            match stream.response.chunk().await? {
                Some(bytes) => stream.pending.extend_from_slice(&bytes),
                None => {
                    self.sse = None;
                    return Ok(None);
                }
            }
        }
    }

    /// Starts the shape again from `offset=-1`, under `handle` if the server named one.
    fn refetch(&mut self, handle: Option<String>) {
        self.stats.refetches += 1;
        self.sse = None;
        self.handle = handle;
        self.offset = "-1".into();
        self.cursor = None;
        self.live = false;
        if let Some(rows) = &mut self.rows {
            rows.clear();
        }
    }
}

/// What applying a body did.
enum Applied {
    /// This many change messages were applied.
    Changes(u64),
    /// The body told the client to read the shape again.
    MustRefetch,
}

/// An open SSE response and what has arrived of its next events.
struct SseStream {
    /// The response, read chunk by chunk.
    response: Response,
    /// Bytes received of events not yet whole.
    pending: Vec<u8>,
}

/// The headers of a response that the client uses.
struct Head {
    /// `electric-handle`.
    handle: Option<String>,
    /// `electric-offset`.
    offset: Option<String>,
    /// `electric-cursor`.
    cursor: Option<String>,
    /// `retry-after`.
    retry_after: Option<String>,
    /// Whether `electric-up-to-date` is present.
    up_to_date: bool,
}

/// The header `name` of `headers` as text, if present and visible ASCII.
pub(crate) fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

impl Head {
    /// The headers a response came with.
    fn of(headers: &HeaderMap) -> Head {
        let header = |name: &str| header(headers, name);
        Head {
            handle: header("electric-handle"),
            offset: header("electric-offset"),
            cursor: header("electric-cursor"),
            retry_after: header("retry-after"),
            up_to_date: headers.contains_key("electric-up-to-date"),
        }
    }
}

/// The `global_last_seen_lsn` of an `up-to-date` control message (one SSE event's data).
fn last_seen_lsn(data: &[u8]) -> Option<&str> {
    let at = LAST_SEEN_LSN.find(data)? + LAST_SEEN_LSN_KEY.len();
    let len = data[at..].iter().position(|&b| b == b'"')?;
    std::str::from_utf8(&data[at..at + len]).ok()
}

/// Applies the messages of `body` (a JSON array) to `rows` (see [`apply_message`]).
fn apply(rows: &mut HashMap<String, Value>, body: &[u8]) -> Result<Applied, Error> {
    let messages: Vec<Value> = serde_json::from_slice(body)?;
    let mut changes = 0;
    for message in messages {
        if message["headers"]["control"] == "must-refetch" {
            return Ok(Applied::MustRefetch);
        }
        changes += u64::from(apply_message(rows, message)?);
    }
    Ok(Applied::Changes(changes))
}

/// Applies one message to `rows`: inserts and updates (merged into the row, as updates may
/// carry only changed columns) by key, deletes remove; returns whether it was a change.
fn apply_message(rows: &mut HashMap<String, Value>, message: Value) -> Result<bool, Error> {
    let Some(operation) = message["headers"]["operation"].as_str() else {
        return Ok(false);
    };
    let key = message["key"]
        .as_str()
        .ok_or("a change message without a key")?
        .to_owned();
    match operation {
        "insert" => {
            rows.insert(key, message["value"].clone());
        }
        "update" => {
            let row = rows
                .entry(key)
                .or_insert_with(|| Value::Object(Default::default()));
            if let (Some(row), Some(new)) = (row.as_object_mut(), message["value"].as_object()) {
                row.extend(new.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        "delete" => {
            rows.remove(&key);
        }
        other => return Err(format!("unknown operation {other:?}").into()),
    }
    Ok(true)
}

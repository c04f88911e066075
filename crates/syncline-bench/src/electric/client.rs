//! A client of Electric's HTTP shape protocol for load generation: one shape, followed over
//! keep-alive HTTP from `offset=-1` through `electric-handle` and `electric-offset`, then
//! live (`live=true` with the last `electric-cursor`) once `electric-up-to-date` was seen.
//!
//! It only needs a base URL, so it drives any server that speaks the protocol. Many clients
//! share one [`reqwest::Client`] (one connection pool) on one tokio runtime. By default a
//! client only counts the change messages it receives, by finding their `"operation":`
//! header key in the body without parsing JSON, which keeps its CPU per response small; with
//! `apply` it parses every body and keeps the shape's rows by key.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use reqwest::{StatusCode, Url};
use serde_json::Value;

/// Errors of the load generator, which may cross tasks.
pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;

/// A change message's header key as a server writes it. Object keys are never escaped, and
/// a quote inside a value is, so this only matches a message header (or a column named
/// `operation`, which the benchmark tables do not have).
const OPERATION_KEY: &[u8] = b"\"operation\":";
/// How long to wait before retrying a 503 or 429 that gives no `retry-after`.
const RETRY_AFTER_DEFAULT: Duration = Duration::from_secs(1);

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
    http: reqwest::Client,
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
    /// (e.g. `http://127.0.0.1:3000`), through `http`; with `apply` it keeps the rows.
    pub(crate) fn new(
        http: reqwest::Client,
        base_url: &str,
        params: &[(&str, &str)],
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

    /// Sends one request from where the client is and takes in its answer.
    pub(crate) async fn request(&mut self) -> Result<Answer, Error> {
        loop {
            let mut url = self.shape_url.clone();
            {
                let mut query = url.query_pairs_mut();
                query.append_pair("offset", &self.offset);
                if let Some(handle) = &self.handle {
                    query.append_pair("handle", handle);
                }
                if self.live {
                    query.append_pair("live", "true");
                    if let Some(cursor) = &self.cursor {
                        query.append_pair("cursor", cursor);
                    }
                }
            }
            self.stats.requests += 1;
            let response = self.http.get(url.clone()).send().await?;
            let status = response.status();
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            let (handle, offset, cursor) = (
                header("electric-handle"),
                header("electric-offset"),
                header("electric-cursor"),
            );
            let retry_after = header("retry-after");
            let up_to_date_header = response.headers().contains_key("electric-up-to-date");
            let body = response.bytes().await?;
            let at = Instant::now();
            match status {
                StatusCode::OK => {}
                StatusCode::NO_CONTENT => {
                    return Ok(Answer {
                        at,
                        changes: 0,
                        up_to_date: true,
                    })
                }
                StatusCode::CONFLICT => {
                    self.refetch(handle);
                    continue;
                }
                StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => {
                    self.stats.unavailable += 1;
                    let wait = retry_after
                        .and_then(|s| s.parse().ok())
                        .map_or(RETRY_AFTER_DEFAULT, Duration::from_secs);
                    tokio::time::sleep(wait).await;
                    continue;
                }
                _ => {
                    return Err(
                        format!("GET {url}: {status} {}", String::from_utf8_lossy(&body)).into(),
                    )
                }
            }
            let (Some(handle), Some(offset)) = (handle, offset) else {
                return Err(format!("GET {url}: no electric-handle or electric-offset").into());
            };
            let changes = match &mut self.rows {
                Some(rows) => match apply(rows, &body)? {
                    Applied::Changes(n) => n,
                    Applied::MustRefetch => {
                        self.refetch(Some(handle));
                        continue;
                    }
                },
                None => u64::try_from(memchr::memmem::find_iter(&body, OPERATION_KEY).count())?,
            };
            self.stats.changes += changes;
            self.handle = Some(handle);
            self.offset = offset;
            if cursor.is_some() {
                self.cursor = cursor;
            }
            self.live |= up_to_date_header;
            return Ok(Answer {
                at,
                changes,
                up_to_date: up_to_date_header,
            });
        }
    }

    /// Starts the shape again from `offset=-1`, under `handle` if the server named one.
    fn refetch(&mut self, handle: Option<String>) {
        self.stats.refetches += 1;
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

/// Applies the messages of `body` (a JSON array) to `rows`: inserts and updates (merged into
/// the row, as updates may carry only changed columns) by key, deletes remove.
fn apply(rows: &mut HashMap<String, Value>, body: &[u8]) -> Result<Applied, Error> {
    let messages: Vec<Value> = serde_json::from_slice(body)?;
    let mut changes = 0;
    for message in messages {
        let headers = &message["headers"];
        if headers["control"] == "must-refetch" {
            return Ok(Applied::MustRefetch);
        }
        let Some(operation) = headers["operation"].as_str() else {
            continue;
        };
        let key = message["key"]
            .as_str()
            .ok_or("a change message without a key")?
            .to_owned();
        changes += 1;
        match operation {
            "insert" => {
                rows.insert(key, message["value"].clone());
            }
            "update" => {
                let row = rows
                    .entry(key)
                    .or_insert_with(|| Value::Object(Default::default()));
                if let (Some(row), Some(new)) = (row.as_object_mut(), message["value"].as_object())
                {
                    row.extend(new.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
            "delete" => {
                rows.remove(&key);
            }
            other => return Err(format!("unknown operation {other:?}").into()),
        }
    }
    Ok(Applied::Changes(changes))
}

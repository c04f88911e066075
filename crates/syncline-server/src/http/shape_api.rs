//! `/v1/shape`: resolving a request to a shape (creating it when needed), and answering it from
//! the shape log by offset, live or not.

use std::future::{ready, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::extract::Request;
use axum::http::header::{
    ACCEPT_ENCODING, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_REQUEST_HEADERS,
    CONTENT_ENCODING, CONTENT_TYPE, ETAG, IF_NONE_MATCH, VARY,
};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::future::Either;
use futures_util::FutureExt;
use rand::Rng;
use syncline_core::wire::{self, header, JSON_CONTENT_TYPE};
use syncline_core::{LogOffset, RelationDesc};
use syncline_storage::ReadResult;
use syncline_where::{Prepared, TableRef, Where};
use tokio::time::Instant;

use super::auth::authorized;
use super::body::{log_array, log_bytes};
use super::caching::{self, ResponseFacts};
use super::compression::{accepts_gzip, gzip_fast};
use super::param_errors::{self, ParamErrors};
use super::params::{parse_shape_params, ShapeParams};
use super::position;
use super::reply::{
    cache_config, conflict, header_value, internal_error, invalid, json, not_ready,
    postgres_failed, rejected, snapshot_failed, unauthorized, unavailable,
};
use super::request_offset::RequestOffset;
use super::schema_header::electric_schema;
use super::subset_body::parse_subset_body;
use crate::admission::{Kind, Ticket};
use crate::health::Gate;
use crate::pipeline::Shortage;
use crate::shapes::{Blame, CreateError, Shape, ShapeDefinition, ShapeState};
use crate::state::AppState;

/// Largest POST body accepted (Electric's, from Plug's default: 8,000,000 bytes).
pub(super) const POST_BODY_BYTES_MAX: usize = 8_000_000;

/// Makes no-change etags unique.
static NO_CHANGE_SEQ: AtomicU64 = AtomicU64::new(1);

/// Answers any method on `/v1/shape`.
///
/// In two stages, so that a waiting request holds only what its answer reads: [`accept`]
/// reads and checks the request and finds (or creates) its shape in a future boxed on its own
/// and freed when it ends (it is large: creating a shape queries the catalog); the future that
/// then answers from the shape log, and may wait there for new data, keeps a
/// [`ShapeRequest`]. The request itself is dropped in the first stage: its URI and header
/// values share the connection's read buffer, which a parked long-poll would otherwise keep
/// alive.
pub fn handle(state: Arc<AppState>, request: Request) -> impl Future<Output = Response> + Send {
    Box::pin(accept(state, request)).then(|accepted| match accepted {
        Ok(accepted) => Either::Left(accepted.answer()),
        Err(response) => Either::Right(ready(response)),
    })
}

/// A request accepted for a shape: what answering it from the shape log needs.
struct ShapeRequest {
    state: Arc<AppState>,
    shape: Arc<Shape>,
    method: Method,
    params: ShapeParams,
    /// The request headers the answer reads ([`answer_headers`]).
    headers: HeaderMap,
    /// The request's admission place, held until it is answered (or its SSE stream ends).
    ticket: Ticket,
}

/// The shape a request names, with its parameters checked and an admission place taken; or
/// the response that ends the request here (its errors, `OPTIONS`, `DELETE`).
async fn accept(state: Arc<AppState>, request: Request) -> Result<ShapeRequest, Response> {
    let (parts, body) = request.into_parts();
    let method = parts.method.clone();
    if method == Method::OPTIONS {
        return Err(options(&parts.headers));
    }
    let query = parts.uri.query().unwrap_or("").to_owned();
    let headers = answer_headers(&parts.headers);
    drop(parts);
    if !authorized(state.config.secret.as_deref(), &query) {
        return Err(unauthorized());
    }
    let gate = if method == Method::DELETE {
        Gate::Write
    } else {
        Gate::Read
    };
    if let Err(unmet) = state.health.wait(gate).await {
        return Err(not_ready(&unmet));
    }
    let params = match method {
        Method::GET | Method::HEAD => parse_shape_params(&query, None),
        Method::POST => {
            let bytes = match axum::body::to_bytes(body, POST_BODY_BYTES_MAX).await {
                Ok(b) => b,
                Err(_) => {
                    return Err(json(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        r#"{"error":"Request body too large"}"#.into(),
                    ))
                }
            };
            match parse_subset_body(&bytes) {
                Ok(body) => parse_shape_params(&query, body.as_ref()),
                Err(e) => return Err(json(e.status(), e.body())),
            }
        }
        Method::DELETE => return Err(delete(&state, &query).await),
        _ => return Err(StatusCode::METHOD_NOT_ALLOWED.into_response()),
    };
    let params = params.map_err(|errors| invalid(&method, &errors))?;
    let kind = match params.offset {
        RequestOffset::BeforeAll => Kind::Initial,
        _ => Kind::Existing,
    };
    let ticket = state
        .admission
        .enter(kind, &state.metrics)
        .map_err(|refused| rejected(&refused))?;
    let shape = resolve(&state, &method, &params).await?;
    shape.touch();
    Ok(ShapeRequest {
        state,
        shape,
        method,
        params,
        headers,
        ticket,
    })
}

impl ShapeRequest {
    /// Answers from the shape log. A plain function returning the future, not an `async fn`:
    /// an `async fn` would keep a second copy of `self` in its future for as long as it waits.
    #[allow(clippy::manual_async_fn)]
    fn answer(self) -> impl Future<Output = Response> + Send {
        async move {
            let serve = Serve {
                state: &self.state,
                shape: &self.shape,
                method: &self.method,
                params: &self.params,
                request: &self.headers,
                ticket: self.ticket,
            };
            let from = match self.params.offset {
                RequestOffset::After(o) => Some(o),
                RequestOffset::BeforeAll | RequestOffset::Now => None,
            };
            if let Err(e) = self.shape.load_end(from) {
                return serve.read_failed(&e).await;
            }
            match &self.params.subset {
                // Boxed, like `gone`: a subset runs its own Postgres query.
                Some(subset) => Box::pin(serve.subset(subset)).await,
                None => serve.run().await,
            }
        }
    }
}

/// The request headers an answer reads (`accept-encoding` for compression, `if-none-match`
/// for caching), copied so that they own their bytes (see [`handle`]): a parked long-poll
/// keeps these and nothing else of its request's head.
fn answer_headers(headers: &HeaderMap) -> HeaderMap {
    let mut kept = HeaderMap::new();
    for name in [ACCEPT_ENCODING, IF_NONE_MATCH] {
        for value in headers.get_all(&name) {
            let mut copy =
                HeaderValue::from_bytes(value.as_bytes()).expect("a header value stays valid");
            copy.set_sensitive(value.is_sensitive());
            kept.append(name.clone(), copy);
        }
    }
    kept
}

fn options(request: &HeaderMap) -> Response {
    let allowed: Vec<String> = request
        .get(ACCESS_CONTROL_REQUEST_HEADERS)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(',')
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| h == "if-none-match" || h == "traceparent")
        .collect();
    let mut response = StatusCode::NO_CONTENT.into_response();
    let headers = response.headers_mut();
    headers.insert("access-control-max-age", HeaderValue::from_static("86400"));
    if let Ok(value) = HeaderValue::from_str(&allowed.join(", ")) {
        headers.insert(ACCESS_CONTROL_ALLOW_HEADERS, value);
    }
    response
}

/// The shape a request names, or the response that ends it (400, 409, 503).
async fn resolve(
    state: &Arc<AppState>,
    method: &Method,
    params: &ShapeParams,
) -> Result<Arc<Shape>, Response> {
    if let (RequestOffset::After(_), Some(handle)) = (params.offset, &params.handle) {
        if let Some(shape) = state.shapes.by_handle(handle) {
            if same_request(&shape.definition, params) {
                return Ok(shape);
            }
        }
    }
    let (definition, relation) = definition(state, method, params).await?;
    state.shapes.drop_recreated(&relation).await;
    let existing = state.shapes.by_definition(&definition);
    if let Some(shape) = &existing {
        shape.refresh(&state.shapes.shared_relation(relation.clone()));
    }
    match params.offset {
        RequestOffset::After(_) => match existing {
            Some(shape) if Some(&shape.handle) == params.handle.as_ref() => Ok(shape),
            Some(shape) => Err(conflict(method, Some(&shape.handle))),
            None => match create(state, method, definition, relation).await {
                Ok(shape) => Err(conflict(method, Some(&shape.handle))),
                // A server that does not write: a handle no longer stored is gone for good
                // (409, start again); one still stored is a snapshot the writer is taking.
                Err(_)
                    if !state.shapes.is_writer()
                        && params
                            .handle
                            .as_ref()
                            .is_some_and(|h| !state.shapes.is_stored(h)) =>
                {
                    Err(conflict(method, None))
                }
                Err(response) => Err(response),
            },
        },
        RequestOffset::BeforeAll | RequestOffset::Now => match existing {
            Some(shape) => Ok(shape),
            None => create(state, method, definition, relation).await,
        },
    }
}

async fn create(
    state: &Arc<AppState>,
    method: &Method,
    definition: ShapeDefinition,
    relation: RelationDesc,
) -> Result<Arc<Shape>, Response> {
    // A server that does not write may know the shape the writer made for this definition.
    if let Some(shape) = state.shapes.by_definition(&definition) {
        return Ok(shape);
    }
    state
        .health
        .wait(Gate::Write)
        .await
        .map_err(|unmet| not_ready(&unmet))?;
    state
        .shapes
        .get_or_create(definition, relation)
        .await
        .map_err(|e| match e {
            CreateError::Postgres(e) => postgres_failed(method, &e, "table", false),
            CreateError::Refused(message) => {
                invalid(method, &ParamErrors::single("table", message))
            }
            e => {
                tracing::warn!(error = %e, "could not create shape");
                unavailable(&format!(
                    r#"{{"message":{}}}"#,
                    serde_json::Value::from(e.to_string())
                ))
            }
        })
}

/// Whether a request spells the shape's definition the same way (no catalog lookup needed).
fn same_request(definition: &ShapeDefinition, params: &ShapeParams) -> bool {
    definition.schema == params.schema
        && definition.table == params.table
        && definition.where_text == params.where_clause
        && definition.params == params.where_params
        && definition.replica == params.replica
        && definition.log == params.log
        && same_list(&definition.queryable, &params.queryable_columns)
        && match &params.columns {
            None => !definition.explicit_columns,
            Some(list) => {
                let mut a = list.clone();
                let mut b = definition.columns.clone();
                a.sort();
                b.sort();
                definition.explicit_columns && a == b
            }
        }
}

/// The table's columns named in `list` (each must exist and not be generated, and the primary
/// key must be among them: every column, for a table without one), in table order; `Err`
/// holds the client's message.
fn table_columns(
    relation: &RelationDesc,
    generated: &[String],
    list: &[String],
) -> Result<Vec<String>, String> {
    let unknown: Vec<&str> = list
        .iter()
        .filter(|n| relation.column(n).is_none())
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        return Err(param_errors::columns_not_found(&unknown));
    }
    let mut key = relation.primary_key();
    if key.is_empty() {
        key = relation.columns.iter().collect();
    }
    let missing: Vec<&str> = key
        .iter()
        .filter(|c| !list.contains(&c.name))
        .map(|c| c.name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(param_errors::columns_missing_pk(&missing));
    }
    let generated: Vec<&str> = relation
        .columns
        .iter()
        .filter(|c| list.contains(&c.name) && generated.contains(&c.name))
        .map(|c| c.name.as_str())
        .collect();
    if !generated.is_empty() {
        return Err(param_errors::columns_generated(&generated, false));
    }
    Ok(relation
        .columns
        .iter()
        .filter(|c| list.contains(&c.name))
        .map(|c| c.name.clone())
        .collect())
}

/// Whether two optional column lists name the same columns.
fn same_list(a: &Option<Vec<String>>, b: &Option<Vec<String>>) -> bool {
    let sorted = |l: &Option<Vec<String>>| {
        l.clone().map(|mut l| {
            l.sort();
            l
        })
    };
    sorted(a) == sorted(b)
}

/// Checks the request against the catalog and builds the shape definition.
async fn definition(
    state: &AppState,
    method: &Method,
    params: &ShapeParams,
) -> Result<(ShapeDefinition, RelationDesc), Response> {
    let relation = match state
        .postgres
        .load_relation(&params.schema, &params.table)
        .await
    {
        Ok(Some(relation)) => relation,
        Ok(None) => {
            let message = param_errors::table_does_not_exist(&params.schema, &params.table);
            return Err(invalid(method, &ParamErrors::single("table", message)));
        }
        Err(e) => return Err(postgres_failed(method, &e, "table", false)),
    };
    let facts = match state.postgres.table_facts(relation.oid).await {
        Ok(facts) => facts,
        Err(e) => return Err(postgres_failed(method, &e, "table", false)),
    };
    if facts.row_security {
        let message = param_errors::row_security_active(&relation.schema, &relation.name);
        return Err(invalid(method, &ParamErrors::single("table", message)));
    }
    let column_error =
        |field: &str, message: String| invalid(method, &ParamErrors::single(field, message));
    let queryable = match &params.queryable_columns {
        None => None,
        Some(list) => Some(
            table_columns(&relation, &facts.generated, list)
                .map_err(|message| column_error("queryable_columns", message))?,
        ),
    };
    let columns = match (&params.columns, &queryable) {
        (Some(list), _) => {
            let columns = table_columns(&relation, &facts.generated, list)
                .map_err(|message| column_error("columns", message))?;
            let hidden: Vec<&str> = columns
                .iter()
                .filter(|c| queryable.as_ref().is_some_and(|q| !q.contains(c)))
                .map(String::as_str)
                .collect();
            if !hidden.is_empty() {
                let message = param_errors::columns_not_queryable(&hidden);
                return Err(column_error("columns", message));
            }
            columns
        }
        (None, Some(queryable)) => queryable.clone(),
        (None, None) if !facts.generated.is_empty() => {
            let generated: Vec<&str> = facts.generated.iter().map(String::as_str).collect();
            let message = param_errors::columns_generated(&generated, true);
            return Err(column_error("columns", message));
        }
        (None, None) => relation.columns.iter().map(|c| c.name.clone()).collect(),
    };
    let (where_sql, subquery_tables) = match &params.where_clause {
        None => (None, Vec::new()),
        Some(text) => {
            let checked = match Where::prepare(text, &relation, &params.where_params) {
                Ok(Prepared::Checked(w)) => Ok((w, Vec::new())),
                Ok(Prepared::ReadsTables(refs)) => {
                    let tables = subquery_tables(state, method, refs).await?;
                    let lookup = |table: &TableRef| {
                        tables
                            .iter()
                            .find(|r| r.schema == table.schema && r.name == table.name)
                            .cloned()
                    };
                    Where::with_tables(text, &relation, &params.where_params, &lookup)
                        .map(|w| (w, tables))
                }
                Err(e) => Err(e),
            };
            match checked {
                Ok((w, _)) if w.has_subqueries() && params.compaction => {
                    let message = "can't be enabled for shapes with subqueries".to_owned();
                    return Err(invalid(
                        method,
                        &ParamErrors::single("experimental_compaction", message),
                    ));
                }
                Ok((w, tables)) => (Some(w.sql().to_owned()), tables),
                Err(e) => {
                    return Err(invalid(
                        method,
                        &ParamErrors::single(e.key().as_str(), e.message),
                    ))
                }
            }
        }
    };
    let definition = ShapeDefinition {
        relation_oid: relation.oid,
        schema: relation.schema.clone(),
        table: relation.name.clone(),
        columns,
        explicit_columns: params.columns.is_some() || queryable.is_some(),
        queryable,
        where_text: params.where_clause.clone(),
        params: params.where_params.clone(),
        where_sql,
        replica: params.replica,
        compaction: params.compaction,
        log: params.log,
        subquery_tables,
    };
    Ok((definition, relation))
}

/// The tables the where clause's subqueries read (`refs`), from the catalog: a 400 under
/// `table` for one that does not exist (as Electric words it).
async fn subquery_tables(
    state: &AppState,
    method: &Method,
    refs: Vec<TableRef>,
) -> Result<Vec<RelationDesc>, Response> {
    let mut tables = Vec::with_capacity(refs.len());
    for table in refs {
        match state
            .postgres
            .load_relation(&table.schema, &table.name)
            .await
        {
            Ok(Some(relation)) => tables.push(relation),
            Ok(None) => {
                let message = param_errors::table_does_not_exist(&table.schema, &table.name);
                return Err(invalid(method, &ParamErrors::single("table", message)));
            }
            Err(e) => return Err(postgres_failed(method, &e, "table", false)),
        }
    }
    Ok(tables)
}

/// One request being answered from a shape: from its log, live or not (here), over SSE
/// ([`super::sse`]) or as a subset snapshot ([`super::subset`]).
pub(super) struct Serve<'a> {
    pub(super) state: &'a Arc<AppState>,
    pub(super) shape: &'a Arc<Shape>,
    pub(super) method: &'a Method,
    pub(super) params: &'a ShapeParams,
    pub(super) request: &'a HeaderMap,
    /// The request's admission place, held until it is answered (or its SSE stream ends).
    pub(super) ticket: Ticket,
}

/// What a read produced.
struct Answer {
    read: ReadResult,
    /// The bytes of `read`'s body, when they were read once for the requests woken together.
    bytes: Option<Bytes>,
    up_to_date: bool,
    has_data: bool,
    no_change: bool,
}

/// How long a request may wait: for new data (the long-poll timeout), and for the shape's
/// snapshot to produce its first data (never less than [`SNAPSHOT_WAIT_MIN`], so a short
/// long-poll timeout does not fail initial requests while a snapshot runs).
#[derive(Debug, Clone, Copy)]
struct Deadlines {
    live: Instant,
    snapshot: Instant,
}

/// Shortest wait for a shape's snapshot before a request gives up with 503.
const SNAPSHOT_WAIT_MIN: Duration = Duration::from_secs(20);

impl Serve<'_> {
    /// When a request stops waiting for the shape's snapshot: the long-poll timeout from now,
    /// but never less than [`SNAPSHOT_WAIT_MIN`].
    pub(super) fn snapshot_deadline(&self) -> Instant {
        Instant::now() + self.state.config.long_poll_timeout().max(SNAPSHOT_WAIT_MIN)
    }

    async fn run(self) -> Response {
        let timeout = self.state.config.long_poll_timeout();
        let deadlines = Deadlines {
            live: Instant::now() + timeout,
            snapshot: self.snapshot_deadline(),
        };
        let from = match self.params.offset {
            RequestOffset::BeforeAll => None,
            RequestOffset::Now => {
                return match self.wait_snapshot(deadlines.snapshot).await {
                    Ok(()) => self.now(),
                    Err(r) => r,
                }
            }
            RequestOffset::After(o) => Some(o),
        };
        let start = match from {
            None => None,
            Some(o) => match self.locate(o) {
                Ok(Some(start)) => Some(start),
                Ok(None) => {
                    tokio::time::sleep(timeout / 2).await;
                    match self.locate(o) {
                        Ok(Some(start)) => Some(start),
                        Ok(None) => {
                            let errors =
                                ParamErrors::single("offset", "out of bounds for this shape");
                            return invalid(self.method, &errors);
                        }
                        Err(e) => return self.read_failed(&e).await,
                    }
                }
                Err(e) => return self.read_failed(&e).await,
            },
        };
        if let (true, Some(o), Some(start)) = (self.params.live_sse, from, start) {
            if self.shape.state().gone {
                return self.gone().await;
            }
            return self.sse(o, start);
        }
        match self.answer(start, deadlines).await {
            Ok(answer) => self.respond(answer).await,
            Err(response) => response,
        }
    }

    /// Where in the log to read after the client's offset `o` (`None`: the shape has nothing
    /// there, yet or ever).
    fn locate(&self, o: LogOffset) -> syncline_storage::Result<Option<LogOffset>> {
        position::locate(self.shape, o, self.state.progress.last_seen_lsn())
    }

    /// The answer when the shape's log cannot be read: the snapshot's failure when it failed,
    /// 409 when the shape went away meanwhile (its files are deleted with it); 503 when the
    /// process ran out of file descriptors (idle logs then close theirs, and the client
    /// retries); else 500.
    async fn read_failed(&self, error: &(dyn std::error::Error + Sync + 'static)) -> Response {
        if let Err(response) = self.check_alive(&self.shape.state()).await {
            return response;
        }
        if Shortage::of(error) == Some(Shortage::Descriptors) {
            tracing::warn!(handle = %self.shape.handle, %error, "shape log read failed: out of file descriptors; idle shape logs close theirs");
            self.state.shapes.descriptors_short();
            return unavailable("The server ran out of file descriptors; retry shortly");
        }
        tracing::warn!(handle = %self.shape.handle, %error, "shape log read failed");
        internal_error()
    }

    /// Reads until there is something to send: data readable from `from` (a whole chunk while
    /// the snapshot runs), or, for live requests, until new data arrives or the timeout.
    async fn answer(
        &self,
        from: Option<LogOffset>,
        deadlines: Deadlines,
    ) -> Result<Answer, Response> {
        let mut changes = self.shape.subscribe();
        let mut woken = false;
        loop {
            let st = changes.borrow_and_update();
            self.check_alive(&st).await?;
            // A request woken by new data reads what was just written, from the page cache, in
            // a few system calls: on the runtime's thread, and once for all the requests woken
            // with it. Handing the thread over (`block_in_place`) would cost more than the read
            // when thousands wake together. A request at the log's end reads the same way: it
            // finds nothing new, and thousands of live requests arriving together would
            // otherwise each hand the thread over, the runtime starting a thread to take it
            // (up to its 512 blocking threads, which then linger with their memory).
            let read = if woken || position::at_end(&st, from) {
                self.shape.read_shared(st.clone(), from)
            } else {
                crate::blocking::in_place(|| self.shape.with_reader(|r| r.read(from)))
                    .map(|read| (read, None))
            };
            let (read, bytes) = match read {
                Ok(read) => read,
                Err(e) => return Err(self.read_failed(&e).await),
            };
            let ready = st.snapshot_done || read.chunk_closed;
            let has_data = read.body.is_some();
            if ready && (has_data || !self.params.live) {
                let up_to_date = from.is_some()
                    && st.snapshot_done
                    && read.up_to_date
                    && !position::is_snapshot(&read);
                return Ok(Answer {
                    read,
                    bytes,
                    up_to_date,
                    has_data,
                    no_change: false,
                });
            }
            let until = if ready {
                deadlines.live
            } else {
                deadlines.snapshot
            };
            let waited = tokio::select! {
                waited = tokio::time::timeout_at(until, changes.changed()) => waited,
                // Shutting down: a live request ends as if it timed out, and its client polls
                // again (through a load balancer, another server).
                () = self.state.health.wait_stopping(), if ready => {
                    return Ok(Answer {
                        read,
                        bytes: None,
                        up_to_date: true,
                        has_data: false,
                        no_change: true,
                    })
                }
            };
            match waited {
                Ok(()) => woken = true,
                Err(_) if ready => {
                    return Ok(Answer {
                        read,
                        bytes: None,
                        up_to_date: true,
                        has_data: false,
                        no_change: true,
                    })
                }
                Err(_) => {
                    return Err(snapshot_failed(
                        "Snapshot timed out while waiting for the initial data",
                    ))
                }
            }
        }
    }

    /// The response that ends the request if the shape's snapshot failed or the shape went
    /// away.
    async fn check_alive(&self, st: &ShapeState) -> Result<(), Response> {
        if let Some(failure) = &st.failed {
            let message = failure.message.clone();
            return Err(match failure.blame {
                Blame::Request => invalid(self.method, &ParamErrors::single("where", message)),
                Blame::Table => invalid(self.method, &ParamErrors::single("table", message)),
                Blame::Server => snapshot_failed(&message),
            });
        }
        if st.gone {
            return Err(self.gone().await);
        }
        Ok(())
    }

    pub(super) async fn wait_snapshot(&self, deadline: Instant) -> Result<(), Response> {
        let mut changes = self.shape.subscribe();
        loop {
            let st = changes.borrow_and_update();
            self.check_alive(&st).await?;
            if st.snapshot_done {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(()) => {}
                Err(_) => {
                    return Err(snapshot_failed(
                        "Snapshot timed out while waiting for the initial data",
                    ))
                }
            }
        }
    }

    /// `offset=now`: no data, the current end.
    fn now(&self) -> Response {
        let end = self
            .shape
            .state()
            .durable
            .map_or(LogOffset::SNAPSHOT_END, position::client_end);
        let control = wire::up_to_date(self.global_lsn(end));
        let mut headers = self.shape_headers(end, false, true);
        headers.insert(header::UP_TO_DATE, HeaderValue::from_static(""));
        let body = log_array(None, None, Some(&control)).expect("no file to read");
        self.finish(headers, None, body)
    }

    async fn respond(&self, answer: Answer) -> Response {
        let end = position::client_offset(&answer.read);
        let control = answer.up_to_date.then(|| {
            let lsn = if self.params.live && answer.has_data {
                end.tx
            } else {
                self.global_lsn(end)
            };
            wire::up_to_date(lsn)
        });
        // Electric says `false` only for a live request that timed out with nothing new.
        let mut headers = self.shape_headers(end, !answer.no_change, !self.params.live);
        if answer.up_to_date {
            headers.insert(header::UP_TO_DATE, HeaderValue::from_static(""));
        }
        let etag = if answer.no_change {
            caching::no_change_etag(
                &self.shape.handle,
                self.params.offset,
                end,
                NO_CHANGE_SEQ.fetch_add(1, Ordering::Relaxed),
            )
        } else {
            caching::etag(&self.shape.handle, self.params.offset, end)
        };
        let body = if self.params.live {
            log_array(answer.read.body.clone(), answer.bytes, control.as_deref())
        } else {
            headers.insert(VARY, HeaderValue::from_static("accept-encoding"));
            if accepts_gzip(self.request) && *self.method != Method::HEAD {
                headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
                self.gzipped(&answer.read, control.as_deref())
            } else {
                log_array(answer.read.body.clone(), answer.bytes, control.as_deref())
            }
        };
        let body = match body {
            Ok(body) => body,
            Err(e) => return self.read_failed(&e).await,
        };
        self.finish(headers, Some(etag), body)
    }

    /// The gzipped body of a non-live response: a whole closed chunk's is made once and kept.
    fn gzipped(&self, read: &ReadResult, control: Option<&[u8]>) -> std::io::Result<Body> {
        let metrics = &self.state.metrics;
        metrics.gzip_responses.inc();
        let whole_chunk = read.chunk_closed && control.is_none();
        let Some(range) = read.body.as_ref().filter(|_| whole_chunk) else {
            return Ok(Body::from(gzip_fast(&log_bytes(
                read.body.as_ref(),
                control,
            )?)));
        };
        let key = (
            self.shape.handle.clone(),
            read.chunk,
            range.start,
            range.len,
        );
        let mut failed = None;
        let (bytes, kept) = self.state.compressed.get_or_compress(key, || {
            log_bytes(Some(range), None).unwrap_or_else(|e| {
                failed = Some(e);
                Vec::new()
            })
        });
        if let Some(e) = failed {
            return Err(e);
        }
        if kept {
            metrics.gzip_cache_hits.inc();
        }
        Ok(Body::from(bytes))
    }

    fn global_lsn(&self, end: LogOffset) -> u64 {
        self.state.progress.last_seen_lsn().max(end.tx)
    }

    /// Headers of a 200 from this shape.
    fn shape_headers(&self, end: LogOffset, has_data: bool, with_schema: bool) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(JSON_CONTENT_TYPE));
        headers.insert(header::HANDLE, header_value(&self.shape.handle));
        headers.insert(header::OFFSET, header_value(&end.to_string()));
        headers.insert(
            header::HAS_DATA,
            HeaderValue::from_static(if has_data { "true" } else { "false" }),
        );
        if with_schema {
            let schema = electric_schema(
                &self.shape.schema_relation(),
                Some(&self.shape.definition.columns),
            );
            headers.insert(header::SCHEMA, header_value(&schema));
        }
        if self.params.live {
            headers.insert(header::CURSOR, header_value(&self.cursor().to_string()));
        }
        headers
    }

    /// The `electric-cursor` of a live response to this request.
    pub(super) fn cursor(&self) -> u64 {
        caching::electric_cursor(
            SystemTime::now(),
            self.state.config.long_poll_timeout(),
            self.params.cursor.as_deref(),
            || {
                rand::thread_rng()
                    .gen_range(caching::CURSOR_JITTER_MIN_S..=caching::CURSOR_JITTER_MAX_S)
            },
        )
    }

    /// Adds caching headers and the etag, answers 304 when the client has these bytes, and
    /// drops the body for HEAD.
    fn finish(&self, mut headers: HeaderMap, etag: Option<String>, body: Body) -> Response {
        let facts = ResponseFacts {
            method: self.method.clone(),
            status: StatusCode::OK,
            handle_known: true,
            offset: Some(self.params.offset),
            live: self.params.live,
            live_sse: false,
            subset: false,
        };
        caching::cache_headers(&facts, &cache_config(self.state)).apply(&mut headers);
        let mut status = StatusCode::OK;
        let mut body = Some(body);
        if let Some(etag) = etag {
            if caching::if_none_match_hits(self.request, &etag) {
                status = StatusCode::NOT_MODIFIED;
                headers.remove(header::SCHEMA);
                body = None;
            }
            headers.insert(ETAG, header_value(&etag));
        }
        if *self.method == Method::HEAD {
            body = None;
        }
        let mut response = Response::new(body.unwrap_or_else(Body::empty));
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        response
    }

    /// The shape vanished: 409 pointing at its successor (made if needed).
    /// If the definition itself no longer holds (the table was renamed or dropped), still 409:
    /// the client's refetch then learns what is wrong. A server that does not write and knows
    /// no successor says 409 without one (the client starts again from scratch; the writer
    /// makes the successor).
    ///
    /// Boxed: it looks the table up in Postgres and may create a shape, a future far larger
    /// than a parked long-poll's, which would otherwise be inlined into every request's.
    fn gone(&self) -> Pin<Box<dyn Future<Output = Response> + Send + '_>> {
        Box::pin(self.successor())
    }

    /// [`Serve::gone`]'s work.
    async fn successor(&self) -> Response {
        match definition(self.state, self.method, self.params).await {
            Ok((definition, relation)) => {
                match create(self.state, self.method, definition, relation).await {
                    Ok(shape) => conflict(self.method, Some(&shape.handle)),
                    Err(_) if !self.state.shapes.is_writer() => conflict(self.method, None),
                    Err(response) => response,
                }
            }
            Err(response) if response.status() == StatusCode::BAD_REQUEST => {
                conflict(self.method, None)
            }
            Err(response) => response,
        }
    }
}

/// DELETE: drops a shape named by its definition or its handle (test suites only).
async fn delete(state: &Arc<AppState>, query: &str) -> Response {
    if !state.config.enable_integration_testing {
        return json(
            StatusCode::METHOD_NOT_ALLOWED,
            r#"{"message":"DELETE not allowed"}"#.into(),
        );
    }
    let handle = form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "handle")
        .map(|(_, v)| v.into_owned());
    let has_table = form_urlencoded::parse(query.as_bytes()).any(|(k, _)| k == "table");
    let shape = if has_table {
        let params = match parse_shape_params(&format!("{query}&offset=-1"), None) {
            Ok(p) => p,
            Err(errors) => return invalid(&Method::DELETE, &errors),
        };
        let definition = match definition(state, &Method::DELETE, &params).await {
            Ok((d, _)) => d,
            Err(response) => return response,
        };
        let shape = state.shapes.by_definition(&definition);
        if let (Some(shape), Some(handle)) = (&shape, &handle) {
            if &shape.handle != handle {
                let errors = ParamErrors::single(
                    "handle",
                    "The specified shape definition and handle do not match. Please ensure the shape definition is correct or omit the shape handle from the request to obtain a new one.",
                );
                return invalid(&Method::DELETE, &errors);
            }
        }
        shape
    } else if let Some(handle) = handle {
        state.shapes.by_handle(&handle)
    } else {
        let errors =
            ParamErrors::single("handle", "can't be blank when shape definition is missing");
        return invalid(&Method::DELETE, &errors);
    };
    match shape {
        Some(shape) => {
            state.shapes.delete(&shape).await;
            StatusCode::ACCEPTED.into_response()
        }
        None => json(
            StatusCode::NOT_FOUND,
            r#"{"message":"No existing shape found"}"#.into(),
        ),
    }
}

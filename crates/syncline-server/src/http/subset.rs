//! Subset snapshots: a one-off read of some of a shape's rows (the shape's where AND the
//! subset's, ordered, limited), with the MVCC snapshot it saw, so a `changes_only` client can
//! merge it with the log and drop the changes the rows already include.
//!
//! Body: `{"metadata":{"xmin":…,"xmax":…,"xip_list":[…],"database_lsn":…,"snapshot_mark":N},
//! "data":[rows]}`; rows carry `"snapshot_mark":N` in their headers. The rows stream from the
//! binary COPY to the client; only the query's start is awaited before the headers go out.

use std::io;

use axum::body::Body;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderValue, Method};
use axum::response::Response;
use bytes::Bytes;
use rand::Rng;
use syncline_core::wire::{self, header, JSON_CONTENT_TYPE};
use syncline_core::LogOffset;
use syncline_pg::snapshot::{RowEncoder, Snapshot, SnapshotInfo, SnapshotQuery};
use syncline_pg::{PgError, PgResult};
use syncline_where::{OrderBy, Where};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};

use super::caching::NO_CACHE;
use super::param_errors::ParamErrors;
use super::params::SubsetParams;
use super::position;
use super::reply::{header_value, invalid, not_ready, postgres_failed, unavailable};
use super::schema_header::electric_schema;
use super::shape_api::Serve;
use crate::health::Gate;
use crate::shapes::MustSee;
use crate::state::AppState;

/// Bytes of rows collected before they are handed to the connection.
const BODY_PIECE_BYTES: usize = 64 * 1024;
/// Body pieces queued ahead of a slow client.
const BODY_PIECES_QUEUED_MAX: usize = 4;
/// Largest `snapshot_mark` (Electric draws it from `0..2^31`).
const SNAPSHOT_MARK_MAX: u32 = (1 << 31) - 1;

type BodyPiece = Result<Bytes, io::Error>;

impl Serve<'_> {
    /// Answers a subset request on this shape.
    pub(super) async fn subset(&self, subset: &SubsetParams) -> Response {
        if let Err(unmet) = self.state.health.wait(Gate::Write).await {
            return not_ready(&unmet);
        }
        let query = match self.subset_query(subset) {
            Ok(query) => query,
            Err(response) => return *response,
        };
        if let Err(response) = self.wait_snapshot(self.snapshot_deadline()).await {
            return response;
        }
        let offset = self
            .shape
            .state()
            .durable
            .map_or(LogOffset::SNAPSHOT_END, position::client_end);
        // Rows the client read in the log must not be older in its subset.
        let Some(must_see) = self.state.shapes.must_see().await else {
            return unavailable(r#"{"message":"Replication is not running"}"#);
        };
        let Ok(permit) = self.state.postgres.query_permit().await else {
            return unavailable(r#"{"message":"Server is shutting down"}"#);
        };
        let mark = rand::thread_rng().gen_range(0..=SNAPSHOT_MARK_MAX);
        let (started, begun) = oneshot::channel();
        let (pieces, body) = mpsc::channel(BODY_PIECES_QUEUED_MAX);
        tokio::spawn(run(
            self.state.clone(),
            query,
            must_see,
            mark,
            permit,
            started,
            pieces,
        ));
        let info = match begun.await {
            Ok(Ok(info)) => info,
            Ok(Err(e)) => return self.query_failed(&e),
            Err(_) => return unavailable(r#"{"message":"Subset query stopped"}"#),
        };
        let mut response = Response::new(if *self.method == Method::HEAD {
            Body::empty()
        } else {
            let head = Bytes::from(wire::subset_start(&info.pg_snapshot, info.wal_lsn.0, mark));
            let mut body = body;
            let rest = futures_util::stream::poll_fn(move |cx| body.poll_recv(cx));
            Body::from_stream(futures_util::StreamExt::chain(
                futures_util::stream::iter([Ok::<_, io::Error>(head)]),
                rest,
            ))
        });
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(JSON_CONTENT_TYPE));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static(NO_CACHE));
        headers.insert(header::SNAPSHOT, HeaderValue::from_static("true"));
        headers.insert(header::HANDLE, header_value(&self.shape.handle));
        headers.insert(header::OFFSET, header_value(&offset.to_string()));
        let schema = electric_schema(
            &self.shape.schema_relation(),
            Some(&self.shape.definition.columns),
        );
        headers.insert(header::SCHEMA, header_value(&schema));
        response
    }

    /// The checked query: the shape's where AND the subset's, ordered and cut.
    fn subset_query(&self, subset: &SubsetParams) -> Result<SnapshotQuery, Box<Response>> {
        let queryable = self
            .shape
            .definition
            .queryable_relation(&self.shape.relation);
        let rejected = |field: &str, message: String| {
            Box::new(invalid(
                self.method,
                &ParamErrors::single_subset(field, message),
            ))
        };
        let subset_where = match &subset.where_clause {
            None => None,
            Some(text) if Where::subquery_tables(text).is_ok_and(|t| !t.is_empty()) => {
                return Err(rejected(
                    "where",
                    "Subqueries are not allowed in subsets".to_owned(),
                ));
            }
            Some(text) => Some(
                Where::new(text, &queryable, &subset.params)
                    .map_err(|e| rejected("where", e.message))?,
            ),
        };
        let order_by = match &subset.order_by {
            None => None,
            Some(text) => Some(
                OrderBy::new(text, &queryable, &subset.params)
                    .map_err(|e| rejected("order_by", e.message))?,
            ),
        };
        // The client's clause is evaluated only on rows of the shape: it never sees (or fails
        // on, telling what it saw) a row outside it.
        let query = SnapshotQuery::new(
            &self.shape.relation,
            Some(&self.shape.definition.columns),
            subset_where.map(|w| w.sql().to_owned()),
        )
        .map(|q| q.within(self.shape.definition.where_sql.clone()))
        .map(|q| {
            // A subquery shape's rows carry their tags here too.
            let filter = match self.shape.definition.checked_where(&self.shape.relation) {
                Some(Ok(filter)) if filter.has_subqueries() => Some(filter),
                _ => None,
            };
            let prefix = crate::subquery::tag_prefix(&self.shape.handle);
            q.with_headers(filter.map(|f| crate::subquery::headers_sql(&f, &prefix, false)))
        })
        .map_err(|e| {
            tracing::warn!(handle = %self.shape.handle, error = %e, "subset query");
            Box::new(super::reply::internal_error())
        })?;
        Ok(query.ordered(
            order_by.map(|o| o.sql().to_owned()),
            subset.limit,
            subset.offset,
        ))
    }

    /// The answer to a query Postgres refused: its data and syntax errors are the client's
    /// (400 under `subset.where`, as Electric reports them).
    fn query_failed(&self, error: &PgError) -> Response {
        postgres_failed(self.method, error, "where", true)
    }
}

/// Runs the query on a connection of its own (holding a pool permit), in a snapshot that sees
/// every commit of `must_see`, tells `started` how its start went, then streams the rows,
/// comma-separated, and the body's end into `pieces`.
async fn run(
    state: std::sync::Arc<AppState>,
    query: SnapshotQuery,
    must_see: MustSee,
    mark: u32,
    _permit: OwnedSemaphorePermit,
    started: oneshot::Sender<PgResult<SnapshotInfo>>,
    pieces: mpsc::Sender<BodyPiece>,
) {
    let mut conn = match state.postgres.new_query_connection("syncline-subset").await {
        Ok(conn) => conn,
        Err(e) => {
            let _ = started.send(Err(e));
            return;
        }
    };
    let mut snapshot = match Snapshot::begin_after(&mut conn, &query, &[], &must_see).await {
        Ok((snapshot, _)) => snapshot,
        Err(e) => {
            let _ = started.send(Err(e));
            return;
        }
    };
    let info = snapshot.info().clone();
    let mut started = Some(started);
    let mut encoder = RowEncoder::for_query(&query).with_snapshot_mark(mark);
    let mut piece = Vec::with_capacity(BODY_PIECE_BYTES);
    let mut first = true;
    loop {
        let more = snapshot
            .next_chunk(&mut |row| {
                if !std::mem::take(&mut first) {
                    piece.push(b',');
                }
                encoder.encode(&row, &mut piece)?;
                Ok(())
            })
            .await;
        // The headers wait for the first rows, so a query that fails on them (a division by
        // zero in the where clause) still gets a proper error status.
        let more = match (more, started.take()) {
            (Err(e), Some(started)) => {
                let _ = started.send(Err(e));
                return;
            }
            (Err(e), None) => {
                tracing::warn!(error = %e, "subset query failed while streaming");
                let _ = pieces.send(Err(io::Error::other(e.to_string()))).await;
                return;
            }
            (Ok(more), Some(started)) => {
                if started.send(Ok(info.clone())).is_err() {
                    return;
                }
                more
            }
            (Ok(more), None) => more,
        };
        if !more {
            piece.extend_from_slice(wire::SUBSET_END);
        }
        if (piece.len() >= BODY_PIECE_BYTES || !more)
            && pieces
                .send(Ok(Bytes::from(std::mem::take(&mut piece))))
                .await
                .is_err()
        {
            return;
        }
        if !more {
            return;
        }
    }
}

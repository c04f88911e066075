//! What the shapes service asks of the replication pipeline.

use std::sync::Arc;

use syncline_core::PgSnapshot;
use tokio::sync::oneshot;

use super::shape::Shape;

/// A subquery's select-list values of one row, as Postgres prints them (`None`: NULL).
pub type ViewTuple = Vec<Option<String>>;

/// What a restored subquery shape's log reflects, by its handle, or why it could not be read.
pub type RestoredViews = (String, Result<Reflected, String>);

/// What a subquery shape's log reflects: its value sets, and the transactions whose effect it
/// holds beyond its own commits (its moves followed them).
#[derive(Debug, Default)]
pub struct Reflected {
    /// Per subquery, its set of tuples.
    pub views: Vec<std::collections::HashSet<ViewTuple>>,
    /// Every transaction committed at or before this LSN (0: none beyond the log's commits).
    pub through: u64,
    /// Every transaction this snapshot (its last move-in's) saw.
    pub seen: Option<PgSnapshot>,
}

/// The transactions the pipeline processed before a shape's routing (or a move-in) began: the
/// snapshot that its log continues must see them all.
pub type MustSee = Arc<[u32]>;

/// What a move-in query found: the rows newly in the shape, and the snapshot they are of.
#[derive(Debug)]
pub struct MoveInRows {
    /// The query's `pg_current_snapshot()`.
    pub visibility: PgSnapshot,
    /// `pg_current_wal_insert_lsn()` when it was taken.
    pub wal_lsn: u64,
    /// Each row's key and its message (headers closed, no leading separator).
    pub rows: Vec<(Vec<u8>, Vec<u8>)>,
}

/// A request to the pipeline, sent by [`super::Shapes`].
pub enum Command {
    /// Start routing changes to a new shape; they wait in memory until
    /// [`Command::SnapshotDone`].
    AddShape {
        /// The shape.
        shape: Arc<Shape>,
        /// Answered once changes are routed to the shape, with what its snapshot must see.
        reply: oneshot::Sender<MustSee>,
    },
    /// The shape's snapshot has recorded its visibility.
    SnapshotStarted {
        /// The shape's handle.
        handle: String,
        /// `pg_current_snapshot()` of the snapshot.
        visibility: PgSnapshot,
        /// For a subquery shape, each subquery's rows in the same snapshot (else empty).
        views: Vec<Vec<ViewTuple>>,
        /// For a subquery shape, what seeds each dependency in its tree (by subquery SQL),
        /// nested ones after those they read.
        seeds: Vec<(String, Vec<ViewTuple>)>,
    },
    /// A subquery shape's move-in query finished (or failed).
    MoveInDone {
        /// The shape's handle.
        handle: String,
        /// Which move-in of the shape.
        id: u64,
        /// The rows and the query's snapshot, or why it failed.
        result: Result<MoveInRows, String>,
    },
    /// Subqueries of restored shapes were read in one snapshot.
    DependenciesSeeded {
        /// The snapshot the rows are of.
        visibility: PgSnapshot,
        /// Each subquery's SQL and its rows.
        rows: Vec<(String, Vec<ViewTuple>)>,
        /// The value sets of the restored subquery shapes.
        views: Vec<RestoredViews>,
    },
    /// The shape's snapshot is complete and durable: append what waited, go live.
    SnapshotDone {
        /// The shape's handle.
        handle: String,
    },
    /// Tell which commits a snapshot started now must see (a subset query's).
    RecentCommits {
        /// Answered with them.
        reply: oneshot::Sender<MustSee>,
    },
    /// Stop routing to a shape (it is being deleted).
    RemoveShape {
        /// The shape's handle.
        handle: String,
        /// Answered once no change will be appended to it any more.
        reply: oneshot::Sender<()>,
    },
}

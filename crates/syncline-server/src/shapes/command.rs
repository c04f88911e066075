//! What the shapes service asks of the replication pipeline.

use std::sync::Arc;

use syncline_core::PgSnapshot;
use tokio::sync::oneshot;

use super::shape::Shape;

/// A request to the pipeline, sent by [`super::Shapes`].
pub enum Command {
    /// Start routing changes to a new shape; they wait in memory until
    /// [`Command::SnapshotDone`].
    AddShape {
        /// The shape.
        shape: Arc<Shape>,
        /// Answered once changes are routed to the shape.
        reply: oneshot::Sender<()>,
    },
    /// The shape's snapshot has recorded its visibility.
    SnapshotStarted {
        /// The shape's handle.
        handle: String,
        /// `pg_current_snapshot()` of the snapshot.
        visibility: PgSnapshot,
    },
    /// The shape's snapshot is complete and durable: append what waited, go live.
    SnapshotDone {
        /// The shape's handle.
        handle: String,
    },
    /// Stop routing to a shape (it is being deleted).
    RemoveShape {
        /// The shape's handle.
        handle: String,
        /// Answered once no change will be appended to it any more.
        reply: oneshot::Sender<()>,
    },
}

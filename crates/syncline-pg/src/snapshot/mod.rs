//! Consistent initial snapshots by binary COPY, rendered as Postgres text and Electric JSON.

pub mod copy_binary;
pub mod json;
pub mod query;
pub mod run;
pub mod text;

pub use copy_binary::{CopyParser, RowRef};
pub use json::RowEncoder;
pub use query::{SnapshotColumn, SnapshotQuery};
pub use run::{Snapshot, SnapshotInfo};
pub use text::TextDecoder;

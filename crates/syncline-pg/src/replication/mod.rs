//! Logical replication: our own small client for the replication protocol, speaking pgoutput.
//!
//! Why our own: tokio-postgres 0.7 has no replication mode, and the crates that do
//! (`pgwire-replication`, `pg_walstream`) are young and single-maintainer. The protocol part we
//! need is small (startup, auth, simple query, CopyBoth framing); message encoding and SCRAM come
//! from the well-kept `postgres-protocol`, and pgoutput decoding is the product itself.

pub mod pgoutput;
pub mod resume;
pub mod slot;
pub mod stream;

pub use pgoutput::{OldRow, PgOutput, RelationColumn, RelationMessage};
pub use resume::{ResumingStream, StreamEvent, StreamStatus};
pub use slot::{drop_slot, ensure_slot, SlotInfo};
pub use stream::{ReplicationStream, StreamOptions, XLogMessage, RECONNECT_DELAY_MAX};

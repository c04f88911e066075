//! Everything Syncline says to Postgres.
//!
//! - [`replication`]: our own replication-protocol client (startup, auth, `START_REPLICATION`,
//!   keepalives, standby status), pgoutput decoding into [`replication::PgOutput`] messages
//!   streamed one by one, and [`replication::ResumingStream`] for reconnects without loss or
//!   duplication.
//! - [`publication`]: publication and replica-identity management per table.
//! - [`lock`]: the writer's lock, a session-level advisory lock on a session of its own.
//! - [`catalog`]: reading a table's [`syncline_core::RelationDesc`].
//! - [`snapshot`]: consistent initial snapshots by `COPY … (FORMAT binary)`, decoded into
//!   Postgres's text output and Electric's JSON message lines.
//! - [`conn`] and [`tls`]: connection settings (URL or key-value string) and TLS with libpq's
//!   `sslmode` semantics, for ordinary connections (tokio-postgres) and our own wire client.
//! - [`error`]: [`PgError`], which keeps what Postgres said, and its [`ErrorKind`].
//!
//! **Invariant:** this crate knows nothing of HTTP or files.

pub mod catalog;
pub mod conn;
pub mod endpoint;
pub mod error;
pub mod lock;
pub mod publication;
pub mod replication;
pub mod snapshot;
pub mod tls;
pub mod wire;

pub use conn::{connect, ConnConfig, SESSION_SETTINGS};
pub use error::{ErrorKind, PgError, PgResult};
pub use tls::SslMode;

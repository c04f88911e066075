//! Private, throw-away Postgres clusters for tests and benchmarks.
//!
//! [`PgCluster::start`] runs `initdb` (once per process, then copies the result), starts a
//! postmaster with `wal_level=logical` on a free port with its unix socket inside the cluster's
//! own temp dir, and stops and removes everything on drop, also when a test panics. Tests never
//! depend on a server they did not start.
//!
//! **Invariant:** nothing here is used by production code paths.

mod binaries;
mod cluster;

pub use binaries::pg_bindir;
pub use cluster::{stop_process, PgCluster};

//! Private, throw-away Postgres clusters for tests and benchmarks.
//!
//! [`PgCluster::start`] runs `initdb` (once per process, then copies the result), starts a
//! postmaster with `wal_level=logical` on a free port with its unix socket inside the cluster's
//! own temp dir, and stops and removes everything on drop, also when a test panics. Tests never
//! depend on a server they did not start. [`PgCluster::stop`] (in a [`ShutdownMode`]) and
//! [`PgCluster::restart`] take a cluster down and back up in place, for tests of what a
//! server restart does to its clients. [`PgCluster::start_with`] takes [`ClusterOptions`]: TLS
//! with a certificate from a [`TestCa`] made with `openssl`, and a `pg_hba.conf` of the test's.
//!
//! **Invariant:** nothing here is used by production code paths.

mod binaries;
mod cluster;
mod tls;

pub use binaries::pg_bindir;
pub use cluster::{stop_process, ClusterOptions, PgCluster, ShutdownMode};
pub use tls::{ServerCert, TestCa};

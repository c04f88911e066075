//! Syncline's shared vocabulary.
//!
//! Every other crate speaks in these types: Postgres positions ([`Lsn`]), shape-log positions
//! ([`LogOffset`]), snapshots and transaction visibility ([`PgSnapshot`]), relation descriptions
//! ([`RelationDesc`]) and the column values carried by a change ([`Tuple`]).
//!
//! **Invariant:** this crate does no I/O of any kind; it is data and pure functions only.

pub mod lsn;
pub mod offset;
pub mod pg_time;
pub mod relation;
pub mod snapshot;
pub mod sql;
pub mod tuple;
pub mod wire;

pub use lsn::Lsn;
pub use offset::LogOffset;
pub use relation::{ColumnDesc, PgType, RelationDesc, ReplicaIdentity, TypeKind};
pub use snapshot::PgSnapshot;
pub use tuple::{Tuple, Value};

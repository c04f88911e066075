//! The Syncline server: configuration, the shapes service, the pipeline that wires
//! `syncline-pg`, `syncline-where` and `syncline-storage` together, and Electric's HTTP shape API.
//!
//! Data flow: [`pipeline`] (replication → route → append, run by [`replicate`]) and
//! [`snapshot`] (COPY → append) write shape logs; [`http`] serves them. [`leadership`] decides
//! whether this server writes (it holds the writer's lock) or follows the writer through the
//! files ([`follow`]). [`shapes`] owns every shape's lifecycle, [`postgres`] the ordinary
//! database connections, [`progress`] the replication positions; [`startup`] wires them and
//! [`state`] is what HTTP handlers receive.

#![deny(missing_docs)]

pub mod admission;
pub mod blocking;
pub mod compaction;
pub mod config;
pub mod follow;
pub mod health;
pub mod http;
pub mod leadership;
pub mod memory;
pub mod metrics;
pub mod pipeline;
pub mod postgres;
pub mod progress;
pub mod replicate;
pub mod shapes;
mod shared_lookup;
pub mod snapshot;
pub mod startup;
pub mod state;
pub mod subquery;

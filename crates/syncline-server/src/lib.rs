//! The Syncline server: configuration, the shapes service, the pipeline that wires
//! `syncline-pg`, `syncline-where` and `syncline-storage` together, and Electric's HTTP shape API.
//!
//! Data flow: [`pipeline`] (replication → route → append) and [`snapshot`] (COPY → append) write
//! shape logs; [`http`] serves them. [`shapes`] owns every shape's lifecycle, [`postgres`] the
//! ordinary database connections, [`progress`] the replication positions; [`startup`] wires
//! them and [`state`] is what HTTP handlers receive.

#![deny(missing_docs)]

pub mod admission;
pub mod compaction;
pub mod config;
pub mod health;
pub mod http;
pub mod metrics;
pub mod pipeline;
pub mod postgres;
pub mod progress;
pub mod shapes;
pub mod snapshot;
pub mod startup;
pub mod state;

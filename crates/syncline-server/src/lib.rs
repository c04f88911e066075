//! The Syncline server: configuration, the shape registry, the pipeline that wires
//! `syncline-pg`, `syncline-where` and `syncline-storage` together, and Electric's HTTP shape API.
//!
//! Data flow: [`pipeline`] (replication → route → append) and [`snapshot`] (COPY → append) write
//! shape logs; [`http`] serves them; [`state`] is what they share; [`startup`] wires them.

#![deny(missing_docs)]

pub mod compaction;
pub mod config;
pub mod http;
pub mod metrics;
pub mod pipeline;
pub mod shape;
pub mod snapshot;
pub mod startup;
pub mod state;

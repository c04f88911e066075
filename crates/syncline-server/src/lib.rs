//! The Syncline server: configuration, the shape registry, the pipeline that wires
//! `syncline-pg`, `syncline-where` and `syncline-storage` together, and Electric's HTTP shape API.

#![deny(missing_docs)]

pub mod http;

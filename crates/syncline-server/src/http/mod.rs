//! Electric's HTTP shape API.

pub mod caching;
pub mod param_errors;
pub mod params;
mod query;
pub mod schema_header;
pub mod subset_body;

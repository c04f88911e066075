//! Electric's HTTP shape API.

//! Postgres's clock: timestamps, dates and the replication protocol count from 2000-01-01
//! 00:00:00 UTC, not from the Unix epoch.

use std::time::Duration;

/// Seconds from the Unix epoch to the Postgres epoch.
pub const POSTGRES_EPOCH_UNIX_SECS: i64 = 946_684_800;

/// Days from the Unix epoch to the Postgres epoch.
pub const POSTGRES_EPOCH_UNIX_DAYS: i64 = POSTGRES_EPOCH_UNIX_SECS / 86_400;

/// Microseconds since the Postgres epoch of a time given as its distance from the Unix epoch
/// (saturating far beyond year 294,000).
pub fn postgres_micros(since_unix: Duration) -> i64 {
    i64::try_from(since_unix.as_micros())
        .unwrap_or(i64::MAX)
        .saturating_sub(POSTGRES_EPOCH_UNIX_SECS * 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_postgres_epoch_is_2000_01_01() {
        assert_eq!(POSTGRES_EPOCH_UNIX_DAYS, 10_957);
        assert_eq!(POSTGRES_EPOCH_UNIX_DAYS * 86_400, POSTGRES_EPOCH_UNIX_SECS);
        assert_eq!(postgres_micros(Duration::from_secs(946_684_801)), 1_000_000);
        assert_eq!(postgres_micros(Duration::ZERO), -946_684_800_000_000);
    }
}

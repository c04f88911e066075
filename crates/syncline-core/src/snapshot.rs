//! Postgres snapshots (`pg_current_snapshot()`) and transaction visibility.

use std::fmt;
use std::str::FromStr;

/// A Postgres MVCC snapshot: transactions below `xmin` are visible, those at or above `xmax` are
/// not, and those in `xip` (in progress when the snapshot was taken) are not.
///
/// Transaction ids here are 64-bit (`xid8`, epoch included), as `pg_current_snapshot()` returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgSnapshot {
    /// Lowest transaction id still active.
    pub xmin: u64,
    /// One past the highest completed transaction id.
    pub xmax: u64,
    /// Transaction ids active at the time, each in `xmin..xmax`, sorted.
    pub xip: Vec<u64>,
}

impl PgSnapshot {
    /// Widens a 32-bit xid (as pgoutput sends it) to the 64-bit xid nearest to `xmax`.
    ///
    /// Any transaction that can still be decoded lies within 2^31 of the snapshot's horizon
    /// (Postgres's own wraparound rule), so the nearest epoch is the right one.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_possible_wrap,
        reason = "xids compare modulo 2^32: the low half of xmax and a wrapping difference are the point"
    )]
    pub fn widen(&self, xid: u32) -> u64 {
        let delta = xid.wrapping_sub(self.xmax as u32) as i32;
        self.xmax.wrapping_add_signed(i64::from(delta))
    }

    /// Whether the transaction's effects were already visible to this snapshot, i.e. whether
    /// the snapshot's data already contains what that transaction wrote.
    pub fn is_visible(&self, xid: u32) -> bool {
        let xid = self.widen(xid);
        xid < self.xmin || (xid < self.xmax && self.xip.binary_search(&xid).is_err())
    }
}

impl fmt::Display for PgSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:", self.xmin, self.xmax)?;
        for (i, x) in self.xip.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{x}")?;
        }
        Ok(())
    }
}

/// Text that is not a snapshot in `pg_snapshot` text form (`xmin:xmax:xip,…`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid snapshot {0:?}: expected xmin:xmax:xip_list")]
pub struct ParseSnapshotError(pub String);

impl FromStr for PgSnapshot {
    type Err = ParseSnapshotError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseSnapshotError(s.to_owned());
        let mut parts = s.splitn(3, ':');
        let mut next = || parts.next().ok_or_else(err);
        let xmin = next()?.parse::<u64>().map_err(|_| err())?;
        let xmax = next()?.parse::<u64>().map_err(|_| err())?;
        let list = next()?;
        let mut xip = if list.is_empty() {
            Vec::new()
        } else {
            list.split(',')
                .map(|x| x.parse::<u64>().map_err(|_| err()))
                .collect::<Result<Vec<_>, _>>()?
        };
        xip.sort_unstable();
        if xmin > xmax || xip.iter().any(|&x| x < xmin || x >= xmax) {
            return Err(err());
        }
        Ok(PgSnapshot { xmin, xmax, xip })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pg_text() {
        let s: PgSnapshot = "10:20:12,15".parse().unwrap();
        assert_eq!(
            s,
            PgSnapshot {
                xmin: 10,
                xmax: 20,
                xip: vec![12, 15]
            }
        );
        assert_eq!(s.to_string(), "10:20:12,15");
        assert_eq!("5:5:".parse::<PgSnapshot>().unwrap().xip, Vec::<u64>::new());
        for bad in ["", "1:2", "3:2:", "1:5:7", "a:b:"] {
            assert!(bad.parse::<PgSnapshot>().is_err(), "{bad}");
        }
    }

    #[test]
    fn visibility_follows_xmin_xmax_xip() {
        let s = PgSnapshot {
            xmin: 100,
            xmax: 110,
            xip: vec![103, 107],
        };
        assert!(s.is_visible(99));
        assert!(s.is_visible(100));
        assert!(!s.is_visible(103));
        assert!(s.is_visible(109));
        assert!(!s.is_visible(110));
        assert!(!s.is_visible(5000));
    }

    #[test]
    fn visibility_across_32_bit_wraparound() {
        // Epoch 3, horizon just past a 32-bit wrap.
        let base = 3u64 << 32;
        let s = PgSnapshot {
            xmin: base - 10,
            xmax: base + 5,
            xip: vec![base - 2, base + 1],
        };
        assert!(s.is_visible(u32::MAX - 20)); // epoch 2, well before xmin
        assert!(s.is_visible(u32::MAX - 5)); // epoch 2, between xmin and xmax
        assert!(!s.is_visible(u32::MAX - 1)); // base - 2, in progress
        assert!(s.is_visible(0)); // base + 0
        assert!(!s.is_visible(1)); // base + 1, in progress
        assert!(!s.is_visible(5)); // base + 5 = xmax
        assert_eq!(s.widen(u32::MAX), base - 1);
        assert_eq!(s.widen(7), base + 7);
    }
}

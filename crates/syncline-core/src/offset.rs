//! Shape-log offsets, Electric's `TX_OP`.

use std::fmt;
use std::str::FromStr;

/// The position of one message in a shape log: `(tx, op)`, ordered by `tx` then `op`.
///
/// For replicated changes `tx` is the transaction's commit LSN and `op` counts changes within it
/// (Electric steps by 2 so a key-changing update can split in two). Snapshot data uses `tx = 0`.
/// `op = u64::MAX` is written `inf` and sorts after every numbered op of the same `tx`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LogOffset {
    /// Transaction part: commit LSN, or 0 for snapshot data.
    pub tx: u64,
    /// Operation part within the transaction.
    pub op: u64,
}

impl LogOffset {
    /// The first offset of all (`0_0`).
    pub const ZERO: LogOffset = LogOffset { tx: 0, op: 0 };
    /// The virtual offset after all snapshot data and before all replicated data (`0_inf`).
    pub const SNAPSHOT_END: LogOffset = LogOffset {
        tx: 0,
        op: u64::MAX,
    };

    /// Builds an offset from its two parts.
    pub const fn new(tx: u64, op: u64) -> Self {
        LogOffset { tx, op }
    }
}

impl fmt::Display for LogOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.op == u64::MAX {
            write!(f, "{}_inf", self.tx)
        } else {
            write!(f, "{}_{}", self.tx, self.op)
        }
    }
}

/// Text that is not a `TX_OP` offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid log offset {0:?}: expected TX_OP with decimal parts (OP may be 'inf')")]
pub struct ParseOffsetError(pub String);

impl FromStr for LogOffset {
    type Err = ParseOffsetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseOffsetError(s.to_owned());
        let (tx, op) = s.split_once('_').ok_or_else(err)?;
        let decimal = |part: &str| {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err());
            }
            part.parse::<u64>().map_err(|_| err())
        };
        let tx = decimal(tx)?;
        let op = if op == "inf" { u64::MAX } else { decimal(op)? };
        Ok(LogOffset { tx, op })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for (text, tx, op) in [
            ("0_0", 0, 0),
            ("0_inf", 0, u64::MAX),
            ("24011432_6", 24011432, 6),
        ] {
            let off: LogOffset = text.parse().unwrap();
            assert_eq!(off, LogOffset::new(tx, op));
            assert_eq!(off.to_string(), text);
        }
    }

    #[test]
    fn orders_by_tx_then_op() {
        assert!(LogOffset::new(1, 9) < LogOffset::new(2, 0));
        assert!(LogOffset::new(0, 5) < LogOffset::SNAPSHOT_END);
        assert!(LogOffset::SNAPSHOT_END < LogOffset::new(1, 0));
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "1",
            "_1",
            "1_",
            "-1_0",
            "1_-2",
            "a_b",
            "1_2_3",
            "+1_2",
            "1_ 2",
            "18446744073709551616_0",
        ] {
            assert!(bad.parse::<LogOffset>().is_err(), "{bad}");
        }
    }
}

//! The `offset` a client asks for, with Electric's validation texts.

use std::str::FromStr;

use syncline_core::LogOffset;

/// The `offset` a client asks for: before everything, the current end, or after a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestOffset {
    /// `-1` (also `-1_0`): from the start, snapshot included.
    BeforeAll,
    /// `now`: no data, just the current end.
    Now,
    /// `TX_OP`: everything after this offset.
    After(LogOffset),
}

/// An `offset` parameter that is not acceptable; the text is Electric's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RequestOffsetError {
    /// The parameter is empty.
    #[error("can't be blank")]
    Blank,
    /// The parameter is not `-1`, `now` or `TX_OP`.
    #[error("has invalid format")]
    InvalidFormat,
}

impl FromStr for RequestOffset {
    type Err = RequestOffsetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "" => Err(RequestOffsetError::Blank),
            "-1" | "-1_0" => Ok(RequestOffset::BeforeAll),
            "now" => Ok(RequestOffset::Now),
            _ => s
                .parse()
                .map(RequestOffset::After)
                .map_err(|_| RequestOffsetError::InvalidFormat),
        }
    }
}

#[cfg(test)]
mod request_tests {
    use super::*;

    #[test]
    fn request_offsets() {
        assert_eq!("-1".parse(), Ok(RequestOffset::BeforeAll));
        assert_eq!("-1_0".parse(), Ok(RequestOffset::BeforeAll));
        assert_eq!("now".parse(), Ok(RequestOffset::Now));
        assert_eq!(
            "0_inf".parse(),
            Ok(RequestOffset::After(LogOffset::SNAPSHOT_END))
        );
        assert_eq!(
            "26800584_4".parse(),
            Ok(RequestOffset::After(LogOffset::new(26800584, 4)))
        );
        assert_eq!("".parse::<RequestOffset>(), Err(RequestOffsetError::Blank));
        for bad in ["-2", "NOW", "1", "abc_1", "-1_1", " 0_0"] {
            assert_eq!(
                bad.parse::<RequestOffset>(),
                Err(RequestOffsetError::InvalidFormat),
                "{bad}"
            );
        }
    }
}

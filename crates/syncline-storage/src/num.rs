//! Checked conversions between file positions and lengths (`u64`) and memory sizes (`usize`).

/// A memory size as a file position or length (lossless on every supported platform).
pub(crate) fn to_u64(n: usize) -> u64 {
    u64::try_from(n).expect("a memory size fits in 64 bits")
}

/// A file position or length as a memory size, for bytes about to be held in memory.
pub(crate) fn to_usize(n: u64) -> usize {
    usize::try_from(n).expect("a length held in memory fits in usize")
}

//! Shape handles: `"<hash>-<unix µs>"`, unique and never reused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The last timestamp handed out, so two handles minted in one microsecond still differ.
static LAST_US: AtomicU64 = AtomicU64::new(0);

/// A new handle for a shape with `identity`: a hash of the identity and a timestamp that is
/// strictly greater than every earlier one of this process (and, clocks permitting, of every
/// earlier process).
pub fn mint(identity: &str) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    let mut last = LAST_US.load(Ordering::Relaxed);
    let us = loop {
        let next = now.max(last + 1);
        match LAST_US.compare_exchange(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => break next,
            Err(seen) => last = seen,
        }
    };
    format!("{}-{us}", fnv1a32(identity.as_bytes()))
}

/// Makes every later handle's timestamp greater than `handle`'s (handles found on disk).
pub fn observe(handle: &str) {
    LAST_US.fetch_max(minted_us(handle), Ordering::Relaxed);
}

/// When a handle was minted, in microseconds since the Unix epoch (0 if it says nothing).
pub fn minted_us(handle: &str) -> u64 {
    handle
        .rsplit_once('-')
        .and_then(|(_, us)| us.parse::<u64>().ok())
        .unwrap_or(0)
}

fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |h: u32, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_unique_and_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let h = mint("same definition");
            let (hash, us) = h.split_once('-').unwrap();
            assert!(
                hash.parse::<u32>().is_ok() && us.parse::<u64>().is_ok(),
                "{h}"
            );
            assert!(seen.insert(h));
        }
    }

    #[test]
    fn observed_handles_are_never_reissued() {
        let future = format!("1-{}", u64::MAX / 2);
        observe(&future);
        let h = mint("x");
        let us: u64 = h.split_once('-').unwrap().1.parse().unwrap();
        assert!(us > u64::MAX / 2);
    }
}

//! A fast, non-cryptographic hasher for the router's maps (the Fx hash of rustc and Firefox).
//! Keys are shape ids and column values, hashed on every change; SipHash's flooding resistance
//! is not needed for them and costs several times more.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Multiplier of the Fx hash.
const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
/// Multiplier of the final avalanche (from MurmurHash3's 64-bit finaliser).
const MIX: u64 = 0xff51_afd7_ed55_8ccd;

/// The Fx hasher.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher {
    hash: u64,
}

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().unwrap_or_default()));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }

    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    /// The Fx state mixes input only upwards, so keys differing in their high bytes (strings
    /// with a common first byte, like `W000001` and `W000002`) would share their low bits, which
    /// pick the bucket; a final avalanche spreads the high bits down.
    fn finish(&self) -> u64 {
        let mut h = self.hash;
        h ^= h >> 33;
        h = h.wrapping_mul(MIX);
        h ^ (h >> 29)
    }
}

/// A `HashMap` with the Fx hasher.
pub(crate) type FxHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
/// A `HashSet` with the Fx hasher.
pub(crate) type FxHashSet<T> = HashSet<T, BuildHasherDefault<FxHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, BuildHasherDefault};

    #[test]
    fn keys_differing_in_high_bytes_spread_over_buckets() {
        let build = BuildHasherDefault::<FxHasher>::default();
        let buckets: FxHashSet<u64> = (0..1000)
            .map(|i| build.hash_one(format!("W{i:06}")) & 1023)
            .collect();
        assert!(
            buckets.len() > 500,
            "{} distinct buckets of 1024",
            buckets.len()
        );
    }
}

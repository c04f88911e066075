//! Decoding the sparse chunk index shared by the writer's recovery and the readers.

use crate::format::{ChunkEntry, ENTRY_BYTES, ENTRY_CONTINUED};

/// Decodes whole entries from `bytes`, appended after `prev` (the last entry already known).
///
/// Stops at the first entry that is torn, fails its checksum, or does not start after the
/// previous one ends: such an entry is being written or was never made durable. Entries at the
/// end still marked `ENTRY_CONTINUED` are left out too: the rest of their write is missing.
pub(crate) fn decode_entries(bytes: &[u8], mut prev: Option<ChunkEntry>) -> Vec<ChunkEntry> {
    let mut entries = Vec::with_capacity(bytes.len() / ENTRY_BYTES);
    for buf in bytes.chunks_exact(ENTRY_BYTES) {
        let Some(entry) = ChunkEntry::decode(buf) else {
            break;
        };
        if prev.is_some_and(|p| entry.first <= p.last) {
            break;
        }
        entries.push(entry);
        prev = Some(entry);
    }
    while entries
        .last()
        .is_some_and(|e| e.flags & ENTRY_CONTINUED != 0)
    {
        entries.pop();
    }
    entries
}

#[cfg(test)]
mod tests {
    use syncline_core::LogOffset;

    use super::*;

    fn entry(first: u64, last: u64) -> ChunkEntry {
        ChunkEntry {
            first: LogOffset::new(first, 0),
            last: LogOffset::new(last, 0),
            json_len: 1,
            record_count: 1,
            keys_len: 1,
            gen: 0,
            flags: 0,
        }
    }

    #[test]
    fn stops_at_torn_or_unordered_entries() {
        let mut bytes = Vec::new();
        for e in [entry(1, 2), entry(3, 4), entry(4, 5)] {
            bytes.extend_from_slice(&e.encode());
        }
        assert_eq!(decode_entries(&bytes, None), vec![entry(1, 2), entry(3, 4)]);
        assert_eq!(
            decode_entries(&bytes[..ENTRY_BYTES + 10], None),
            vec![entry(1, 2)]
        );
        assert_eq!(
            decode_entries(&bytes[..ENTRY_BYTES], Some(entry(0, 0))),
            vec![entry(1, 2)]
        );
        assert!(decode_entries(&bytes[..ENTRY_BYTES], Some(entry(0, 1))).is_empty());
        assert!(decode_entries(&bytes[..ENTRY_BYTES], Some(entry(0, 2))).is_empty());
    }

    #[test]
    fn a_group_counts_once_its_last_entry_is_intact() {
        let continued = |e: ChunkEntry| ChunkEntry {
            flags: ENTRY_CONTINUED,
            ..e
        };
        let group = [
            entry(1, 2),
            continued(entry(3, 4)),
            continued(entry(5, 6)),
            entry(7, 8),
        ];
        let bytes: Vec<u8> = group.iter().flat_map(|e| e.encode()).collect();
        assert_eq!(decode_entries(&bytes, None), group);
        for cut in [2, 3] {
            assert_eq!(
                decode_entries(&bytes[..cut * ENTRY_BYTES], None),
                vec![entry(1, 2)]
            );
        }
        assert_eq!(
            decode_entries(&bytes[..4 * ENTRY_BYTES - 1], None),
            vec![entry(1, 2)]
        );
    }
}

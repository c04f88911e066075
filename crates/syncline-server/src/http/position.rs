//! Electric's offsets over the shape log's own. The log stores snapshot rows at `0_0`, `0_1`, …
//! (one per row, `snapshot-end` last) and replicated changes at their `LSN_OP`; the snapshot
//! fills the log's first chunks and the first change starts a chunk of its own. Clients see
//! Electric's offsets: snapshot chunk `k` ends at `0_k` (so `offset=-1` always ends at `0_0`),
//! and the changes follow the virtual `0_inf`.

use syncline_core::LogOffset;
use syncline_storage::ReadResult;

use crate::shapes::{Shape, ShapeState};

/// Where in the log to read after a client's `offset`: `None` when the offset names nothing
/// this shape has (a snapshot chunk not written yet or past the snapshot, or a position past
/// everything seen), `last_seen_lsn` being the last commit the server processed. Only a
/// snapshot chunk's offset reads the log's files: the index, a `stat` and at most one read
/// from the page cache, done on the calling thread (as a woken request's read is: handing
/// the runtime's thread over would cost more when thousands of clients sync at once). Any
/// other offset is located in memory.
pub fn locate(
    shape: &Shape,
    offset: LogOffset,
    last_seen_lsn: u64,
) -> syncline_storage::Result<Option<LogOffset>> {
    let st = shape.state();
    if offset == LogOffset::SNAPSHOT_END {
        return Ok(Some(offset));
    }
    if offset.tx == 0 {
        let chunk = offset.op;
        return shape.with_reader(|r| match r.closed_chunk_last(chunk)? {
            Some(last) if last.tx == 0 => Ok(Some(last)),
            Some(_) => Ok(None),
            // The snapshot's last chunk, still the log's open chunk: nothing else is in it.
            None if st.snapshot_done && usize::try_from(chunk).ok() == Some(r.closed_chunks()?) => {
                Ok(Some(LogOffset::SNAPSHOT_END))
            }
            None => Ok(None),
        });
    }
    let end = st.durable.map_or(0, |d| d.tx).max(last_seen_lsn);
    Ok((!st.snapshot_done || offset.tx <= end).then_some(offset))
}

/// Whether reading from `from` can find nothing past what the shape's state `st` says is
/// durable: its snapshot is complete and `from` is at or past the end.
pub fn at_end(st: &ShapeState, from: Option<LogOffset>) -> bool {
    let (Some(from), true) = (from, st.snapshot_done) else {
        return false;
    };
    st.durable
        .is_none_or(|durable| client_end(durable) <= client_end(from))
}

/// Whether a read returned (part of) the snapshot.
pub fn is_snapshot(read: &ReadResult) -> bool {
    read.body.is_some() && read.end_offset.is_some_and(|e| e.tx == 0)
}

/// The offset a client continues from after `read`.
pub fn client_offset(read: &ReadResult) -> LogOffset {
    match read.end_offset {
        _ if is_snapshot(read) => LogOffset::new(0, read.chunk),
        Some(end) => client_end(end),
        None => LogOffset::ZERO,
    }
}

/// The client's name for a durable log position: inside the snapshot is before every change.
pub fn client_end(end: LogOffset) -> LogOffset {
    if end.tx == 0 {
        LogOffset::SNAPSHOT_END
    } else {
        end
    }
}

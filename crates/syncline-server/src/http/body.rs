//! Response bodies: a JSON array made of a shape-log file range, sent without parsing or
//! re-encoding, and control messages.

use std::io;

use std::os::unix::fs::FileExt;

use axum::body::Body;
use bytes::Bytes;
use futures_util::future::Either;
use futures_util::stream::{self, Stream, StreamExt};
use syncline_core::wire;
use syncline_storage::FileRange;

/// Ranges up to this size are read into memory; larger ones are memory-mapped.
const READ_RANGE_BYTES_MAX: u64 = 256 * 1024;
/// Most bytes of a response body read at once: what a client that stops reading holds.
const WINDOW_BYTES: u64 = READ_RANGE_BYTES_MAX;

/// The bytes of a log range: read when small, memory-mapped when large.
pub fn range_bytes(range: &FileRange) -> io::Result<Bytes> {
    if range.len <= READ_RANGE_BYTES_MAX {
        return range.read_to_vec().map(Bytes::from);
    }
    let page = page_size();
    let aligned = range.start - range.start % page;
    let lead = usize::try_from(range.start - aligned).expect("less than a page");
    let len = usize::try_from(range.len).map_err(io::Error::other)?;
    // SAFETY: closed chunks are immutable and the open chunk is only appended to past the
    // range, so the mapped bytes never change while mapped; unlinked files stay mapped.
    let map = unsafe {
        memmap2::MmapOptions::new()
            .offset(aligned)
            .len(lead + len)
            .map(&*range.file)?
    };
    Ok(Bytes::from_owner(map).slice(lead..))
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).unwrap_or(4096)
}

/// `[` + stored messages (a log range, each message stored with a leading `,`) + an optional
/// control message + `]`. The range is sent from `read`, its bytes when the caller has them,
/// or read (or mapped) a window at a time as the client takes it, so a client that stops
/// reading holds at most one window.
pub fn log_array(
    messages: Option<FileRange>,
    read: Option<Bytes>,
    control: Option<&[u8]>,
) -> io::Result<Body> {
    let has_messages = messages.as_ref().is_some_and(|m| m.len > 1);
    let middle = match (messages.filter(|_| has_messages), read) {
        (Some(range), Some(read)) => {
            assert_eq!(
                u64::try_from(read.len()).ok(),
                Some(range.len),
                "the bytes read are the range's"
            );
            assert_eq!(
                read[0],
                wire::STORED_SEPARATOR,
                "stored messages start with a separator"
            );
            Some(Either::Left(stream::iter([Ok(read.slice(1..))])))
        }
        (Some(range), None) => {
            let mut first = [0u8; 1];
            range.file.read_exact_at(&mut first, range.start)?;
            assert_eq!(
                first[0],
                wire::STORED_SEPARATOR,
                "stored messages start with a separator"
            );
            Some(Either::Right(windows(FileRange {
                start: range.start + 1,
                len: range.len - 1,
                ..range
            })))
        }
        (None, _) => None,
    };
    let end = Bytes::from(wire::array_end(has_messages, control));
    let head = stream::iter([Ok(Bytes::from_static(b"["))]);
    let tail = stream::iter([Ok(end)]);
    Ok(match middle {
        Some(middle) => Body::from_stream(head.chain(middle).chain(tail)),
        None => Body::from_stream(head.chain(tail)),
    })
}

/// The whole array of [`log_array`] in memory (for a body that is compressed).
pub fn log_bytes(messages: Option<&FileRange>, control: Option<&[u8]>) -> io::Result<Vec<u8>> {
    let stored = match messages.filter(|m| m.len > 1) {
        Some(range) => range.read_to_vec()?,
        None => Vec::new(),
    };
    let has_messages = !stored.is_empty();
    if has_messages {
        assert_eq!(
            stored[0],
            wire::STORED_SEPARATOR,
            "stored messages start with a separator"
        );
    }
    let mut out = Vec::with_capacity(stored.len() + control.map_or(2, |c| c.len() + 3));
    out.push(b'[');
    out.extend_from_slice(stored.get(1..).unwrap_or_default());
    out.extend_from_slice(&wire::array_end(has_messages, control));
    Ok(out)
}

/// The bytes of `range`, a window of at most [`WINDOW_BYTES`] at a time, each made when the
/// previous one was taken.
fn windows(range: FileRange) -> impl Stream<Item = io::Result<Bytes>> + Send {
    stream::unfold(Some(range), |rest| async move {
        let rest = rest?;
        let len = rest.len.min(WINDOW_BYTES);
        let window = FileRange {
            len,
            ..rest.clone()
        };
        let next = (rest.len > len).then(|| FileRange {
            start: rest.start + len,
            len: rest.len - len,
            ..rest
        });
        match range_bytes(&window) {
            Ok(bytes) => Some((Ok(bytes), next)),
            Err(e) => Some((Err(e), None)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn text(body: Body) -> String {
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    fn stored(bytes: &[u8]) -> FileRange {
        use std::io::Write;
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(bytes).unwrap();
        FileRange {
            file: std::sync::Arc::new(file),
            start: 0,
            len: bytes.len() as u64,
        }
    }

    #[tokio::test]
    async fn arrays() {
        let b = log_array(Some(stored(b",{\"a\":1},{\"b\":2}")), None, None).unwrap();
        assert_eq!(text(b).await, "[{\"a\":1},{\"b\":2}]");
        let control = wire::up_to_date(7);
        let b = log_array(Some(stored(b",{\"a\":1}")), None, Some(&control)).unwrap();
        assert_eq!(
            text(b).await,
            "[{\"a\":1},{\"headers\":{\"control\":\"up-to-date\",\"global_last_seen_lsn\":\"7\"}}]"
        );
        let control = wire::up_to_date(0);
        let b = log_array(None, None, Some(&control)).unwrap();
        assert_eq!(
            text(b).await,
            "[{\"headers\":{\"control\":\"up-to-date\",\"global_last_seen_lsn\":\"0\"}}]"
        );
        assert_eq!(text(log_array(None, None, None).unwrap()).await, "[]");
    }

    #[tokio::test]
    async fn a_range_read_already_is_sent_from_its_bytes() {
        let data = b",{\"a\":1},{\"b\":2}";
        let range = stored(data);
        // The file is cut: the body can only come from the bytes given.
        range.file.set_len(0).unwrap();
        let control = wire::up_to_date(7);
        let b = log_array(Some(range), Some(Bytes::from_static(data)), Some(&control)).unwrap();
        assert_eq!(
            text(b).await,
            "[{\"a\":1},{\"b\":2},{\"headers\":{\"control\":\"up-to-date\",\"global_last_seen_lsn\":\"7\"}}]"
        );
    }

    #[tokio::test]
    async fn large_ranges_go_out_a_window_at_a_time() {
        let mut data = b",".to_vec();
        data.extend((0..3_000_000u32).map(|i| b'a' + (i % 26) as u8));
        let body = log_array(Some(stored(&data)), None, None).unwrap();
        let mut stream = body.into_data_stream();
        let mut sizes = Vec::new();
        let mut all = Vec::new();
        while let Some(piece) = stream.next().await {
            let piece = piece.unwrap();
            sizes.push(piece.len());
            all.extend_from_slice(&piece);
        }
        assert!(sizes.iter().all(|&n| n as u64 <= WINDOW_BYTES), "{sizes:?}");
        assert_eq!(&all[1..all.len() - 1], &data[1..]);
    }

    #[test]
    fn large_ranges_are_mapped_exactly() {
        use std::io::Write;
        let mut file = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        file.write_all(&data).unwrap();
        let file = std::sync::Arc::new(file);
        for (start, len) in [
            (0u64, 10u64),
            (4095, 300_000),
            (12_345, 600_000),
            (999_000, 1000),
        ] {
            let range = FileRange {
                file: file.clone(),
                start,
                len,
            };
            let bytes = range_bytes(&range).unwrap();
            let (start, end) = (
                usize::try_from(start).unwrap(),
                usize::try_from(start + len).unwrap(),
            );
            assert_eq!(&bytes[..], &data[start..end]);
        }
    }
}

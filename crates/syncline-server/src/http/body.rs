//! Response bodies: a JSON array made of a shape-log file range, sent without parsing or
//! re-encoding, and control messages.

use std::io;

use axum::body::Body;
use bytes::Bytes;
use futures_util::stream;
use syncline_storage::FileRange;

/// Ranges up to this size are read into memory; larger ones are memory-mapped.
const READ_RANGE_BYTES_MAX: u64 = 256 * 1024;

/// The bytes of a log range: read when small, memory-mapped when large.
pub fn range_bytes(range: &FileRange) -> io::Result<Bytes> {
    if range.len <= READ_RANGE_BYTES_MAX {
        return range.read_to_vec().map(Bytes::from);
    }
    let page = page_size();
    let aligned = range.start - range.start % page;
    let lead = (range.start - aligned) as usize;
    // SAFETY: closed chunks are immutable and the open chunk is only appended to past the
    // range, so the mapped bytes never change while mapped; unlinked files stay mapped.
    let map = unsafe {
        memmap2::MmapOptions::new()
            .offset(aligned)
            .len(lead + range.len as usize)
            .map(&*range.file)?
    };
    Ok(Bytes::from_owner(map).slice(lead..))
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).unwrap_or(4096)
}

/// `[` + stored messages (each stored with a leading `,`) + an optional control message + `]`.
pub fn log_array(messages: Option<Bytes>, control: Option<String>) -> (Body, usize) {
    let mut parts: Vec<Bytes> = Vec::with_capacity(3);
    let mut has_messages = false;
    match messages {
        Some(m) if m.len() > 1 => {
            parts.push(Bytes::from_static(b"["));
            parts.push(m.slice(1..));
            has_messages = true;
        }
        _ => parts.push(Bytes::from_static(b"[")),
    }
    let mut close = String::new();
    if let Some(control) = control {
        if has_messages {
            close.push(',');
        }
        close.push_str(&control);
    }
    close.push(']');
    parts.push(Bytes::from(close));
    let len = parts.iter().map(Bytes::len).sum();
    let body = Body::from_stream(stream::iter(
        parts.into_iter().map(Ok::<_, std::convert::Infallible>),
    ));
    (body, len)
}

/// The `up-to-date` control message.
pub fn up_to_date(global_last_seen_lsn: u64) -> String {
    format!(
        "{{\"headers\":{{\"control\":\"up-to-date\",\"global_last_seen_lsn\":\"{global_last_seen_lsn}\"}}}}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn text(body: Body) -> String {
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn arrays() {
        let (b, n) = log_array(Some(Bytes::from_static(b",{\"a\":1},{\"b\":2}")), None);
        assert_eq!(n, 17);
        assert_eq!(text(b).await, "[{\"a\":1},{\"b\":2}]");
        let (b, _) = log_array(Some(Bytes::from_static(b",{\"a\":1}")), Some(up_to_date(7)));
        assert_eq!(
            text(b).await,
            "[{\"a\":1},{\"headers\":{\"control\":\"up-to-date\",\"global_last_seen_lsn\":\"7\"}}]"
        );
        let (b, _) = log_array(None, Some(up_to_date(0)));
        assert_eq!(
            text(b).await,
            "[{\"headers\":{\"control\":\"up-to-date\",\"global_last_seen_lsn\":\"0\"}}]"
        );
        let (b, _) = log_array(None, None);
        assert_eq!(text(b).await, "[]");
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
            assert_eq!(&bytes[..], &data[start as usize..(start + len) as usize]);
        }
    }
}

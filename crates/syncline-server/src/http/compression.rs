//! gzip for non-live responses, as Electric compresses them when the client accepts it. A
//! response that is a whole closed chunk never changes, so its compressed form is made once
//! and kept (in a cache bounded in bytes) and served as bytes from then on; other responses are
//! compressed as they are made, at a fast level.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;

use axum::http::header::ACCEPT_ENCODING;
use axum::http::HeaderMap;
use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;

/// Bytes of compressed chunks kept.
const CACHE_BYTES_MAX: usize = 64 << 20;
/// Compression level of cached chunks (made once, served many times).
const CACHED_LEVEL: u32 = 6;
/// Compression level of responses compressed as they are made.
const FAST_LEVEL: u32 = 1;

/// Whether the request accepts a gzip body (`accept-encoding` names `gzip` or `*`, with a
/// quality above zero).
pub fn accepts_gzip(request: &HeaderMap) -> bool {
    request
        .get_all(ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            let name = parts.next().unwrap_or("");
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        })
}

/// `bytes` gzipped at `level`.
pub fn gzip(bytes: &[u8], level: u32) -> Bytes {
    let mut encoder = GzEncoder::new(Vec::with_capacity(bytes.len() / 4), Compression::new(level));
    encoder
        .write_all(bytes)
        .and_then(|()| encoder.finish())
        .map(Bytes::from)
        .expect("writing to a Vec")
}

/// What identifies an immutable response: the shape, the closed chunk, and the byte range of
/// it the response holds.
pub type ChunkKey = (String, u64, u64, u64);

/// Compressed closed chunks, least recently used dropped first.
#[derive(Debug, Default)]
pub struct CompressedChunks {
    inner: Mutex<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    entries: HashMap<ChunkKey, (Bytes, u64)>,
    bytes: usize,
    clock: u64,
}

impl CompressedChunks {
    /// The compressed form of the closed-chunk response `key`, compressing `body()` the first
    /// time. Returns it and whether it was already kept.
    pub fn get_or_compress(&self, key: ChunkKey, body: impl FnOnce() -> Vec<u8>) -> (Bytes, bool) {
        {
            let mut cache = self.inner.lock().expect("compression cache lock");
            cache.clock += 1;
            let now = cache.clock;
            if let Some((bytes, used)) = cache.entries.get_mut(&key) {
                *used = now;
                return (bytes.clone(), true);
            }
        }
        let compressed = gzip(&body(), CACHED_LEVEL);
        let mut cache = self.inner.lock().expect("compression cache lock");
        let now = cache.clock;
        cache.bytes += compressed.len();
        if let Some((old, _)) = cache.entries.insert(key, (compressed.clone(), now)) {
            cache.bytes -= old.len();
        }
        while cache.bytes > CACHE_BYTES_MAX && cache.entries.len() > 1 {
            let oldest = cache
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
                .expect("not empty");
            let (bytes, _) = cache.entries.remove(&oldest).expect("present");
            cache.bytes -= bytes.len();
        }
        (compressed, false)
    }
}

/// A response compressed as it is made.
pub fn gzip_fast(bytes: &[u8]) -> Bytes {
    gzip(bytes, FAST_LEVEL)
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use axum::http::HeaderValue;

    use super::*;

    fn headers(accept: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(ACCEPT_ENCODING, HeaderValue::from_str(accept).unwrap());
        h
    }

    #[test]
    fn reads_accept_encoding() {
        assert!(accepts_gzip(&headers("gzip, deflate, br")));
        assert!(accepts_gzip(&headers("br;q=1.0, gzip;q=0.8")));
        assert!(accepts_gzip(&headers("*")));
        assert!(!accepts_gzip(&headers("gzip;q=0")));
        assert!(!accepts_gzip(&headers("br, deflate")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn compresses_once_and_round_trips() {
        let cache = CompressedChunks::default();
        let body = b"[{\"key\":\"a\"},{\"key\":\"b\"}]".repeat(100);
        let key = ("h".to_owned(), 3, 0, 10);
        let (first, kept) = cache.get_or_compress(key.clone(), || body.clone());
        assert!(!kept);
        let (again, kept) = cache.get_or_compress(key, || unreachable!("kept"));
        assert!(kept);
        assert_eq!(first, again);
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&first[..])
            .read_to_end(&mut plain)
            .unwrap();
        assert_eq!(plain, body);
        assert!(first.len() < body.len() / 10);
    }
}

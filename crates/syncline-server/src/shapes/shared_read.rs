//! One read of a shape's log shared by the long-polls that new data woke together, or that
//! arrive together at the log's end (its body's bytes too, when small), and one framed batch
//! shared by the server-sent-event streams that new data woke together: a write that reaches
//! a shape with thousands of waiting clients costs one read, not thousands.

use std::fs::File;
use std::io;
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use syncline_core::LogOffset;
use syncline_storage::{FileRange, ReadResult};

/// Largest body a shape keeps read in memory for the requests woken after the one that read
/// it; a bigger one is read by each response from the file, a window at a time.
const SHARED_BODY_KEPT_MAX: u64 = 256 * 1024;

/// The last reads after a wake (boxed: most shapes of a large server are idle, and hold none).
#[derive(Debug)]
pub struct SharedRead<K> {
    last: Mutex<Option<Box<Slots<K>>>>,
}

/// The last read that found messages, and the last that found none, kept apart: after a
/// write, requests woken from the old end (messages) and clients already polling again from
/// the new one (none) alternate, and each kind shares its own read.
#[derive(Debug)]
struct Slots<K> {
    messages: Option<(Kept<K>, KeptBody)>,
    nothing: Option<Kept<K>>,
}

impl<K> Default for SharedRead<K> {
    fn default() -> Self {
        SharedRead {
            last: Mutex::new(None),
        }
    }
}

/// A read, without its body, and the key it answered.
#[derive(Debug)]
struct Kept<K> {
    key: K,
    read: ReadResult,
}

/// How a kept read that found messages holds its body.
#[derive(Debug)]
enum KeptBody {
    /// Read while `takers` other requests waited on the shape: the range and its bytes, kept
    /// for them (until a newer read replaces them or the shape goes idle) however long they
    /// take to run (the thousandth runs long after the first response was sent); the last of
    /// them leaves the file held weakly, so that a shape between bursts holds no descriptor.
    Held {
        range: FileRange,
        bytes: Bytes,
        takers: usize,
    },
    /// Read by a request alone, or too large to keep: the file held weakly, so that once every
    /// response that used it is sent the shape holds no descriptor.
    Weak(Weak<File>, u64, u64),
}

impl KeptBody {
    /// `range` with its file held weakly.
    fn weak(range: &FileRange) -> KeptBody {
        KeptBody::Weak(Arc::downgrade(&range.file), range.start, range.len)
    }
}

impl<K: PartialEq> SharedRead<K> {
    /// The read for `key` (what the request saw of the shape's state when it woke, and the
    /// offset it reads from), with its body's bytes when they were read once for all: the
    /// read another request made for an equal key, if kept, else `read()` (kept for the next;
    /// its body read into memory, up to [`SHARED_BODY_KEPT_MAX`], for the `others_waiting`
    /// requests). A read made after that state was published is as fresh as one made now
    /// could be for the request: newer data publishes a newer state, which wakes the request
    /// again.
    pub fn read(
        &self,
        key: K,
        others_waiting: usize,
        read: impl FnOnce() -> syncline_storage::Result<ReadResult>,
    ) -> syncline_storage::Result<(ReadResult, Option<Bytes>)> {
        if let Some(shared) = self.take_shared(&key) {
            return Ok(shared);
        }
        let fresh = read()?;
        // A failed read here is not the request's: its response reads the file itself.
        let bytes = match &fresh.body {
            Some(range) if others_waiting > 0 && range.len <= SHARED_BODY_KEPT_MAX => {
                range.read_to_vec().ok().map(Bytes::from)
            }
            _ => None,
        };
        let mut read = fresh.clone();
        read.body = None;
        let kept = Kept { key, read };
        let mut last = self.last.lock().expect("shared read lock");
        let slots = last.get_or_insert_with(|| {
            Box::new(Slots {
                messages: None,
                nothing: None,
            })
        });
        match (&fresh.body, &bytes) {
            (None, _) => slots.nothing = Some(kept),
            (Some(range), Some(bytes)) => {
                let body = KeptBody::Held {
                    range: range.clone(),
                    bytes: bytes.clone(),
                    takers: others_waiting,
                };
                slots.messages = Some((kept, body));
            }
            (Some(range), None) => slots.messages = Some((kept, KeptBody::weak(range))),
        }
        Ok((fresh, bytes))
    }

    /// Forgets the kept read (a shape gone idle).
    pub fn clear(&self) {
        *self.last.lock().expect("shared read lock") = None;
    }

    fn take_shared(&self, key: &K) -> Option<(ReadResult, Option<Bytes>)> {
        let mut last = self.last.lock().expect("shared read lock");
        let slots = last.as_mut()?;
        if let Some(kept) = slots.nothing.as_ref().filter(|k| k.key == *key) {
            return Some((kept.read.clone(), None));
        }
        let (kept, body) = slots.messages.as_mut().filter(|(k, _)| k.key == *key)?;
        let mut read = kept.read.clone();
        let (range, bytes) = match body {
            KeptBody::Held {
                range,
                bytes,
                takers,
            } => {
                let shared = (range.clone(), Some(bytes.clone()));
                *takers = takers.saturating_sub(1);
                if *takers == 0 {
                    *body = KeptBody::weak(range);
                }
                shared
            }
            KeptBody::Weak(file, start, len) => {
                let range = FileRange {
                    file: file.upgrade()?,
                    start: *start,
                    len: *len,
                };
                (range, None)
            }
        };
        read.body = Some(range);
        Some((read, bytes))
    }
}

/// Largest batch of server-sent events a shape keeps for the streams woken after the one that
/// framed it; a bigger one (a stream far behind) is framed by each stream for itself.
const SHARED_BATCH_KEPT_MAX: usize = 256 * 1024;

/// The last batch of server-sent events framed for a stream that a change woke: streams that
/// saw the same state and read from the same offset send the same bytes, read and framed
/// once. Kept until a newer batch replaces it or the shape goes idle, so thousands of streams
/// woken together share it however long they take to run (each stream queues up to a few
/// batches anyway, so one more per shape is small beside them).
#[derive(Debug)]
pub struct SharedBatch<K> {
    last: Mutex<Option<Box<KeptBatch<K>>>>,
}

impl<K> Default for SharedBatch<K> {
    fn default() -> Self {
        SharedBatch {
            last: Mutex::new(None),
        }
    }
}

/// A framed batch and its end, or `None` when there was nothing new, and the key it answered.
#[derive(Debug)]
struct KeptBatch<K> {
    key: K,
    batch: Option<(Bytes, LogOffset)>,
}

impl<K: PartialEq> SharedBatch<K> {
    /// The batch for `key` (what the stream saw of the shape's state when it woke, and the
    /// offset it reads from) and the offset it ends at, or `None` when there is nothing new:
    /// the kept one for an equal key, else `frame()` (kept for the next, up to
    /// [`SHARED_BATCH_KEPT_MAX`]). As with [`SharedRead::read`], a batch framed after that
    /// state was published is as fresh as one framed now: newer data publishes a newer
    /// state, which wakes the stream.
    pub fn get(
        &self,
        key: K,
        frame: impl FnOnce() -> io::Result<Option<(Vec<u8>, LogOffset)>>,
    ) -> io::Result<Option<(Bytes, LogOffset)>> {
        {
            let last = self.last.lock().expect("shared batch lock");
            if let Some(kept) = last.as_ref().filter(|k| k.key == key) {
                return Ok(kept.batch.clone());
            }
        }
        let batch = frame()?.map(|(events, end)| (Bytes::from(events), end));
        let kept = match &batch {
            Some((events, _)) if events.len() > SHARED_BATCH_KEPT_MAX => None,
            _ => Some(Box::new(KeptBatch {
                key,
                batch: batch.clone(),
            })),
        };
        *self.last.lock().expect("shared batch lock") = kept;
        Ok(batch)
    }

    /// Forgets the kept batch (a shape gone idle).
    pub fn clear(&self) {
        *self.last.lock().expect("shared batch lock") = None;
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::sync::Arc;

    use syncline_core::LogOffset;

    use super::*;

    fn read_of(file: &Arc<File>, end: u64) -> ReadResult {
        ReadResult {
            body: Some(FileRange {
                file: file.clone(),
                start: 0,
                len: 3,
            }),
            end_offset: Some(LogOffset::new(end, 0)),
            chunk_closed: false,
            up_to_date: true,
            snapshot_complete: true,
            chunk: 1,
        }
    }

    #[test]
    fn requests_that_saw_the_same_offset_share_one_read_while_its_body_is_open() {
        let file = Arc::new(tempfile::tempfile().unwrap());
        let shared = SharedRead::default();
        let reads = Cell::new(0);
        let read = |end| {
            reads.set(reads.get() + 1);
            Ok(read_of(&file, end))
        };
        let seen = Some(LogOffset::new(5, 0));
        let from = Some(LogOffset::new(4, 0));
        let (first, _) = shared.read((seen, from), 0, || read(5)).unwrap();
        let (second, _) = shared.read((seen, from), 0, || read(6)).unwrap();
        assert_eq!(reads.get(), 1);
        assert_eq!(second.end_offset, Some(LogOffset::new(5, 0)));
        assert!(Arc::ptr_eq(
            &first.body.as_ref().unwrap().file,
            &second.body.as_ref().unwrap().file
        ));
        let (newer, _) = shared
            .read((Some(LogOffset::new(6, 0)), from), 0, || read(6))
            .unwrap();
        assert_eq!(
            (reads.get(), newer.end_offset),
            (2, Some(LogOffset::new(6, 0)))
        );
        shared
            .read((seen, Some(LogOffset::new(3, 0))), 0, || read(5))
            .unwrap();
        assert_eq!(reads.get(), 3, "another offset reads for itself");
    }

    #[test]
    fn streams_that_saw_the_same_offset_share_one_batch() {
        let shared = SharedBatch::default();
        let frames = Cell::new(0);
        let frame = |len: usize, end| {
            frames.set(frames.get() + 1);
            Ok(Some((vec![b'a'; len], LogOffset::new(end, 0))))
        };
        let from = LogOffset::new(4, 0);
        let (first, end) = shared.get((5, from), || frame(1, 5)).unwrap().unwrap();
        drop(first);
        let (second, _) = shared.get((5, from), || frame(2, 6)).unwrap().unwrap();
        assert_eq!(
            (frames.get(), second.len(), end),
            (1, 1, LogOffset::new(5, 0))
        );
        shared.get((6, from), || frame(3, 8)).unwrap();
        assert_eq!(frames.get(), 2, "a newer state frames for itself");
        shared
            .get((7, from), || frame(SHARED_BATCH_KEPT_MAX + 1, 9))
            .unwrap();
        shared.get((7, from), || frame(1, 9)).unwrap();
        assert_eq!(frames.get(), 4, "a batch past the bound is not kept");
    }

    #[test]
    fn nothing_new_is_shared_too() {
        let shared = SharedBatch::default();
        let frames = Cell::new(0);
        let nothing = || {
            frames.set(frames.get() + 1);
            Ok(None)
        };
        let from = LogOffset::new(4, 0);
        assert!(shared.get((5, from), nothing).unwrap().is_none());
        assert!(shared.get((5, from), nothing).unwrap().is_none());
        assert_eq!(frames.get(), 1);
    }

    #[test]
    fn a_read_whose_body_is_gone_is_read_again() {
        let shared = SharedRead::default();
        let seen = Some(LogOffset::new(5, 0));
        {
            let file = Arc::new(tempfile::tempfile().unwrap());
            shared.read((seen, 1), 0, || Ok(read_of(&file, 5))).unwrap();
        }
        let file = Arc::new(tempfile::tempfile().unwrap());
        let (again, _) = shared.read((seen, 1), 0, || Ok(read_of(&file, 7))).unwrap();
        assert_eq!(again.end_offset, Some(LogOffset::new(7, 0)));
    }

    #[test]
    fn a_read_made_while_others_wait_keeps_its_bytes_for_them() {
        use std::io::Write;
        let shared = SharedRead::default();
        let reads = Cell::new(0);
        let read = |bytes: &[u8], end| {
            reads.set(reads.get() + 1);
            let mut file = tempfile::tempfile().unwrap();
            file.write_all(bytes).unwrap();
            let mut read = read_of(&Arc::new(file), end);
            read.body.as_mut().unwrap().len = bytes.len() as u64;
            Ok(read)
        };
        let seen = Some(LogOffset::new(5, 0));
        let (first, bytes) = shared.read((seen, 1), 2, || read(b"abc", 5)).unwrap();
        assert_eq!(bytes.as_deref(), Some(&b"abc"[..]));
        // Its response is long sent when the two others run.
        drop(first);
        for _ in 0..2 {
            let (other, bytes) = shared.read((seen, 1), 0, || read(b"xyz", 6)).unwrap();
            assert_eq!(
                (bytes.as_deref(), other.end_offset),
                (Some(&b"abc"[..]), Some(LogOffset::new(5, 0)))
            );
        }
        assert_eq!(reads.get(), 1);
        // The last of them held the file weakly: gone with its response.
        shared.read((seen, 1), 0, || read(b"xyz", 6)).unwrap();
        assert_eq!(
            reads.get(),
            2,
            "the file is not held once the others had it"
        );

        let big = vec![b'a'; usize::try_from(SHARED_BODY_KEPT_MAX).unwrap() + 1];
        let later = Some(LogOffset::new(6, 0));
        let (read_big, bytes) = shared.read((later, 1), 1, || read(&big, 6)).unwrap();
        assert!(
            bytes.is_none(),
            "a body past the bound is read by each response"
        );
        drop(read_big);
        shared.read((later, 1), 1, || read(&big, 6)).unwrap();
        assert_eq!(
            reads.get(),
            4,
            "and kept only while a response holds its file"
        );

        // A client polling again from the new end finds nothing there; the woken requests
        // still share their read.
        shared.read((later, 2), 2, || read(b"abc", 6)).unwrap();
        let nothing_new = || {
            reads.set(reads.get() + 1);
            let mut read = read_of(&Arc::new(tempfile::tempfile().unwrap()), 6);
            read.body = None;
            Ok(read)
        };
        shared.read((later, 3), 1, nothing_new).unwrap();
        shared.read((later, 3), 1, nothing_new).unwrap();
        let (_, bytes) = shared.read((later, 2), 1, || read(b"xyz", 6)).unwrap();
        assert_eq!((reads.get(), bytes.as_deref()), (6, Some(&b"abc"[..])));
        shared.clear();
        shared.read((later, 2), 1, || read(b"abc", 6)).unwrap();
        assert_eq!(reads.get(), 7, "a shape gone idle keeps nothing");
    }
}

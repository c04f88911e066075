//! One read of a shape's log shared by the long-polls that new data woke together, or that
//! arrive together at the log's end, and one framed batch shared by the server-sent-event
//! streams that new data woke together: a write that reaches a shape with thousands of
//! waiting clients costs one read, not thousands.

use std::fs::File;
use std::io;
use std::sync::{Mutex, Weak};

use bytes::Bytes;
use syncline_core::LogOffset;
use syncline_storage::{FileRange, ReadResult};

/// The last read after a wake, kept while a response still sends its body (boxed: most
/// shapes of a large server are idle, and hold none).
#[derive(Debug)]
pub struct SharedRead<K> {
    last: Mutex<Option<Box<Kept<K>>>>,
}

impl<K> Default for SharedRead<K> {
    fn default() -> Self {
        SharedRead {
            last: Mutex::new(None),
        }
    }
}

/// A read and the key it answered. Its file is held weakly: once every response that used it
/// is sent, the shape holds no descriptor.
#[derive(Debug)]
struct Kept<K> {
    key: K,
    body: Option<(Weak<File>, u64, u64)>,
    read: ReadResult,
}

impl<K: PartialEq> SharedRead<K> {
    /// The read for `key` (what the request saw of the shape's state when it woke, and the
    /// offset it reads from): the read another request made for an equal key, if its body is
    /// still open, else `read()` (kept for the next). A read made after that state was
    /// published is as fresh as one made now could be for the request: newer data publishes
    /// a newer state, which wakes the request again.
    pub fn read(
        &self,
        key: K,
        read: impl FnOnce() -> syncline_storage::Result<ReadResult>,
    ) -> syncline_storage::Result<ReadResult> {
        if let Some(shared) = self.take_shared(&key) {
            return Ok(shared);
        }
        let fresh = read()?;
        let body = fresh
            .body
            .as_ref()
            .map(|b| (std::sync::Arc::downgrade(&b.file), b.start, b.len));
        let mut kept = fresh.clone();
        kept.body = None;
        *self.last.lock().expect("shared read lock") = Some(Box::new(Kept {
            key,
            body,
            read: kept,
        }));
        Ok(fresh)
    }

    /// Forgets the kept read (a shape gone idle).
    pub fn clear(&self) {
        *self.last.lock().expect("shared read lock") = None;
    }

    fn take_shared(&self, key: &K) -> Option<ReadResult> {
        let last = self.last.lock().expect("shared read lock");
        let kept = last.as_ref().filter(|k| k.key == *key)?;
        let mut read = kept.read.clone();
        if let Some((file, start, len)) = &kept.body {
            read.body = Some(FileRange {
                file: file.upgrade()?,
                start: *start,
                len: *len,
            });
        }
        Some(read)
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
        let first = shared.read((seen, from), || read(5)).unwrap();
        let second = shared.read((seen, from), || read(6)).unwrap();
        assert_eq!(reads.get(), 1);
        assert_eq!(second.end_offset, Some(LogOffset::new(5, 0)));
        assert!(Arc::ptr_eq(
            &first.body.as_ref().unwrap().file,
            &second.body.as_ref().unwrap().file
        ));
        let newer = shared
            .read((Some(LogOffset::new(6, 0)), from), || read(6))
            .unwrap();
        assert_eq!(
            (reads.get(), newer.end_offset),
            (2, Some(LogOffset::new(6, 0)))
        );
        shared
            .read((seen, Some(LogOffset::new(3, 0))), || read(5))
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
            shared.read((seen, 1), || Ok(read_of(&file, 5))).unwrap();
        }
        let file = Arc::new(tempfile::tempfile().unwrap());
        let again = shared.read((seen, 1), || Ok(read_of(&file, 7))).unwrap();
        assert_eq!(again.end_offset, Some(LogOffset::new(7, 0)));
    }
}

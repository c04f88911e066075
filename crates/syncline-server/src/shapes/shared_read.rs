//! One read of a shape's log shared by the long-polls that new data woke together, or that
//! arrive together at the log's end: a write that reaches a shape with thousands of waiting
//! clients costs one read, not thousands.

use std::fs::File;
use std::sync::{Mutex, Weak};

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

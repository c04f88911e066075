//! A shape's log writer, shared by its snapshot task and the pipeline, and opened on first use:
//! a shape restored at start costs no file handles and no recovery work until a change reaches
//! it or a request needs to know where its log ends. Open writers are counted in [`Logs`]; past
//! its bound the least recently used idle ones are parked (their files closed, their state
//! kept: resuming reads nothing), and past the bound on parked ones the least recently used
//! are closed (cleanly: reopening them skips recovery), so idle shapes hold no file
//! descriptors and, once closed, no writer memory.

use std::sync::{Arc, Mutex, MutexGuard};

use syncline_core::LogOffset;
use syncline_storage::{StorageError, Writer};

use super::logs::Logs;

/// The writer of one shape's log, open or not yet.
#[derive(Debug)]
pub struct ShapeWriter {
    handle: String,
    logs: Arc<Logs>,
    /// Boxed: an idle shape's closed writer then takes a pointer's room, not a writer's.
    writer: Option<Box<Writer>>,
    /// The writer is parked ([`Writer::park`]) or, in a transaction, closed its files
    /// ([`Writer::close_files`]); counted parked in [`Logs`] either way.
    parked: bool,
    /// When it was last used, on the logs' clock.
    last_used: u64,
    /// The shape is being deleted: the log is never opened again.
    retired: bool,
}

/// A [`ShapeWriter`] behind a lock (the snapshot task and the pipeline take turns).
#[derive(Debug)]
pub struct SharedWriter(Mutex<ShapeWriter>);

impl SharedWriter {
    /// The writer of the log `handle` in `logs`: `writer` if it is already open, else opened
    /// (recovering the log if it was not closed cleanly) when first used.
    pub fn new(handle: &str, logs: Arc<Logs>, writer: Option<Writer>) -> SharedWriter {
        if writer.is_some() {
            logs.writer_opened(false);
        }
        SharedWriter(Mutex::new(ShapeWriter {
            handle: handle.to_owned(),
            last_used: logs.tick(),
            logs,
            writer: writer.map(Box::new),
            parked: false,
            retired: false,
        }))
    }

    /// Locks it.
    pub fn lock(&self) -> MutexGuard<'_, ShapeWriter> {
        self.0.lock().expect("shape writer lock")
    }
}

impl ShapeWriter {
    /// The writer, opening the log first if it is not open.
    pub fn get(&mut self) -> syncline_storage::Result<&mut Writer> {
        if self.retired {
            return Err(StorageError::ShapeNotFound(self.handle.clone()));
        }
        if self.writer.is_none() {
            self.writer = Some(Box::new(self.logs.open_writer(&self.handle)?));
            self.logs.writer_opened(false);
        }
        self.last_used = self.logs.tick();
        Ok(self.resumed().expect("opened above"))
    }

    /// The writer if it is open or parked (a parked one is counted open again: its next use
    /// resumes it).
    pub fn opened(&mut self) -> Option<&mut Writer> {
        self.resumed()
    }

    fn resumed(&mut self) -> Option<&mut Writer> {
        let writer = self.writer.as_mut()?;
        if self.parked {
            self.parked = false;
            self.logs.writer_opened(true);
        }
        Some(writer)
    }

    /// When the writer was last used (on the logs' clock), if it is open and not parked.
    pub fn open_since(&self) -> Option<u64> {
        (self.writer.is_some() && !self.parked).then_some(self.last_used)
    }

    /// When the writer was last used (on the logs' clock), if it is parked.
    pub fn parked_since(&self) -> Option<u64> {
        self.parked.then_some(self.last_used)
    }

    /// Parks the writer if it is open and idle (no transaction open, every commit durable):
    /// its files are closed with no I/O. With `busy_too`, a writer that is not idle has its
    /// buffers written out and its files closed instead, keeping its lock
    /// ([`Writer::close_files`]). Returns whether it parked.
    pub fn park(&mut self, busy_too: bool) -> bool {
        let Some(writer) = self.writer.as_mut().filter(|_| !self.parked) else {
            return false;
        };
        let parked = writer.park()
            || (busy_too
                && match writer.close_files() {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::warn!(handle = %self.handle, error = %e, "closing a shape log's files failed");
                        false
                    }
                });
        if !parked {
            return false;
        }
        self.parked = true;
        self.logs.writer_parked();
        true
    }

    /// Parks the writer ([`ShapeWriter::park`], busy or not) if more writers are open than
    /// their bound: for the pipeline after each append, so that one change reaching thousands
    /// of shapes holds only their locks, not their files.
    pub fn park_if_over_bound(&mut self) {
        if self.logs.open_writers_over() > 0 {
            self.park(true);
        }
    }

    /// Closes the writer for good, releasing the log's lock so the shape can be deleted.
    pub fn retire(&mut self) {
        self.take();
        self.retired = true;
    }

    /// Drops the writer; the next [`ShapeWriter::get`] reopens the log, which recovery cuts
    /// back to its last commit (how a transaction interrupted midway is undone).
    pub fn discard(&mut self) {
        self.take();
    }

    /// Closes the writer cleanly if it holds nothing unflushed (no transaction open, every
    /// commit durable), so reopening it skips recovery. Returns the durable offset it closed
    /// at, `None` if it was not open or not idle.
    pub fn close_if_idle(&mut self) -> syncline_storage::Result<Option<LogOffset>> {
        let idle = self
            .writer
            .as_ref()
            .is_some_and(|w| !w.in_transaction() && w.last_committed() == w.durable_offset());
        if !idle {
            return Ok(None);
        }
        let writer = self.take().expect("open");
        writer.close()
    }

    /// Closes the writer cleanly if open, discarding an open transaction (at shutdown).
    pub fn close(&mut self) -> syncline_storage::Result<()> {
        match self.take() {
            Some(writer) => writer.close().map(|_| ()),
            None => Ok(()),
        }
    }

    fn take(&mut self) -> Option<Writer> {
        let writer = self.writer.take();
        if writer.is_some() {
            self.logs.writer_closed(self.parked);
        }
        self.parked = false;
        writer.map(|w| *w)
    }
}

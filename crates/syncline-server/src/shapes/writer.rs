//! A shape's log writer, shared by its snapshot task and the pipeline, and opened on first use:
//! a shape restored at start costs no file handles and no recovery work until a change reaches
//! it or a request needs to know where its log ends. Writers are counted in [`Logs`] by
//! [`WriterState`]: past the bound on open ones the least recently used are held (their files
//! closed, their lock kept: going on opens only what they write), past the bound on held ones
//! the least recently used idle ones are parked (their lock released too, their state kept:
//! resuming checks the log but reads nothing), and past the bound on parked ones the least
//! recently used are closed (cleanly: reopening them skips recovery), so idle shapes hold no
//! file descriptors and, once closed, no writer memory.

use std::sync::{Arc, Mutex, MutexGuard};

use syncline_core::LogOffset;
use syncline_storage::{StorageError, Writer};

use super::logs::{Logs, WriterState};

/// The writer of one shape's log, open or not yet.
#[derive(Debug)]
pub struct ShapeWriter {
    handle: String,
    logs: Arc<Logs>,
    /// Boxed: an idle shape's closed writer then takes a pointer's room, not a writer's.
    writer: Option<Box<Writer>>,
    /// What the writer holds, if it exists.
    state: WriterState,
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
            logs.writer_moved(None, Some(WriterState::Open));
        }
        SharedWriter(Mutex::new(ShapeWriter {
            handle: handle.to_owned(),
            last_used: logs.tick(),
            logs,
            writer: writer.map(Box::new),
            state: WriterState::Open,
            retired: false,
        }))
    }

    /// Locks it.
    pub fn lock(&self) -> MutexGuard<'_, ShapeWriter> {
        self.0.lock().expect("shape writer lock")
    }
}

impl ShapeWriter {
    /// The handle of the shape whose log this is.
    pub fn handle(&self) -> &str {
        &self.handle
    }

    /// The writer, opening the log first if it is not open.
    pub fn get(&mut self) -> syncline_storage::Result<&mut Writer> {
        if self.retired {
            return Err(StorageError::ShapeNotFound(self.handle.clone()));
        }
        if self.writer.is_none() {
            self.writer = Some(Box::new(self.logs.open_writer(&self.handle)?));
            self.state = WriterState::Open;
            self.logs.writer_moved(None, Some(WriterState::Open));
        }
        self.last_used = self.logs.tick();
        Ok(self.resumed().expect("opened above"))
    }

    /// The writer if it exists (a held or parked one is counted open again: its next use
    /// resumes it).
    pub fn opened(&mut self) -> Option<&mut Writer> {
        self.resumed()
    }

    fn resumed(&mut self) -> Option<&mut Writer> {
        let writer = self.writer.as_mut()?;
        if self.state != WriterState::Open {
            self.logs
                .writer_moved(Some(self.state), Some(WriterState::Open));
            self.state = WriterState::Open;
        }
        Some(writer)
    }

    /// When the writer was last used (on the logs' clock), if it exists and is in `state`.
    pub fn in_state_since(&self, state: WriterState) -> Option<u64> {
        (self.writer.is_some() && self.state == state).then_some(self.last_used)
    }

    /// Holds the writer if it is open, busy or idle: its files are closed, its lock kept
    /// ([`Writer::close_files`]). Returns whether it was held.
    pub fn hold(&mut self) -> bool {
        let Some(writer) = self
            .writer
            .as_mut()
            .filter(|_| self.state == WriterState::Open)
        else {
            return false;
        };
        if let Err(e) = writer.close_files() {
            tracing::warn!(handle = %self.handle, error = %e, "closing a shape log's files failed");
            return false;
        }
        self.move_to(WriterState::Held);
        true
    }

    /// Parks the writer if it is open or held and idle (no transaction open, every commit
    /// durable): its files are closed and its lock released, with no I/O. Returns whether it
    /// parked.
    pub fn park(&mut self) -> bool {
        let Some(writer) = self
            .writer
            .as_mut()
            .filter(|_| self.state != WriterState::Parked)
        else {
            return false;
        };
        if !writer.park() {
            return false;
        }
        self.move_to(WriterState::Parked);
        true
    }

    fn move_to(&mut self, state: WriterState) {
        self.logs.writer_moved(Some(self.state), Some(state));
        self.state = state;
    }

    /// Holds the writer ([`ShapeWriter::hold`]) if more writers are open than their bound:
    /// for the pipeline after each use, so that one change reaching thousands of shapes holds
    /// only their locks, not their files.
    pub fn hold_if_over_bound(&mut self) {
        if self.logs.over(WriterState::Open) > 0 {
            self.hold();
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
            self.logs.writer_moved(Some(self.state), None);
        }
        writer.map(|w| *w)
    }
}

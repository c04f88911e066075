//! A shape's log writer, shared by its snapshot task and the pipeline, and opened on first use:
//! a shape restored at start costs no file handles and no recovery work until a change reaches
//! it or a request needs to know where its log ends.

use std::sync::{Arc, Mutex, MutexGuard};

use syncline_storage::{StorageError, Store, Writer, WriterOptions};

/// The writer of one shape's log, open or not yet.
#[derive(Debug)]
pub struct ShapeWriter {
    handle: String,
    writer: Option<Writer>,
    /// The shape is being deleted: the log is never opened again.
    retired: bool,
}

/// A [`ShapeWriter`] behind a lock (the snapshot task and the pipeline take turns).
#[derive(Debug, Clone)]
pub struct SharedWriter(Arc<Mutex<ShapeWriter>>);

impl SharedWriter {
    /// The writer of a shape just created.
    pub fn open(handle: &str, writer: Writer) -> SharedWriter {
        SharedWriter(Arc::new(Mutex::new(ShapeWriter {
            handle: handle.to_owned(),
            writer: Some(writer),
            retired: false,
        })))
    }

    /// The writer of a stored shape, opened (recovering the log) when first used.
    pub fn closed(handle: &str) -> SharedWriter {
        SharedWriter(Arc::new(Mutex::new(ShapeWriter {
            handle: handle.to_owned(),
            writer: None,
            retired: false,
        })))
    }

    /// Locks it.
    pub fn lock(&self) -> MutexGuard<'_, ShapeWriter> {
        self.0.lock().expect("shape writer lock")
    }
}

impl ShapeWriter {
    /// The writer, opening the log first if it is not open.
    pub fn get(
        &mut self,
        store: &Store,
        options: &WriterOptions,
    ) -> syncline_storage::Result<&mut Writer> {
        if self.retired {
            return Err(StorageError::ShapeNotFound(self.handle.clone()));
        }
        if self.writer.is_none() {
            self.writer = Some(store.open_writer(&self.handle, options)?);
        }
        Ok(self.writer.as_mut().expect("opened above"))
    }

    /// The writer if it is open.
    pub fn opened(&mut self) -> Option<&mut Writer> {
        self.writer.as_mut()
    }

    /// Closes the writer for good, releasing the log's lock so the shape can be deleted.
    pub fn retire(&mut self) {
        self.writer = None;
        self.retired = true;
    }

    /// Closes the writer; the next [`ShapeWriter::get`] reopens the log, which recovery cuts
    /// back to its last commit (how a transaction interrupted midway is undone).
    pub fn close(&mut self) {
        self.writer = None;
    }
}

//! A file a writer keeps open only while it works: opened (for reading and writing) on first
//! use, released when the writer parks, so a parked writer holds no descriptor.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{io_err, Result};

/// An existing file, open or not.
#[derive(Debug)]
pub(crate) struct LazyFile {
    path: PathBuf,
    file: OnceLock<File>,
}

impl LazyFile {
    /// The file at `path`, not opened yet.
    pub fn new(path: PathBuf) -> LazyFile {
        LazyFile {
            path,
            file: OnceLock::new(),
        }
    }

    /// The file at `path`, already open in `file`.
    pub fn opened(path: PathBuf, file: File) -> LazyFile {
        LazyFile {
            path,
            file: OnceLock::from(file),
        }
    }

    /// The open file, opening it first if needed.
    pub fn get(&self) -> Result<&File> {
        if let Some(file) = self.file.get() {
            return Ok(file);
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(io_err(&self.path))?;
        Ok(self.file.get_or_init(|| file))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file was renamed (or its directory was) to `path`: found there from now on.
    pub fn move_to(&mut self, path: PathBuf) {
        self.path = path;
    }

    /// Whether the file is open now.
    pub fn is_open(&self) -> bool {
        self.file.get().is_some()
    }

    /// Closes the file if it is open; the next [`LazyFile::get`] opens it again.
    pub fn release(&mut self) {
        self.file.take();
    }
}

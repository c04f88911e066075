//! The writer's lock on a shape: an exclusive `flock` on its open `shape.meta`, held in this or
//! another process by at most one writer.

use std::fs::{File, OpenOptions};
use std::path::Path;

use crate::error::{io_err, Result, StorageError};
use crate::format::META_FILE;
use crate::io::try_lock;

/// Takes the shape's exclusive writer lock: `shape.meta`, open and locked.
pub(crate) fn lock_only(dir: &Path, shape: &str) -> Result<File> {
    let path = dir.join(META_FILE);
    let file = match OpenOptions::new().read(true).write(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StorageError::ShapeNotFound(shape.into()))
        }
        Err(e) => return Err(io_err(&path)(e)),
    };
    if !try_lock(&file).map_err(io_err(&path))? {
        return Err(StorageError::WriterBusy(shape.into()));
    }
    Ok(file)
}

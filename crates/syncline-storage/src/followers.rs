//! Followers of a store: processes that read its logs without writing them (a standby or a
//! read replica beside the writer) each hold a locked file in the root's `.followers/`
//! directory while they follow. A writer that finds one writes every durable byte to the chunk
//! files at each flush (see [`crate::Writer::set_deferring`]): a follower sees only what the
//! files hold, and no request of its reaches the writer to ask for more.

use std::fs::{self, File, OpenOptions};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{io_err, Result};
use crate::io::try_lock;

/// The directory of the followers' files in a storage root (a dot name: never a shape's).
const FOLLOWERS_DIR: &str = ".followers";

/// A follower's mark: its file, locked for as long as the mark lives, removed when dropped
/// (with the directory, if it is the last). A follower that dies leaves an unlocked file,
/// which [`followed`] removes.
#[derive(Debug)]
pub struct FollowerMark {
    path: PathBuf,
    /// Open, holding the lock.
    _file: File,
}

impl Drop for FollowerMark {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
        if let Some(dir) = self.path.parent() {
            // Fails, harmlessly, while another follower's file is there.
            let _ = fs::remove_dir(dir);
        }
    }
}

/// Marks this process as a follower of the store at `root` until the mark is dropped.
pub(crate) fn mark(root: &Path) -> Result<FollowerMark> {
    let dir = root.join(FOLLOWERS_DIR);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let path = dir.join(format!("{}-{nanos}", std::process::id()));
    let mut attempts = 0;
    let file = loop {
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => break file,
            // The last other follower removed the directory meanwhile.
            Err(e) if e.kind() == ErrorKind::NotFound && attempts < 3 => attempts += 1,
            Err(e) => return Err(io_err(&path)(e)),
        }
    };
    assert!(
        try_lock(&file).map_err(io_err(&path))?,
        "a new follower file is nobody else's"
    );
    Ok(FollowerMark { path, _file: file })
}

/// Whether a live follower marks the store at `root`; removes the files of dead ones.
pub(crate) fn followed(root: &Path) -> Result<bool> {
    let dir = root.join(FOLLOWERS_DIR);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_err(&dir)(e)),
    };
    let mut found = false;
    for entry in entries {
        let path = entry.map_err(io_err(&dir))?.path();
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err(&path)(e)),
        };
        if try_lock(&file).map_err(io_err(&path))? {
            // Nobody holds it: its follower is gone.
            let _ = fs::remove_file(&path);
        } else {
            found = true;
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_is_followed_while_a_mark_lives() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!followed(dir.path()).unwrap());
        let first = mark(dir.path()).unwrap();
        let second = mark(dir.path()).unwrap();
        assert!(followed(dir.path()).unwrap());
        drop(first);
        assert!(followed(dir.path()).unwrap());
        drop(second);
        assert!(!followed(dir.path()).unwrap());
        assert!(
            !dir.path().join(FOLLOWERS_DIR).exists(),
            "the last one removes the directory"
        );
    }

    #[test]
    fn the_file_of_a_dead_follower_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let stale = dir.path().join(FOLLOWERS_DIR).join("1-1");
        fs::create_dir_all(stale.parent().unwrap()).unwrap();
        fs::write(&stale, b"").unwrap();
        assert!(!followed(dir.path()).unwrap());
        assert!(!stale.exists());
    }
}

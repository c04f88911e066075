//! The writer's only way to change files, so every write boundary can be observed and stopped.
//!
//! Each mutating system call (write, fdatasync, create, rename, truncate, remove, directory
//! fsync) is one *boundary*. A [`FaultPlan`] counts boundaries, can make the writer fail at a
//! chosen one (a crash at that point), and remembers what reached the disk so that
//! [`FaultPlan::simulate_power_loss`] can throw away exactly what was never synced.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{io_err, Result};
use crate::num::{to_u64, to_usize};

/// Counts the writer's write boundaries, optionally stops it at one, and tracks unsynced data.
#[derive(Debug, Default)]
pub struct FaultPlan {
    stop_at: Option<u64>,
    passed: AtomicU64,
    files: Mutex<HashMap<PathBuf, Tracked>>,
}

#[derive(Debug, Clone, Copy)]
struct Tracked {
    len: u64,
    synced_len: u64,
    dir_synced: bool,
}

impl FaultPlan {
    /// A plan that never fails; use it to count boundaries and to simulate power loss.
    pub fn unlimited() -> Arc<Self> {
        Arc::new(FaultPlan::default())
    }

    /// A plan under which boundary number `boundary` (0-based) and every later one fail.
    pub fn stop_at(boundary: u64) -> Arc<Self> {
        Arc::new(FaultPlan {
            stop_at: Some(boundary),
            ..FaultPlan::default()
        })
    }

    /// How many boundaries were reached so far (including failed ones).
    pub fn boundaries(&self) -> u64 {
        self.passed.load(Ordering::SeqCst)
    }

    /// Makes the files look as after a power cut: files created since their directory was last
    /// synced disappear, and of the bytes written to each file after its last sync, `pick(n)`
    /// (at most `n`) are affected: a prefix of that length is kept and the rest lost, or, with
    /// `hole`, all are kept but the first `pick(n)` read as zeros (later pages reached the disk,
    /// earlier ones did not). A rename counts as reached the disk (its other outcome is the state
    /// before it).
    pub fn simulate_power_loss(
        &self,
        hole: bool,
        mut pick: impl FnMut(u64) -> u64,
    ) -> io::Result<()> {
        // In path order, so that the same `pick` always hits the same files.
        let mut files: Vec<(PathBuf, Tracked)> = self.files.lock().unwrap().drain().collect();
        files.sort_by(|a, b| a.0.cmp(&b.0));
        for (path, t) in files {
            if !path.exists() {
                continue;
            }
            if !t.dir_synced {
                fs::remove_file(&path)?;
                continue;
            }
            let unsynced = t.len.saturating_sub(t.synced_len);
            let n = pick(unsynced).min(unsynced);
            let file = OpenOptions::new().write(true).open(&path)?;
            if hole {
                file.set_len(t.len)?;
                file.write_all_at(&vec![0u8; to_usize(n)], t.synced_len)?;
            } else {
                file.set_len(t.synced_len + n)?;
            }
        }
        Ok(())
    }

    fn boundary(&self) -> io::Result<()> {
        let n = self.passed.fetch_add(1, Ordering::SeqCst);
        match self.stop_at {
            Some(stop) if n >= stop => Err(io::Error::other(format!(
                "injected fault at write boundary {n}"
            ))),
            _ => Ok(()),
        }
    }

    fn track(&self, path: &Path, update: impl FnOnce(&mut Tracked)) {
        let mut files = self.files.lock().unwrap();
        let t = files.entry(path.to_path_buf()).or_insert_with(|| {
            let len = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            Tracked {
                len,
                synced_len: len,
                dir_synced: true,
            }
        });
        update(t);
    }
}

/// The writer's file operations, each one a boundary of the optional [`FaultPlan`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Io {
    plan: Option<Arc<FaultPlan>>,
}

impl Io {
    pub fn new(plan: Option<Arc<FaultPlan>>) -> Self {
        Io { plan }
    }

    fn boundary(&self, path: &Path) -> Result<()> {
        match &self.plan {
            Some(plan) => plan.boundary().map_err(io_err(path)),
            None => Ok(()),
        }
    }

    fn track(&self, path: &Path, update: impl FnOnce(&mut Tracked)) {
        if let Some(plan) = &self.plan {
            plan.track(path, update);
        }
    }

    /// Creates a new, empty file (it must not exist) open for reading and writing.
    pub fn create(&self, path: &Path) -> Result<File> {
        self.boundary(path)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(io_err(path))?;
        self.track(path, |t| {
            *t = Tracked {
                len: 0,
                synced_len: 0,
                dir_synced: false,
            }
        });
        Ok(file)
    }

    /// Writes all of `buf` at `pos`.
    pub fn write_at(&self, file: &File, path: &Path, pos: u64, buf: &[u8]) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        self.boundary(path)?;
        file.write_all_at(buf, pos).map_err(io_err(path))?;
        let end = pos + to_u64(buf.len());
        self.track(path, |t| t.len = t.len.max(end));
        Ok(())
    }

    /// `fdatasync`: the file's data and the metadata needed to read it back are durable.
    pub fn sync_data(&self, file: &File, path: &Path) -> Result<()> {
        self.boundary(path)?;
        file.sync_data().map_err(io_err(path))?;
        self.track(path, |t| t.synced_len = t.len);
        Ok(())
    }

    /// `fdatasync` of several files, each one a boundary. Writeback of every file is started
    /// before waiting on any, so that their data and metadata reach the disk together (on ext4,
    /// in one journal commit instead of one per file).
    pub fn sync_data_all(&self, files: &[(&File, &Path)]) -> Result<()> {
        if files.len() > 1 {
            for (file, _) in files {
                start_writeback(file);
            }
        }
        for (file, path) in files {
            self.sync_data(file, path)?;
        }
        Ok(())
    }

    /// Sets a file's size to `len` bytes without syncing (a larger size reads as zeros).
    pub fn set_len(&self, file: &File, path: &Path, len: u64) -> Result<()> {
        self.boundary(path)?;
        file.set_len(len).map_err(io_err(path))?;
        self.track(path, |t| {
            t.len = t.len.min(len);
            t.synced_len = t.synced_len.min(len);
        });
        Ok(())
    }

    /// Cuts a file to `len` bytes and syncs it.
    pub fn truncate(&self, file: &File, path: &Path, len: u64) -> Result<()> {
        self.set_len(file, path, len)?;
        self.sync_data(file, path)
    }

    /// `fsync` of a directory: entries created, renamed or removed in it are durable.
    pub fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.boundary(dir)?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(dir))?;
        if let Some(plan) = &self.plan {
            for (path, t) in plan.files.lock().unwrap().iter_mut() {
                if path.parent() == Some(dir) {
                    t.dir_synced = true;
                }
            }
        }
        Ok(())
    }

    /// Atomically renames `from` over `to` (same directory).
    pub fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.boundary(from)?;
        fs::rename(from, to).map_err(io_err(from))?;
        if let Some(plan) = &self.plan {
            let mut files = plan.files.lock().unwrap();
            if let Some(t) = files.remove(from) {
                files.insert(
                    to.to_path_buf(),
                    Tracked {
                        dir_synced: true,
                        ..t
                    },
                );
            }
            // A directory renamed: the files in it move with it, as durable as they were.
            let inside: Vec<PathBuf> = files
                .keys()
                .filter(|p| p.starts_with(from))
                .cloned()
                .collect();
            for path in inside {
                let t = files.remove(&path).expect("listed just now");
                let moved = to.join(path.strip_prefix(from).expect("inside the directory"));
                files.insert(moved, t);
            }
        }
        Ok(())
    }

    /// Removes a file.
    pub fn remove_file(&self, path: &Path) -> Result<()> {
        self.boundary(path)?;
        fs::remove_file(path).map_err(io_err(path))?;
        if let Some(plan) = &self.plan {
            plan.files.lock().unwrap().remove(path);
        }
        Ok(())
    }
}

/// Takes an exclusive `flock` on `file` without waiting: `Ok(false)` if another open file
/// (in this or another process) holds it.
pub(crate) fn try_lock(file: &File) -> io::Result<bool> {
    // SAFETY: flock on a file descriptor we own; no memory is involved.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        return Ok(false);
    }
    Err(err)
}

/// Threads that sync at once: enough concurrent `fdatasync`s that the file system commits them
/// together.
const SYNC_THREADS_MAX: usize = 64;

/// Runs `task(0..count)`, each index once, from up to [`SYNC_THREADS_MAX`] threads (this one
/// included): for syncs of many files, which the file system then commits together (on ext4
/// concurrent syncs share journal commits and device flushes).
pub(crate) fn run_concurrently(count: usize, task: impl Fn(usize) + Sync) {
    let next = AtomicU64::new(0);
    let run = || loop {
        let n = to_usize(next.fetch_add(1, Ordering::Relaxed));
        if n >= count {
            return;
        }
        task(n);
    };
    std::thread::scope(|scope| {
        for _ in 1..count.min(SYNC_THREADS_MAX) {
            scope.spawn(run);
        }
        run();
    });
}

/// Starts writing a file's dirty pages to the disk without waiting (`sync_file_range` with
/// `SYNC_FILE_RANGE_WRITE`). Only a hint that changes nothing a crash could observe (unsynced
/// bytes may reach the disk at any time anyway); an I/O error shows at the `fdatasync` after it.
fn start_writeback(file: &File) {
    // SAFETY: sync_file_range on a descriptor we own; no memory is involved.
    unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
}

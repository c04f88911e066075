//! Per-shape metadata on disk: the handle, the definition and the snapshot's position, so a
//! restarted server resumes every shape without redoing its snapshot. The format and how it
//! stays consistent with the shape logs are in `docs/storage-format.md` ("Shape metadata").

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use syncline_core::{PgSnapshot, RelationDesc};

use super::definition::ShapeDefinition;

/// The metadata format this build writes. Version 2 marks logs whose snapshot fills chunks of
/// its own (served at Electric's `0_k` offsets); a restart drops version 1 shapes, whose clients
/// hold offsets of the older layout, and they start again.
pub const META_VERSION: u32 = 2;

/// Files written before the version field existed are version 1.
fn unversioned() -> u32 {
    1
}

/// What is kept about a shape beside its log.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShapeMeta {
    /// The format version ([`META_VERSION`]).
    #[serde(default = "unversioned")]
    pub version: u32,
    /// The shape's handle (also its log's id in the store).
    pub handle: String,
    /// The definition.
    pub definition: ShapeDefinition,
    /// The table as it was when the shape was made: a restart drops the shape if its own
    /// columns changed meanwhile.
    #[serde(default)]
    pub relation: Option<RelationDesc>,
    /// `pg_current_snapshot()` of the initial snapshot in text form, once taken: replicated
    /// transactions it already saw are skipped, also after a restart.
    pub snapshot: Option<String>,
    /// The initial snapshot is complete and durable in the log: a restart resumes the shape
    /// (else it drops it, and its clients start again).
    #[serde(default)]
    pub snapshot_complete: bool,
}

impl ShapeMeta {
    /// The metadata of a shape whose initial snapshot, taken at `snapshot`, is complete.
    pub fn complete(
        handle: &str,
        definition: &ShapeDefinition,
        relation: &RelationDesc,
        snapshot: &PgSnapshot,
    ) -> ShapeMeta {
        ShapeMeta {
            version: META_VERSION,
            handle: handle.to_owned(),
            definition: definition.clone(),
            relation: Some(relation.clone()),
            snapshot: Some(snapshot.to_string()),
            snapshot_complete: true,
        }
    }

    /// The parsed snapshot, if recorded.
    pub fn pg_snapshot(&self) -> Option<PgSnapshot> {
        self.snapshot.as_deref().and_then(|s| s.parse().ok())
    }
}

/// One change to the value sets a subquery shape's log reflects, kept in `<handle>.views`
/// beside its metadata (JSON lines, appended and synced before the log holds the change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewRecord {
    /// The log offset (TX, OP) of the message the change belongs to: records past the log's
    /// last commit are dropped on restart (the log never got that far).
    pub at: (u64, u64),
    /// Which subquery of the where clause.
    pub sub: usize,
    /// Tuples that joined the set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add: Vec<Vec<Option<String>>>,
    /// Tuples that left it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<Vec<Option<String>>>,
    /// Once the log holds the change, it holds the effect of every transaction committed at or
    /// before this LSN, written or not (0: none beyond the log's own commits). Transactions
    /// a change's move followed are not applied again with the sets after it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub through: u64,
    /// The snapshot of the move-in the change belongs to: the log holds the effect of every
    /// transaction it saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen: Option<String>,
}

fn is_zero(lsn: &u64) -> bool {
    *lsn == 0
}

/// The directory of metadata files, one `<handle>.json` per shape. Read-only until this
/// server holds the writer's lock: then saving and removing are refused.
#[derive(Debug)]
pub struct MetaDir {
    dir: PathBuf,
    writable: AtomicBool,
}

impl MetaDir {
    /// Opens the directory (which must exist) read-only.
    pub fn open_read_only(dir: impl Into<PathBuf>) -> MetaDir {
        MetaDir {
            dir: dir.into(),
            writable: AtomicBool::new(false),
        }
    }

    /// Whether metadata may be written, or only read.
    pub fn set_writable(&self, writable: bool) {
        self.writable.store(writable, Ordering::SeqCst);
    }

    fn check_writable(&self) -> io::Result<()> {
        if self.writable.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "shape metadata is read-only: this server does not hold the writer's lock",
            ))
        }
    }

    /// Writes the metadata of a shape whose snapshot completed, durably: a temporary file,
    /// synced, renamed over the old one, then the directory synced. (A shape has no metadata
    /// before its snapshot completes: a restart removes its log.)
    pub fn save(&self, meta: &ShapeMeta) -> io::Result<()> {
        assert!(
            meta.snapshot_complete,
            "only a complete snapshot's metadata is saved"
        );
        self.check_writable()?;
        let path = self.path(&meta.handle);
        let tmp = path.with_extension("json.tmp");
        let mut file = File::create(&tmp)?;
        file.write_all(&serde_json::to_vec(meta)?)?;
        file.sync_all()?;
        fs::rename(&tmp, &path)?;
        File::open(&self.dir)?.sync_all()
    }

    /// Appends `records` to the shape's view file and syncs it (and the directory when the
    /// file is new).
    pub fn append_views(&self, handle: &str, records: &[ViewRecord]) -> io::Result<()> {
        self.check_writable()?;
        let path = self.views_path(handle);
        let new = !path.exists();
        let mut lines = Vec::new();
        for record in records {
            serde_json::to_writer(&mut lines, record)?;
            lines.push(b'\n');
        }
        let mut file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        file.write_all(&lines)?;
        file.sync_data()?;
        if new {
            File::open(&self.dir)?.sync_all()?;
        }
        Ok(())
    }

    /// The shape's view records in the order written; a line cut short by a crash ends them.
    pub fn load_views(&self, handle: &str) -> io::Result<Vec<ViewRecord>> {
        let bytes = match fs::read(self.views_path(handle)) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        Ok(bytes
            .split(|&b| b == b'\n')
            .map_while(|line| serde_json::from_slice(line).ok())
            .collect())
    }

    /// Replaces the shape's view file with `records` (durably: a temporary file, synced,
    /// renamed over it).
    pub fn rewrite_views(&self, handle: &str, records: &[ViewRecord]) -> io::Result<()> {
        self.check_writable()?;
        let path = self.views_path(handle);
        let tmp = path.with_extension("views.tmp");
        let mut lines = Vec::new();
        for record in records {
            serde_json::to_writer(&mut lines, record)?;
            lines.push(b'\n');
        }
        let mut file = File::create(&tmp)?;
        file.write_all(&lines)?;
        file.sync_all()?;
        fs::rename(&tmp, &path)?;
        File::open(&self.dir)?.sync_all()
    }

    fn views_path(&self, handle: &str) -> PathBuf {
        self.dir.join(format!("{handle}.views"))
    }

    /// Removes a shape's metadata and view file (durably).
    pub fn remove(&self, handle: &str) -> io::Result<()> {
        self.check_writable()?;
        match fs::remove_file(self.views_path(handle)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        match fs::remove_file(self.path(handle)) {
            Ok(()) => File::open(&self.dir)?.sync_all(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Every stored shape's metadata (removing what a cut-short save left, unless read-only);
    /// files that do not parse are logged and skipped (their shapes are gone), and removed
    /// unless read-only. Metadata of a newer format is an error: a downgrade must not drop shapes it
    /// does not understand.
    pub fn load_all(&self) -> io::Result<Vec<ShapeMeta>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            match path.extension().and_then(|e| e.to_str()) {
                Some("json") => {}
                // A save cut short by a crash (the file it was replacing is intact), or, read-only,
                // one the writer is making now.
                Some("tmp") => {
                    if self.writable.load(Ordering::SeqCst) {
                        fs::remove_file(&path)?;
                    }
                    continue;
                }
                _ => continue,
            }
            match fs::read(&path).map(|b| serde_json::from_slice::<ShapeMeta>(&b)) {
                Ok(Ok(meta)) if meta.version > META_VERSION => {
                    return Err(io::Error::other(format!(
                        "{} has metadata version {}; this Syncline reads version {META_VERSION} and older",
                        path.display(),
                        meta.version
                    )))
                }
                Ok(Ok(meta)) => out.push(meta),
                // Versions before be04c16 (2026-11-28) saved a new shape's metadata unsynced,
                // so a crash could tear it: that shape's snapshot never completed, and the
                // writer removes the file (restore then removes the log left without metadata).
                Ok(Err(e)) if self.writable.load(Ordering::SeqCst) => {
                    tracing::warn!(path = %path.display(), error = %e, "unreadable shape metadata removed");
                    fs::remove_file(&path)?;
                }
                Ok(Err(e)) => {
                    tracing::warn!(path = %path.display(), error = %e, "unreadable shape metadata; skipped")
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "unreadable shape metadata; skipped")
                }
            }
        }
        Ok(out)
    }

    fn path(&self, handle: &str) -> PathBuf {
        self.dir.join(format!("{handle}.json"))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

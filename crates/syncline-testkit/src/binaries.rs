//! Finding the Postgres server binaries on this machine.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory holding `initdb`, `postgres` and `pg_recvlogical`.
///
/// Order: `$SYNCLINE_PG_BINDIR`, the newest `/usr/lib/postgresql/*/bin`, then `pg_config --bindir`.
/// (Debian's `pg_config` may belong to the client package and point at a directory without a
/// server, so the server directories are tried first.)
pub fn pg_bindir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SYNCLINE_PG_BINDIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = newest_debian_bindir() {
        return dir;
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    panic!(
        "no Postgres server binaries found: install Debian's `postgresql` package \
         (apt-get install postgresql) or set SYNCLINE_PG_BINDIR"
    );
}

fn newest_debian_bindir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(Path::new("/usr/lib/postgresql"))
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, dir)| dir)
}

//! One private Postgres cluster: created from a per-machine template, started, and removed.

use std::fs;
use std::io;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::binaries::pg_bindir;
use crate::tls::TestCa;

/// How long a postmaster may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest a statement of a [`PgCluster::connect`] client may run.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a stopping postmaster may take before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`PgCluster::stop`] waits for the postmaster to exit (a smart shutdown waits for
/// every client session to end, a fast one for walsenders to be acknowledged).
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(60);
/// Attempts to start on a free port (another process may take the port between probe and bind).
const START_ATTEMPTS_MAX: u32 = 3;

/// Server settings for tests: logical decoding on, durability off (tests never survive a crash
/// of the machine), enough senders and slots for tests that open several streams.
const SERVER_SETTINGS: &[(&str, &str)] = &[
    ("listen_addresses", "127.0.0.1"),
    ("wal_level", "logical"),
    ("max_wal_senders", "20"),
    ("max_replication_slots", "20"),
    ("max_connections", "100"),
    ("fsync", "off"),
    ("synchronous_commit", "off"),
    ("full_page_writes", "off"),
    ("shared_buffers", "128MB"),
    ("max_wal_size", "2GB"),
    ("log_min_messages", "warning"),
    ("logging_collector", "off"),
];

/// How to shut a cluster down: the modes of `pg_ctl stop -m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownMode {
    /// Refuse new sessions, wait for every client session to end, then shut down (SIGTERM).
    Smart,
    /// End every session (their transactions roll back), let walsenders finish, then shut
    /// down cleanly (SIGINT; `pg_ctl stop`'s default).
    Fast,
    /// Quit at once without a checkpoint; the next start runs crash recovery (SIGQUIT).
    Immediate,
}

impl ShutdownMode {
    fn signal(self) -> libc::c_int {
        match self {
            ShutdownMode::Smart => libc::SIGTERM,
            ShutdownMode::Fast => libc::SIGINT,
            ShutdownMode::Immediate => libc::SIGQUIT,
        }
    }
}

/// How a cluster differs from the default one.
#[derive(Debug, Clone, Default)]
pub struct ClusterOptions {
    tls: bool,
    hba: Option<String>,
}

impl ClusterOptions {
    /// `ssl=on`, with a certificate for `localhost` (its only name) signed by a CA made for the
    /// cluster ([`PgCluster::ca_cert`]).
    pub fn tls(mut self) -> ClusterOptions {
        self.tls = true;
        self
    }

    /// These `pg_hba.conf` lines instead of the default ones (trust for every user and
    /// database, on the socket and on 127.0.0.1, for sessions and replication).
    pub fn hba(mut self, lines: &str) -> ClusterOptions {
        self.hba = Some(lines.to_owned());
        self
    }
}

/// A private Postgres cluster, stopped and deleted when dropped.
///
/// The superuser is `postgres` with trust authentication; the default database is `postgres`.
/// [`PgCluster::stop`] and [`PgCluster::restart`] take it down and bring it back in place: same
/// data directory, same port.
pub struct PgCluster {
    /// The postmaster, while it runs.
    child: Option<Child>,
    port: u16,
    bindir: PathBuf,
    root: TempDir,
    /// Settings beyond [`SERVER_SETTINGS`], from the [`ClusterOptions`].
    settings: Vec<(String, String)>,
    /// The CA that signed the server certificate, with TLS on.
    ca: Option<TestCa>,
}

impl PgCluster {
    /// Starts a new cluster. Blocks for about a second; call it before or outside async work.
    pub fn start() -> PgCluster {
        PgCluster::start_with(&ClusterOptions::default())
    }

    /// Starts a new cluster with `options`. Blocks like [`PgCluster::start`].
    pub fn start_with(options: &ClusterOptions) -> PgCluster {
        let bindir = pg_bindir();
        let template = template_dir(&bindir);
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS_MAX {
            match Self::start_once(&bindir, template, options) {
                Ok(cluster) => return cluster,
                Err(e) => last_error = e,
            }
        }
        panic!("could not start a private Postgres cluster: {last_error}");
    }

    fn start_once(
        bindir: &Path,
        template: &Path,
        options: &ClusterOptions,
    ) -> Result<PgCluster, String> {
        let root = tempfile::Builder::new()
            .prefix("syncline-pg-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let data = root.path().join("data");
        run(Command::new("cp").arg("-a").arg(template).arg(&data))?;
        give_to_server_user(root.path())?;
        let port = free_port().map_err(|e| e.to_string())?;
        fs::File::create(root.path().join("server.log")).map_err(|e| e.to_string())?;
        give_to_server_user(&root.path().join("server.log"))?;
        let mut settings = Vec::new();
        let mut ca = None;
        if options.tls {
            let made = TestCa::new(root.path(), "ca");
            let server = made.issue(root.path(), "server", "localhost");
            give_to_server_user(&server.key)?;
            fs::set_permissions(&server.key, fs::Permissions::from_mode(0o600))
                .map_err(|e| e.to_string())?;
            settings.push(("ssl".to_owned(), "on".to_owned()));
            settings.push(("ssl_cert_file".to_owned(), path_setting(&server.cert)));
            settings.push(("ssl_key_file".to_owned(), path_setting(&server.key)));
            ca = Some(made);
        }
        if let Some(lines) = &options.hba {
            let hba = root.path().join("pg_hba.conf");
            fs::write(&hba, lines).map_err(|e| e.to_string())?;
            give_to_server_user(&hba)?;
            settings.push(("hba_file".to_owned(), path_setting(&hba)));
        }
        let mut cluster = PgCluster {
            child: None,
            port,
            bindir: bindir.to_owned(),
            root,
            settings,
            ca,
        };
        cluster.spawn_postmaster()?;
        Ok(cluster)
    }

    /// Starts the postmaster on the data directory and port and waits until it accepts
    /// connections.
    fn spawn_postmaster(&mut self) -> Result<(), String> {
        assert!(self.child.is_none(), "the postmaster is running already");
        let log = fs::OpenOptions::new()
            .append(true)
            .open(self.root.path().join("server.log"))
            .map_err(|e| e.to_string())?;
        let mut cmd = Command::new(self.bindir.join("postgres"));
        cmd.arg("-D")
            .arg(self.data_dir())
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(self.root.path());
        for (key, value) in SERVER_SETTINGS {
            cmd.arg("-c").arg(format!("{key}={value}"));
        }
        for (key, value) in &self.settings {
            cmd.arg("-c").arg(format!("{key}={value}"));
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
        as_server_user(&mut cmd);
        let child = cmd.spawn().map_err(|e| format!("spawning postgres: {e}"))?;
        let pid = child.id();
        self.child = Some(child);
        self.wait_ready(pid)
    }

    /// Waits until the postmaster `pid` reports itself ready in `postmaster.pid` (a file left
    /// by an earlier postmaster names another pid).
    fn wait_ready(&mut self, pid: u32) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        let pid_file = self.data_dir().join("postmaster.pid");
        while Instant::now() < deadline {
            let child = self.child.as_mut().expect("the postmaster was started");
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Err(format!(
                    "postgres exited with {status}: {}",
                    self.server_log()
                ));
            }
            let ready = fs::read_to_string(&pid_file)
                .map(|text| {
                    let lines: Vec<&str> = text.lines().map(str::trim).collect();
                    lines.first() == Some(&pid.to_string().as_str())
                        && lines.get(7) == Some(&"ready")
                })
                .unwrap_or(false);
            if ready {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "postgres not ready after {START_TIMEOUT:?}: {}",
            self.server_log()
        ))
    }

    /// Shuts the postmaster down in `mode` and waits for it to exit, as `pg_ctl stop -m` does.
    /// Blocks; panics if it has not exited after a minute.
    pub fn stop(&mut self, mode: ShutdownMode) {
        let mut child = self.child.take().expect("the cluster is not running");
        signal(&child, mode.signal());
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        stop_process(&mut child, libc::SIGQUIT);
        panic!(
            "{mode:?} shutdown took over {SHUTDOWN_TIMEOUT:?}: {}",
            self.server_log()
        );
    }

    /// Starts the stopped cluster again on the same data directory and port. Blocks until it
    /// accepts connections (after an immediate shutdown, crash recovery runs first).
    pub fn restart(&mut self) {
        if let Err(e) = self.spawn_postmaster() {
            panic!("restarting the cluster: {e}");
        }
    }

    /// The TCP port (on 127.0.0.1) and unix-socket port number.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory holding the unix socket.
    pub fn socket_dir(&self) -> &Path {
        self.root.path()
    }

    /// The cluster's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    /// The CA certificate that signed the server's certificate, when the cluster was started
    /// with [`ClusterOptions::tls`].
    pub fn ca_cert(&self) -> Option<&Path> {
        self.ca.as_ref().map(TestCa::cert)
    }

    /// The directory of the server binaries this cluster runs (for `pg_recvlogical` and friends).
    pub fn bindir(&self) -> &Path {
        &self.bindir
    }

    /// What the server has logged so far.
    pub fn server_log(&self) -> String {
        fs::read_to_string(self.root.path().join("server.log")).unwrap_or_default()
    }

    /// A libpq key-value connection string for `dbname` over the unix socket.
    pub fn connection_string(&self, dbname: &str) -> String {
        format!(
            "host={} port={} user=postgres dbname={dbname}",
            self.socket_dir().display(),
            self.port
        )
    }

    /// A `postgres://` URL for `dbname` over TCP on 127.0.0.1.
    pub fn url(&self, dbname: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{dbname}", self.port)
    }

    /// Opens a client to `dbname`; its connection task runs on the current tokio runtime. Its
    /// statements, lock waits included, end after [`STATEMENT_TIMEOUT`]: a test blocked in
    /// Postgres fails with the reason instead of running until CI's time is up.
    pub async fn connect(&self, dbname: &str) -> tokio_postgres::Client {
        let config = format!(
            "{} options='-c statement_timeout={}'",
            self.connection_string(dbname),
            STATEMENT_TIMEOUT.as_millis()
        );
        let (client, connection) = tokio_postgres::connect(&config, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("connecting to private cluster: {e}"));
        tokio::spawn(async move {
            // The connection ends with an error when the cluster or the test goes away first.
            let _ = connection.await;
        });
        client
    }

    /// Creates a fresh database and returns its name (`prefix` plus a counter).
    pub async fn create_database(&self, prefix: &str) -> String {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let name = format!(
            "{prefix}_{}",
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let admin = self.connect("postgres").await;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("CREATE DATABASE");
        name
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        // SIGQUIT is Postgres's immediate shutdown: nothing here needs a clean checkpoint.
        if let Some(child) = self.child.as_mut() {
            stop_process(child, libc::SIGQUIT);
        }
    }
}

/// Sends `signal` to `child` and waits up to [`STOP_TIMEOUT`] for it to exit, then kills it.
pub fn stop_process(child: &mut Child, signal: libc::c_int) {
    self::signal(child, signal);
    let deadline = Instant::now() + STOP_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Sends `signal` to `child`, which has not been waited for (so its pid is still its own).
fn signal(child: &Child, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).expect("pids fit pid_t");
    // SAFETY: signalling our own child by its pid.
    unsafe { libc::kill(pid, signal) };
}

/// The initdb result shared by every cluster of this machine and Postgres version, made once.
fn template_dir(bindir: &Path) -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let version = bindir
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned());
        let name = format!(
            "syncline-testkit-template-{}-{}",
            version.unwrap_or_default(),
            unsafe { libc::geteuid() }
        );
        let template = std::env::temp_dir().join(name);
        if template.join("PG_VERSION").exists() {
            return template;
        }
        let staging = tempfile::Builder::new()
            .prefix("syncline-initdb-")
            .tempdir()
            .expect("temp dir for initdb");
        give_to_server_user(staging.path()).expect("chown for initdb");
        let data = staging.path().join("data");
        let mut cmd = Command::new(bindir.join("initdb"));
        cmd.arg("-D").arg(&data).args([
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "--encoding=UTF8",
            "--locale=C",
        ]);
        as_server_user(&mut cmd);
        run(&mut cmd).expect("initdb");
        // Another process may have won the race; either way a complete template now exists.
        let _ = fs::rename(&data, &template);
        template
    })
}

/// A path as a server setting's value.
fn path_setting(path: &Path) -> String {
    path.to_str().expect("temp paths are UTF-8").to_owned()
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The uid/gid that runs the server: `postgres` when we are root (initdb refuses root), else us.
fn server_user() -> Option<(u32, u32)> {
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let name = c"postgres";
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(
        !pw.is_null(),
        "running as root needs a `postgres` user to run the server as"
    );
    Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

fn as_server_user(cmd: &mut Command) {
    if let Some((uid, gid)) = server_user() {
        cmd.uid(uid).gid(gid);
    }
}

fn give_to_server_user(path: &Path) -> Result<(), String> {
    if let Some((uid, gid)) = server_user() {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .map_err(|e| format!("chown {path:?}: {e}"))?;
    }
    if path.is_dir() {
        fs::set_permissions(path, fs::Permissions::from_mode(0o700)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

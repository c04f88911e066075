//! `syncline-pg-cluster`: one private Postgres cluster for test suites written outside Rust.
//!
//! Starts a [`PgCluster`] and prints one JSON line to stdout:
//! `{"url":"postgres://postgres@127.0.0.1:<port>/postgres","port":<port>,"socket_dir":"<dir>"}`
//! (`url` works for libpq, Syncline's `DATABASE_URL` and node's `pg`). It then keeps the cluster
//! until stdin reaches EOF or SIGTERM, SIGINT or SIGHUP arrives, and stops and removes it. A
//! parent that holds our stdin as a pipe thus never leaves a cluster behind, even if it dies.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use syncline_testkit::PgCluster;

/// How often the wait re-checks whether a stop signal arrived.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// Set by the signal handler; the main thread stops the cluster once it sees it.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn request_stop(_signal: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn main() {
    // Installed before the cluster starts, so a signal during start-up still stops it cleanly.
    // Handlers reset to the default on exec, so the postmaster does not inherit them.
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let handler = request_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
        unsafe { libc::signal(signal, handler) };
    }
    let cluster = PgCluster::start();
    let line = format!(
        "{{\"url\":{},\"port\":{},\"socket_dir\":{}}}\n",
        json_string(&cluster.url("postgres")),
        cluster.port(),
        json_string(&cluster.socket_dir().to_string_lossy()),
    );
    let mut stdout = io::stdout().lock();
    if stdout
        .write_all(line.as_bytes())
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return; // Nobody is listening; dropping the cluster removes it.
    }
    drop(stdout);

    let (eof, stdin_closed) = mpsc::channel();
    thread::spawn(move || {
        let _ = io::copy(&mut io::stdin().lock(), &mut io::sink());
        let _ = eof.send(());
    });
    while !STOP.load(Ordering::SeqCst) {
        match stdin_closed.recv_timeout(SIGNAL_POLL) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    drop(cluster);
}

/// `text` as a JSON string literal.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

//! The binary as an operator meets it: `--version`, logs that a machine can read (JSON on
//! every line, the fatal one included, no colour codes off a terminal), a line per request at
//! debug, and start and shutdown lines.

mod common;

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use syncline_testkit::PgCluster;

fn syncline() -> Command {
    Command::new(env!("CARGO_BIN_EXE_syncline"))
}

/// Every stderr line, parsed as JSON (panics on a line that is not).
fn json_lines(stderr: &[u8]) -> Vec<Value> {
    let text = String::from_utf8(stderr.to_vec()).unwrap();
    assert!(
        !text.contains('\u{1b}'),
        "no colour codes off a terminal:\n{text}"
    );
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn message(line: &Value) -> &str {
    line["fields"]["message"].as_str().unwrap_or("")
}

#[test]
fn version_names_syncline() {
    let out = syncline().arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("syncline {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn the_fatal_line_is_json_too() {
    let out = syncline()
        .args(["serve", "--log-format", "json"])
        .env("DATABASE_URL", "postgres://x@127.0.0.1:1/db")
        .env("ELECTRIC_SECRET", "")
        .env_remove("ELECTRIC_INSECURE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let lines = json_lines(&out.stderr);
    let fatal = lines.last().unwrap();
    assert_eq!(fatal["level"], "ERROR");
    assert!(
        fatal["fields"]["error"]
            .as_str()
            .unwrap()
            .contains("is empty"),
        "{fatal}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_requests_and_shutdown_are_logged() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let storage = tempfile::tempdir().unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = syncline()
        .args(["serve", "--log-format", "json"])
        .env("DATABASE_URL", cluster.connection_string("postgres"))
        .env("ELECTRIC_INSECURE", "true")
        .env("ELECTRIC_PORT", port.to_string())
        .env("ELECTRIC_STORAGE_DIR", storage.path())
        .env("SYNCLINE_LISTEN_ADDRESS", "127.0.0.1")
        .env("RUST_LOG", "info,syncline_server=debug")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let http = common::http_client();
    let health = format!("http://127.0.0.1:{port}/v1/health");
    for _ in 0..300 {
        if http
            .get(&health)
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answer = http.get(&health).send().await.unwrap();
    let request_id = answer.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    // SAFETY: kill only sends a signal to the child we started.
    unsafe { libc::kill(i32::try_from(child.id()).unwrap(), libc::SIGTERM) };
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(out.status.success(), "SIGTERM ends the server cleanly");
    let lines = json_lines(&out.stderr);
    assert_eq!(message(&lines[0]), "syncline starting");
    let messages: Vec<&str> = lines.iter().map(message).collect();
    let stopping = messages.iter().position(|m| *m == "shutting down");
    let released = messages.iter().position(|m| *m == "writer's lock released");
    assert!(stopping.is_some() && stopping < released, "{messages:?}");
    assert_eq!(messages.last(), Some(&"shut down"));
    let request = lines
        .iter()
        .find(|l| l["fields"]["request_id"] == request_id.as_str())
        .expect("a line for the request");
    assert_eq!(request["fields"]["method"], "GET");
    assert_eq!(request["fields"]["path"], "/v1/health");
    assert_eq!(request["fields"]["status"], 200);
    assert!(request["fields"]["duration_ms"].is_f64());
}

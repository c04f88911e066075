//! Reconnecting while Postgres is down: the backoff grows to its maximum even when the caller
//! drops `next()` over and over (as the server's pipeline does in a `select!` beside a tick),
//! and warnings are few.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use syncline_pg::publication::ensure_publication;
use syncline_pg::replication::{ensure_slot, ResumingStream, StreamOptions, StreamStatus};
use syncline_pg::ConnConfig;
use syncline_testkit::{PgCluster, ShutdownMode};
use tokio::net::TcpListener;
use tokio::time::Instant;

/// The longest reconnect delay in this test (5 s by default), so it reaches it quickly.
const DELAY_MAX: Duration = Duration::from_secs(1);
/// How long the test calls `next()` while Postgres is down.
const DOWN_FOR: Duration = Duration::from_secs(6);

/// Log output, shared with the subscriber that writes it.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// One thread, so the subscriber set for this thread sees every event of the stream.
#[tokio::test(flavor = "current_thread")]
async fn backoff_grows_to_the_maximum_although_next_is_cancelled() {
    let logs = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer({
            let logs = logs.clone();
            move || logs.clone()
        })
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let mut cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let config = ConnConfig::parse(&cluster.url("postgres")).unwrap();
    let client = syncline_pg::connect(&config).await.unwrap();
    // The tests name their tables unqualified; Syncline's sessions search pg_catalog first.
    client
        .batch_execute("SET search_path = public")
        .await
        .unwrap();
    ensure_publication(&client, "pub").await.unwrap();
    drop(client);
    ensure_slot(&config, "slot").await.unwrap();
    let mut options = StreamOptions::new("slot", "pub");
    options.reconnect_delay_max = DELAY_MAX;
    let mut stream = ResumingStream::start(config, options).await.unwrap();
    let mut status = stream.subscribe_status();
    assert_eq!(stream.status(), StreamStatus::Connected);

    let port = cluster.port();
    cluster.stop(ShutdownMode::Immediate);
    // Postgres is down. A listener on its port counts the attempts and closes each connection.
    let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let attempts: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let counter = tokio::spawn({
        let attempts = attempts.clone();
        async move {
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                attempts.lock().unwrap().push(Instant::now());
                drop(socket);
            }
        }
    });
    let down_since = Instant::now();
    while down_since.elapsed() < DOWN_FOR {
        let polled = tokio::time::timeout(Duration::from_millis(150), stream.next()).await;
        assert!(
            polled.is_err(),
            "next() returned {polled:?} while Postgres is down"
        );
    }
    // Waiting for the aborted task drops the listener, freeing the port for the restart.
    counter.abort();
    assert!(counter.await.unwrap_err().is_cancelled());

    let attempts = attempts.lock().unwrap().clone();
    let gaps: Vec<Duration> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
    // Delays of 50, 100, 200, 400, 800 ms, then 1 s (less up to a quarter of jitter): about ten
    // attempts in 6 s. Restarting the backoff at every cancelled `next()` makes about 40.
    assert!(
        (4..=11).contains(&attempts.len()),
        "{} attempts, gaps {gaps:?}",
        attempts.len()
    );
    assert!(
        gaps.iter().rev().take(2).all(|g| *g >= DELAY_MAX * 3 / 4),
        "the delay did not reach the maximum: {gaps:?}"
    );
    let StreamStatus::Reconnecting {
        attempt,
        since,
        next_delay,
        last_error,
    } = stream.status()
    else {
        panic!("not reconnecting: {:?}", stream.status());
    };
    let attempt = usize::try_from(attempt).unwrap();
    // The last attempt may not have reached the listener yet.
    assert!(
        (attempts.len()..=attempts.len() + 1).contains(&attempt),
        "status says {attempt} attempts, the listener saw {}",
        attempts.len()
    );
    assert!(
        next_delay.is_zero() || next_delay >= DELAY_MAX * 3 / 4,
        "{next_delay:?}"
    );
    assert!(since.elapsed() >= DOWN_FOR);
    assert!(!last_error.is_empty());
    assert_eq!(*status.borrow_and_update(), stream.status());

    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = logs.lines().filter(|l| l.contains("WARN")).collect();
    assert!(
        warnings.len() == 2
            && warnings[0].contains("replication connection lost")
            && warnings[1].contains("attempt=1")
            && warnings[1].contains("next_delay="),
        "{warnings:#?}"
    );

    // Postgres comes back: the stream reconnects within the longest delay.
    let _cluster = tokio::task::spawn_blocking(move || {
        cluster.restart();
        cluster
    })
    .await
    .unwrap();
    let back = Instant::now();
    while stream.status() != StreamStatus::Connected {
        assert!(back.elapsed() < DELAY_MAX * 5, "{:?}", stream.status());
        let polled = tokio::time::timeout(Duration::from_millis(150), stream.next()).await;
        assert!(
            polled.is_err(),
            "next() returned {polled:?} with nothing written"
        );
    }
    assert!(status.has_changed().unwrap());
    assert_eq!(*status.borrow(), StreamStatus::Connected);
    assert_eq!(stream.reconnects(), 1);
}

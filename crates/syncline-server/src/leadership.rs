//! Who writes. Servers that share one storage directory and replication stream id take turns:
//! exactly one, the one holding the writer's lock (a Postgres advisory lock on a session of its
//! own, [`syncline_pg::lock`]), owns the slot, the pipeline, the snapshots, shape creation,
//! deletion, eviction and compaction. The others are standbys (`--role=auto`, asking for the
//! lock every [`LOCK_RETRY_INTERVAL`]) or replicas (`--role=replica`, never asking); both serve
//! every existing shape read-only from the shared files, following the writer ([`follow`]).
//!
//! - **Takeover**: a standby that takes the lock stops following, takes over the files
//!   ([`crate::shapes::Shapes::become_writer`]: recovery happens as each log is opened; a
//!   previous writer that lost the lock but still holds its group journal is waited for, since
//!   that journal may hold the only copy of commits it acknowledged),
//!   resumes the slot from its confirmed position, and serves the same handles and offsets.
//! - **Hand-over** (`SIGTERM`): the writer stops taking new work, flushes and acknowledges what
//!   it processed, closes its logs cleanly, waits until its walsender has let go of the slot,
//!   and releases the lock; a standby takes over at once.
//! - **Lost lock** (its session ended: Postgres restarted, the network failed): the writer
//!   drops its pipeline, snapshots and writers without writing another byte and becomes a
//!   standby, since another server may take the lock now.

use std::sync::Arc;
use std::time::{Duration, Instant};

use syncline_pg::lock::{SessionLock, LOCK_RETRY_INTERVAL};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::RoleSetting;
use crate::follow::follow;
use crate::replicate::ReplicationThread;
use crate::snapshot::{run_queue, Snapshotter};
use crate::state::AppState;

/// How often the open shape logs past their bound are closed.
const WRITER_TRIM_INTERVAL: Duration = Duration::from_secs(1);
/// How often the tables with shapes are checked for having been dropped and created again.
const TABLE_CHECK_INTERVAL: Duration = Duration::from_secs(5);
/// Longest wait at hand-over for the pipeline to flush and acknowledge.
const STOP_FLUSH_MAX: Duration = Duration::from_secs(10);
/// Longest wait at hand-over for the walsender to let go of the slot.
const SLOT_RELEASE_MAX: Duration = Duration::from_secs(3);
/// How often a standby that cannot reach Postgres says so in the log.
const LOCK_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Runs this server's role until it shuts down: a standby or replica follows the writer; a
/// standby that takes the lock writes until it hands over (shutdown) or loses the lock (a
/// standby again). Returns once a shutdown is complete.
pub async fn run(state: Arc<AppState>) {
    loop {
        let lock = tokio::select! {
            lock = standby(&state) => lock,
            () = state.health.wait_stopping() => return,
        };
        tracing::info!(
            lock = lock.name(),
            "took the writer's lock: this server writes now"
        );
        match write(&state, &lock).await {
            Ended::Stopping => {
                hand_over(&state, lock).await;
                return;
            }
            Ended::LockLost(why) => {
                tracing::error!(reason = %why, "lost the writer's lock: a standby again");
                drop(lock);
                state.shapes.become_reader();
                state.health.became_standby(why);
            }
        }
    }
}

/// Follows the writer and, with `--role=auto`, asks for the lock until it is taken; returns
/// once the follower has stopped. A replica never returns.
async fn standby(state: &Arc<AppState>) -> SessionLock {
    let config = &state.config;
    let mut following = AbortOnDrop(Some(tokio::spawn(follow(
        state.shapes.clone(),
        state.progress.clone(),
        config.follow,
        config.follow_poll_interval,
    ))));
    if config.role == RoleSetting::Replica {
        return std::future::pending().await;
    }
    let name = config.lock_name();
    let mut last_logged: Option<Instant> = None;
    loop {
        match SessionLock::try_acquire(state.postgres.config(), &name).await {
            Ok(Some(lock)) => {
                // The registry is the writer's from now on: nothing may follow into it.
                following.stop().await;
                return lock;
            }
            Ok(None) => state.health.lock_held_elsewhere(),
            Err(e) => {
                if last_logged.is_none_or(|t| t.elapsed() >= LOCK_ERROR_LOG_INTERVAL) {
                    let endpoint = state.postgres.config().endpoint();
                    tracing::warn!(error = %e, postgres = ?endpoint, "cannot ask for the writer's lock; waiting for Postgres");
                    last_logged = Some(Instant::now());
                }
                state.health.lock_failing(e.to_string());
            }
        }
        tokio::time::sleep(LOCK_RETRY_INTERVAL).await;
    }
}

/// How a writer's turn ended.
enum Ended {
    /// The server shuts down: hand over.
    Stopping,
    /// The lock's session ended, because of this.
    LockLost(String),
}

/// Takes over the files and replicates until the server shuts down (the pipeline has then
/// flushed and acknowledged) or the lock is lost (everything the writer ran is dropped).
async fn write(state: &Arc<AppState>, lock: &SessionLock) -> Ended {
    state.health.became_writer();
    let start = match state.shapes.become_writer() {
        Ok(start) => start,
        Err(e) => {
            tracing::error!(error = %e, "could not take over shape storage; exiting");
            std::process::exit(1);
        }
    };
    tracing::info!(shapes = start.restored.len(), "stored shapes taken over");
    let mut tasks = JoinSet::new();
    let snapshotter = Snapshotter::new(
        state.shapes.clone(),
        state.postgres.clone(),
        state.metrics.clone(),
    );
    tasks.spawn(run_queue(snapshotter, start.snapshot_queue));
    let period = Duration::from_secs(state.config.compaction_period_s);
    tasks.spawn(crate::compaction::run(state.shapes.clone(), period));
    tasks.spawn(state.shapes.clone().watch_tables(TABLE_CHECK_INTERVAL));
    tasks.spawn(
        state
            .shapes
            .clone()
            .watch_open_writers(WRITER_TRIM_INTERVAL, state.config.idle_log_park),
    );
    let (stop, stopped) = watch::channel(false);
    let mut replicating = match ReplicationThread::start(
        state.clone(),
        start.restored,
        start.unrecorded,
        start.command_queue,
        stopped,
    ) {
        Ok(thread) => thread,
        Err(e) => {
            tracing::error!(error = %e, "could not start the replication thread; exiting");
            std::process::exit(1);
        }
    };
    let ended = tokio::select! {
        () = replicating.finished() => Ended::Stopping,
        e = lock.lost() => Ended::LockLost(e.to_string()),
        () = state.health.wait_stopping() => Ended::Stopping,
    };
    if matches!(ended, Ended::Stopping) {
        let _ = stop.send(true);
        if tokio::time::timeout(STOP_FLUSH_MAX, replicating.finished())
            .await
            .is_err()
        {
            tracing::warn!("the pipeline did not stop in time; Postgres sends what it did not acknowledge to the next writer");
        }
    }
    replicating.abort().await;
    tasks.shutdown().await;
    ended
}

/// Closes the logs cleanly, waits until the slot is free, and releases the lock: the next
/// writer starts at once, without recovery.
async fn hand_over(state: &Arc<AppState>, lock: SessionLock) {
    state.shapes.hand_over();
    let slot = state.config.slot_name();
    let deadline = Instant::now() + SLOT_RELEASE_MAX;
    while state.postgres.slot_active(&slot).await.unwrap_or(false) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    match lock.release().await {
        Ok(()) => tracing::info!("writer's lock released"),
        Err(e) => {
            tracing::warn!(error = %e, "releasing the writer's lock failed; it goes with the session")
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(Option<tokio::task::JoinHandle<()>>);

impl AbortOnDrop {
    /// Aborts the task and waits until it has ended.
    async fn stop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

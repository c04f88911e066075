//! The writer's replication: connect (publication, slot, restored shapes checked against the
//! catalog, stream), run the pipeline, and start it again after a full disk.
//!
//! It runs on a thread of its own ([`ReplicationThread`]) with a single-threaded runtime of its
//! own: the replication socket is that runtime's, so the thread that reads it is the one its
//! readiness wakes, and the pipeline's appends and flushes block that thread alone (on the
//! server's multi-threaded runtime each flush handed the worker's tasks to another thread).
//! Work that uses the server's shared Postgres connections (the catalog, query connections)
//! runs on the server's runtime ([`crate::shapes::Shapes::spawn`]).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{AbortHandle, Abortable};
use syncline_pg::replication::{
    ensure_slot, ResumingStream, SlotInfo, StreamOptions, StreamStatus,
};
use tokio::sync::{mpsc, oneshot, watch};

use crate::pipeline::{Pipeline, Shortage, Stop};
use crate::shapes::{Command, Restored, ShapeMeta};
use crate::state::AppState;

/// First delay before Postgres is tried again.
const WAIT_DELAY_MIN: Duration = Duration::from_millis(100);
/// Longest delay between attempts to reach Postgres.
const WAIT_DELAY_MAX: Duration = Duration::from_secs(10);

/// Replication running on its thread; dropping it stops the pipeline without a flush (as
/// [`ReplicationThread::abort`] does, without waiting).
pub struct ReplicationThread {
    abort: AbortHandle,
    /// Says when the thread has ended; `Err` if it panicked. `None` once that was seen.
    done: Option<oneshot::Receiver<()>>,
}

impl ReplicationThread {
    /// Starts [`replicate`] on a new thread with its own runtime; it ends when `stop` says so
    /// (after flushing), when the pipeline fails for good (the process exits), or on
    /// [`ReplicationThread::abort`].
    pub fn start(
        state: Arc<AppState>,
        restored: Vec<Restored>,
        unrecorded: Vec<ShapeMeta>,
        commands: mpsc::Receiver<Command>,
        stop: watch::Receiver<bool>,
    ) -> std::io::Result<ReplicationThread> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (abort, registration) = AbortHandle::new_pair();
        let (done, done_rx) = oneshot::channel();
        let replicating = Abortable::new(
            replicate(state, restored, unrecorded, commands, stop),
            registration,
        );
        std::thread::Builder::new()
            .name("syncline-replication".into())
            .stack_size(syncline_where::IN_PLACE_THREAD_STACK_BYTES)
            .spawn(move || {
                let _ = runtime.block_on(replicating);
                // Whatever the pipeline started on this runtime ends with it.
                drop(runtime);
                let _ = done.send(());
            })?;
        Ok(ReplicationThread {
            abort,
            done: Some(done_rx),
        })
    }

    /// Waits until the thread has ended. Cancel-safe. A panic on it (a broken invariant)
    /// ends the process: the logs recover on restart.
    pub async fn finished(&mut self) {
        let Some(done) = self.done.as_mut() else {
            return;
        };
        if done.await.is_err() {
            tracing::error!("the replication thread panicked; exiting");
            std::process::exit(1);
        }
        self.done = None;
    }

    /// Stops the pipeline where it is, without a flush (what it did not acknowledge, Postgres
    /// sends the next writer), and waits until the thread has let go of it.
    pub async fn abort(mut self) {
        self.abort.abort();
        self.finished().await;
    }
}

impl Drop for ReplicationThread {
    fn drop(&mut self) {
        self.abort.abort();
    }
}

/// Connects to Postgres (retrying with backoff for as long as it takes), checks the restored
/// shapes against the catalog, and runs the replication pipeline until `stop` says so (it then
/// flushes and acknowledges what it processed). When the pipeline stops because shape storage
/// is full, waits until it takes writes again and starts a new pipeline from the slot; when it
/// fails for good, ends the process (on restart every shape resumes from disk).
async fn replicate(
    state: Arc<AppState>,
    mut restored: Vec<Restored>,
    mut unrecorded: Vec<ShapeMeta>,
    mut commands: mpsc::Receiver<Command>,
    stop: watch::Receiver<bool>,
) {
    loop {
        let mut backoff = Backoff::default();
        let (mut kept, slot, stream) = loop {
            match connect(&state, &restored, &unrecorded).await {
                Ok(connected) => break connected,
                Err(e) => {
                    let delay = backoff.next();
                    let endpoint = state.postgres.config().endpoint();
                    tracing::warn!(error = %e, postgres = ?endpoint, attempt = backoff.attempts, retry_in = ?delay, "waiting for Postgres");
                    state.health.waiting_for(e);
                    tokio::time::sleep(delay).await;
                }
            }
        };
        tracing::info!(resume = %slot.resume_lsn, shapes = kept.len(), "replication started");
        let status = stream.subscribe_status();
        // Everything up to the slot's confirmed position was processed before.
        state.progress.observe_lsn(slot.resume_lsn);
        // Stored shapes join the pipeline before it reads anything: the slot's replay is theirs.
        let mut pipeline = Pipeline::new(
            state.shapes.clone(),
            state.progress.clone(),
            state.metrics.clone(),
            stream,
            commands,
        );
        // Oldest first. Each shape carries its table as it was when the shape was made, and the
        // pipeline re-checks all of a table's shapes against the next one's description
        // whenever it differs. In the order they were made the table ends as it is now and that
        // happens once per change of the table. In any other order an older description could
        // come last, dropping the shapes that read a column added since (409 for their
        // clients), and the re-checks happened up to once per shape (at 30,000 restored shapes,
        // whose first few were made before the table's replica identity was set, 12 s instead
        // of 0.3).
        kept.sort_by_key(|(shape, _)| shape.made_us());
        for (shape, visibility) in kept {
            pipeline.add_restored(shape, visibility);
        }
        state.health.streaming();
        let follow = tokio::spawn(follow_stream(state.clone(), status));
        let stopped = pipeline.run(stop.clone()).await;
        follow.abort();
        match stopped {
            Ok(()) => return,
            Err(Stop::Postgres(e)) => {
                tracing::error!(error = %e, "replication pipeline failed; exiting");
                std::process::exit(1);
            }
            Err(Stop::StoragePaused {
                shortage,
                why,
                commands: queue,
            }) => {
                match shortage {
                    Shortage::Space => {
                        tracing::error!(error = %why, "shape storage is full: replication paused, Postgres keeps the WAL; reads are still served")
                    }
                    Shortage::Descriptors => {
                        tracing::error!(error = %why, "out of file descriptors for shape logs: replication paused, Postgres keeps the WAL; reads are still served");
                        // Idle logs give theirs back.
                        state.shapes.descriptors_short();
                    }
                }
                state.health.storage(Some(why));
                commands = queue;
                // Requests made for the stopped pipeline are dropped: their senders give up.
                while commands.try_recv().is_ok() {}
                state.shapes.wait_writable().await;
                tracing::info!("shape storage takes writes again; replication resumes");
                state.health.storage(None);
                restored = state.shapes.reopen_for_new_pipeline();
                unrecorded = Vec::new();
            }
        }
    }
}

/// Reports the replication stream's condition on `/v1/health` as it changes: a lost stream
/// (Postgres restarting, unreachable) is `starting` with the reason until it streams again.
async fn follow_stream(state: Arc<AppState>, mut status: watch::Receiver<StreamStatus>) {
    loop {
        let current = status.borrow_and_update().clone();
        match current {
            StreamStatus::Connected => state.health.streaming(),
            StreamStatus::Reconnecting { last_error, .. } => state
                .health
                .waiting_for(format!("replication connection lost: {last_error}")),
        }
        if status.changed().await.is_err() {
            return;
        }
    }
}

/// One attempt at what replication needs: the publication, the slot and the restored shapes
/// checked against the catalog (on the server's runtime, whose connections they use), then
/// the stream (on the caller's).
async fn connect(
    state: &Arc<AppState>,
    restored: &[Restored],
    unrecorded: &[ShapeMeta],
) -> Result<(Vec<Restored>, SlotInfo, ResumingStream), String> {
    let catalog = state.shapes.spawn(check_catalog(
        state.clone(),
        restored.to_vec(),
        unrecorded.to_vec(),
    ));
    let (kept, slot) = catalog
        .await
        .map_err(|e| format!("catalog check failed: {e}"))??;
    let postgres = &state.postgres;
    let stream = ResumingStream::start(
        postgres.config().clone(),
        StreamOptions::new(state.config.slot_name(), postgres.publication().to_owned()),
    )
    .await
    .map_err(|e| format!("replication: {e}"))?;
    Ok((kept, slot, stream))
}

/// The publication, the slot, and the restored shapes that the catalog still agrees with.
async fn check_catalog(
    state: Arc<AppState>,
    restored: Vec<Restored>,
    unrecorded: Vec<ShapeMeta>,
) -> Result<(Vec<Restored>, SlotInfo), String> {
    let postgres = &state.postgres;
    postgres
        .ensure_publication()
        .await
        .map_err(|e| format!("publication: {e}"))?;
    let slot = ensure_slot(postgres.config(), &state.config.slot_name())
        .await
        .map_err(|e| format!("replication slot: {e}"))?;
    let kept = state
        .shapes
        .check_restored(restored, unrecorded)
        .await
        .map_err(|e| format!("catalog: {e}"))?;
    Ok((kept, slot))
}

/// Delays between attempts to reach Postgres: doubling from [`WAIT_DELAY_MIN`] to
/// [`WAIT_DELAY_MAX`].
#[derive(Debug, Default)]
struct Backoff {
    attempts: u32,
}

impl Backoff {
    fn next(&mut self) -> Duration {
        let doublings = self.attempts.min(16);
        self.attempts += 1;
        WAIT_DELAY_MIN
            .saturating_mul(1 << doublings)
            .min(WAIT_DELAY_MAX)
    }
}

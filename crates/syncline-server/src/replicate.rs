//! The writer's replication: connect (publication, slot, restored shapes checked against the
//! catalog, stream), run the pipeline, and start it again after a full disk.

use std::sync::Arc;
use std::time::Duration;

use syncline_pg::replication::{
    ensure_slot, ResumingStream, SlotInfo, StreamOptions, StreamStatus,
};
use tokio::sync::{mpsc, watch};

use crate::pipeline::{Pipeline, Shortage, Stop};
use crate::shapes::{Command, Restored, ShapeMeta};
use crate::state::AppState;

/// First delay before Postgres is tried again.
const WAIT_DELAY_MIN: Duration = Duration::from_millis(100);
/// Longest delay between attempts to reach Postgres.
const WAIT_DELAY_MAX: Duration = Duration::from_secs(10);

/// Connects to Postgres (retrying with backoff for as long as it takes), checks the restored
/// shapes against the catalog, and runs the replication pipeline until `stop` says so (it then
/// flushes and acknowledges what it processed). When the pipeline stops because shape storage
/// is full, waits until it takes writes again and starts a new pipeline from the slot; when it
/// fails for good, ends the process (on restart every shape resumes from disk).
pub async fn replicate(
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

/// One attempt at what replication needs: the publication, the slot, the restored shapes
/// checked against the catalog, the stream.
async fn connect(
    state: &AppState,
    restored: &[Restored],
    unrecorded: &[ShapeMeta],
) -> Result<(Vec<Restored>, SlotInfo, ResumingStream), String> {
    let postgres = &state.postgres;
    postgres
        .ensure_publication()
        .await
        .map_err(|e| format!("publication: {e}"))?;
    let slot_name = state.config.slot_name();
    let slot = ensure_slot(postgres.config(), &slot_name)
        .await
        .map_err(|e| format!("replication slot: {e}"))?;
    let kept = state
        .shapes
        .check_restored(restored.to_vec(), unrecorded.to_vec())
        .await
        .map_err(|e| format!("catalog: {e}"))?;
    let stream = ResumingStream::start(
        postgres.config().clone(),
        StreamOptions::new(slot_name, postgres.publication().to_owned()),
    )
    .await
    .map_err(|e| format!("replication: {e}"))?;
    Ok((kept, slot, stream))
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

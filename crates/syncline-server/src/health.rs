//! The server's health, as `/v1/health` reports it and as request gates wait on it.
//!
//! Health follows from conditions the parts report: stored shapes restored, the replication
//! stream running (or lost, and why), the shape logs writable (or not, and why). The phases are
//! Electric's: `starting` until stored shapes are restored (and again while an active server has
//! lost its replication stream), `waiting` while it waits for Postgres, `active` when it
//! replicates. A storage failure is reported as `degraded` with its reason.

use std::time::Duration;

use tokio::sync::watch;

/// Where the server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Restoring stored shapes, or reconnecting a lost replication stream.
    Starting,
    /// Shapes restored; waiting for Postgres.
    Waiting,
    /// Replicating.
    Active,
}

impl Phase {
    /// The `status` Electric reports for this phase.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Waiting => "waiting",
            Phase::Active => "active",
        }
    }
}

/// The replication stream's condition.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Replication {
    /// Not yet started, with the reason it has not (e.g. Postgres unreachable).
    NotStarted(Option<String>),
    /// Streaming.
    Streaming,
    /// Lost after it streamed; reconnecting.
    Lost(String),
}

/// What the parts have reported.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Conditions {
    restored: bool,
    replication: Replication,
    storage_error: Option<String>,
}

/// The health a client is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The phase.
    pub phase: Phase,
    /// What keeps the server from being fully active, if anything.
    pub problem: Option<String>,
}

impl Conditions {
    fn status(&self) -> Status {
        let (phase, replication_problem) = match (&self.replication, self.restored) {
            (_, false) => (Phase::Starting, None),
            (Replication::NotStarted(why), true) => (Phase::Waiting, why.clone()),
            (Replication::Lost(why), true) => (Phase::Starting, Some(why.clone())),
            (Replication::Streaming, true) => (Phase::Active, None),
        };
        Status {
            phase,
            problem: replication_problem.or_else(|| self.storage_error.clone()),
        }
    }
}

/// What a request needs before it is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Reading existing shapes: stored shapes restored.
    Read,
    /// Creating or deleting shapes, subset queries: replicating, storage writable.
    Write,
}

/// How long a request waits for its gate before it is told to retry (Electric: 5 s).
pub const GATE_WAIT: Duration = Duration::from_secs(5);

/// The shared health.
#[derive(Debug)]
pub struct HealthState(watch::Sender<Conditions>);

impl Default for HealthState {
    fn default() -> Self {
        HealthState(watch::Sender::new(Conditions {
            restored: false,
            replication: Replication::NotStarted(None),
            storage_error: None,
        }))
    }
}

impl HealthState {
    /// The current status.
    pub fn status(&self) -> Status {
        self.0.borrow().status()
    }

    /// Stored shapes are registered: reads can be served.
    pub fn restored(&self) {
        self.0.send_modify(|c| c.restored = true);
    }

    /// Replication cannot start yet, because of `why`.
    pub fn waiting_for(&self, why: String) {
        self.0.send_if_modified(|c| {
            let next = match &c.replication {
                Replication::NotStarted(_) => Replication::NotStarted(Some(why)),
                Replication::Streaming | Replication::Lost(_) => Replication::Lost(why),
            };
            let changed = c.replication != next;
            c.replication = next;
            changed
        });
    }

    /// The replication stream runs.
    pub fn streaming(&self) {
        self.0.send_if_modified(|c| {
            let changed = c.replication != Replication::Streaming;
            c.replication = Replication::Streaming;
            changed
        });
    }

    /// Shape logs cannot be written (`Some`), or can again (`None`).
    pub fn storage(&self, error: Option<String>) {
        self.0.send_if_modified(|c| {
            let changed = c.storage_error != error;
            c.storage_error = error;
            changed
        });
    }

    /// Waits up to [`GATE_WAIT`] until `gate` is open; otherwise says what it waited for.
    pub async fn wait(&self, gate: Gate) -> Result<(), String> {
        let open = |c: &Conditions| match gate {
            Gate::Read => c.restored,
            Gate::Write => {
                c.restored && c.replication == Replication::Streaming && c.storage_error.is_none()
            }
        };
        let mut changes = self.0.subscribe();
        let waited = tokio::time::timeout(GATE_WAIT, changes.wait_for(open)).await;
        match waited {
            Ok(Ok(_)) => Ok(()),
            _ => Err(self.unmet(gate)),
        }
    }

    /// The message of a request whose gate stayed shut.
    fn unmet(&self, gate: Gate) -> String {
        let c = self.0.borrow();
        if !c.restored {
            return "Timeout waiting for stored shapes to be restored".into();
        }
        if let (Gate::Write, Some(error)) = (gate, &c.storage_error) {
            return format!("Shape storage is failing: {error}");
        }
        match &c.replication {
            Replication::NotStarted(Some(why)) | Replication::Lost(why) => {
                format!("Timeout waiting for replication client to be ready: {why}")
            }
            _ => "Timeout waiting for replication client to be ready".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_follow_the_conditions() {
        let health = HealthState::default();
        assert_eq!(health.status().phase, Phase::Starting);
        health.restored();
        health.waiting_for("connection refused".into());
        assert_eq!(
            health.status(),
            Status {
                phase: Phase::Waiting,
                problem: Some("connection refused".into())
            }
        );
        health.streaming();
        assert_eq!(health.status().phase, Phase::Active);
        health.waiting_for("server closed the connection".into());
        assert_eq!(
            health.status().phase,
            Phase::Starting,
            "lost, as Electric says"
        );
        health.streaming();
        health.storage(Some("No space left on device".into()));
        assert_eq!(
            health.status(),
            Status {
                phase: Phase::Active,
                problem: Some("No space left on device".into())
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn gates_wait_then_say_why() {
        let health = std::sync::Arc::new(HealthState::default());
        let waiting = tokio::spawn({
            let health = health.clone();
            async move { health.wait(Gate::Read).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        health.restored();
        assert_eq!(waiting.await.unwrap(), Ok(()));
        assert_eq!(
            health.wait(Gate::Write).await,
            Err("Timeout waiting for replication client to be ready".into())
        );
    }
}

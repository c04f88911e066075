//! The server's health, as `/v1/health` reports it and as request gates wait on it.
//!
//! Health follows from conditions the parts report: stored shapes registered, this server's
//! role (the writer, a standby waiting for the writer's lock, or a read replica), the lock's
//! state, the replication stream (running, or lost and why), the shape logs writable (or not,
//! and why), and shutdown. The phases are Electric's: `starting` until stored shapes are
//! registered (and while a new writer starts replicating, or an active one has lost its
//! stream), `waiting` until Postgres answers, `active` when the server serves: the writer once
//! it replicates, a standby once it knows another server holds the lock, a replica at once.
//! A storage failure is reported as `degraded` with its reason.

use std::time::Duration;

use tokio::sync::watch;

/// Where the server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Registering stored shapes, starting to replicate, or reconnecting a lost stream.
    Starting,
    /// Shapes registered; waiting for Postgres.
    Waiting,
    /// Serving.
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

/// What this server is to the shape logs it shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Does not hold the writer's lock and tries to take it (`--role=auto`).
    Standby,
    /// Never takes the writer's lock (`--role=replica`).
    Replica,
    /// Holds the writer's lock: replicates, makes and removes shapes.
    Writer,
}

impl Role {
    /// The `role` `/v1/health` reports.
    pub fn name(self) -> &'static str {
        match self {
            Role::Standby => "standby",
            Role::Replica => "replica",
            Role::Writer => "writer",
        }
    }
}

/// A standby's view of the writer's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Lock {
    /// No attempt has answered yet.
    Unknown,
    /// Another server holds it.
    HeldElsewhere,
    /// Asking for it failed, because of this.
    Failing(String),
    /// This server held it and lost it, because of this (until it learns who holds it now).
    Lost(String),
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
    role: Role,
    lock: Lock,
    replication: Replication,
    storage_error: Option<String>,
    stopping: bool,
}

/// The health a client is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The phase.
    pub phase: Phase,
    /// This server's role.
    pub role: Role,
    /// What keeps the server from being fully active, if anything.
    pub problem: Option<String>,
}

/// Why a server that is shutting down refuses new work.
const STOPPING: &str = "The server is shutting down";

impl Conditions {
    fn status(&self) -> Status {
        let (phase, problem) = match (self.role, self.restored) {
            (_, false) => (Phase::Starting, None),
            _ if self.stopping => (Phase::Starting, Some(STOPPING.to_owned())),
            (Role::Replica, true) => (Phase::Active, None),
            (Role::Standby, true) => match &self.lock {
                Lock::Unknown => (Phase::Waiting, None),
                Lock::HeldElsewhere => (Phase::Active, None),
                Lock::Failing(why) => (Phase::Waiting, Some(why.clone())),
                // Electric's status for an active server whose replication session died.
                Lock::Lost(why) => (Phase::Starting, Some(why.clone())),
            },
            (Role::Writer, true) => match &self.replication {
                Replication::NotStarted(why) => (Phase::Starting, why.clone()),
                Replication::Lost(why) => (Phase::Starting, Some(why.clone())),
                Replication::Streaming => (Phase::Active, None),
            },
        };
        Status {
            phase,
            role: self.role,
            problem: problem.or_else(|| self.storage_error.clone()),
        }
    }

    fn writable(&self) -> bool {
        self.restored
            && self.role == Role::Writer
            && self.replication == Replication::Streaming
            && self.storage_error.is_none()
            && !self.stopping
    }
}

/// What a request needs before it is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Reading existing shapes: stored shapes registered.
    Read,
    /// Creating or deleting shapes, subset queries: the writer, replicating, storage writable.
    Write,
}

/// How long a request waits for its gate before it is told to retry (Electric: 5 s).
pub const GATE_WAIT: Duration = Duration::from_secs(5);
/// How long a request that needs the writer waits on a standby while another server holds the
/// writer's lock: a hand-over makes this server the writer well within it.
pub const STANDBY_WRITE_WAIT: Duration = Duration::from_secs(1);

/// The shared health.
#[derive(Debug)]
pub struct HealthState(watch::Sender<Conditions>);

impl HealthState {
    /// The health of a server starting in `role` (a standby or a replica).
    pub fn new(role: Role) -> HealthState {
        assert_ne!(
            role,
            Role::Writer,
            "a server becomes the writer by taking the lock"
        );
        HealthState(watch::Sender::new(Conditions {
            restored: false,
            role,
            lock: Lock::Unknown,
            replication: Replication::NotStarted(None),
            storage_error: None,
            stopping: false,
        }))
    }

    /// The current status.
    pub fn status(&self) -> Status {
        self.0.borrow().status()
    }

    /// Whether the server is shutting down.
    pub fn stopping(&self) -> bool {
        self.0.borrow().stopping
    }

    /// Waits until the server starts shutting down.
    pub async fn wait_stopping(&self) {
        let mut changes = self.0.subscribe();
        let _ = changes.wait_for(|c| c.stopping).await;
    }

    /// Stored shapes are registered: reads can be served.
    pub fn restored(&self) {
        self.0.send_modify(|c| c.restored = true);
    }

    /// A standby learnt that another server holds the writer's lock.
    pub fn lock_held_elsewhere(&self) {
        self.set_lock(Lock::HeldElsewhere);
    }

    /// A standby could not ask for the writer's lock, because of `why`.
    pub fn lock_failing(&self, why: String) {
        self.set_lock(Lock::Failing(why));
    }

    fn set_lock(&self, lock: Lock) {
        self.0.send_if_modified(|c| {
            if matches!((&c.lock, &lock), (Lock::Lost(_), Lock::Failing(_))) {
                return false;
            }
            let changed = c.lock != lock;
            c.lock = lock;
            changed
        });
    }

    /// This server took the writer's lock: it starts replicating.
    pub fn became_writer(&self) {
        self.0.send_modify(|c| {
            c.role = Role::Writer;
            c.replication = Replication::NotStarted(None);
        });
    }

    /// This server lost the writer's lock (and with it the replication stream): a standby
    /// again, `starting` until it learns who holds the lock.
    pub fn became_standby(&self, why: String) {
        self.0.send_modify(|c| {
            c.role = Role::Standby;
            c.lock = Lock::Lost(format!(
                "lost the writer's lock and the replication stream: {why}"
            ));
            c.replication = Replication::NotStarted(None);
            c.storage_error = None;
        });
    }

    /// The server is shutting down: it takes no new work.
    pub fn stop(&self) {
        self.0.send_modify(|c| c.stopping = true);
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

    /// Waits until `gate` is open, up to [`GATE_WAIT`], or [`STANDBY_WRITE_WAIT`] on a standby
    /// that knows another server writes (long enough for a hand-over, short enough that a
    /// load balancer soon tries the writer); otherwise says what it waited for. A replica, or a
    /// server shutting down, says so at once for [`Gate::Write`].
    pub async fn wait(&self, gate: Gate) -> Result<(), String> {
        let open = |c: &Conditions| match gate {
            Gate::Read => c.restored,
            Gate::Write => c.writable(),
        };
        let hopeless =
            |c: &Conditions| gate == Gate::Write && (c.role == Role::Replica || c.stopping);
        let patience = {
            let c = self.0.borrow();
            if gate == Gate::Write && c.role == Role::Standby && c.lock == Lock::HeldElsewhere {
                STANDBY_WRITE_WAIT
            } else {
                GATE_WAIT
            }
        };
        let mut changes = self.0.subscribe();
        let opened = matches!(
            tokio::time::timeout(patience, changes.wait_for(|c| open(c) || hopeless(c))).await,
            Ok(Ok(c)) if open(&c)
        );
        if opened {
            Ok(())
        } else {
            Err(self.unmet(gate))
        }
    }

    /// The message of a request whose gate stayed shut.
    fn unmet(&self, gate: Gate) -> String {
        let c = self.0.borrow();
        if !c.restored {
            return "Timeout waiting for stored shapes to be restored".into();
        }
        if c.stopping {
            return STOPPING.into();
        }
        match (c.role, &c.lock) {
            (Role::Replica, _) => return "This server is a read replica (--role=replica): it serves existing shapes; new shapes, subset snapshots and deletes are served by the writer".into(),
            (Role::Standby, Lock::HeldElsewhere) => return "Timeout waiting for Postgres lock acquisition: another server holds the writer's lock and serves new shapes, subset snapshots and deletes".into(),
            (Role::Standby, Lock::Failing(why)) => {
                return format!("Timeout waiting for Postgres lock acquisition: {why}")
            }
            (Role::Standby, _) => return "Timeout waiting for Postgres lock acquisition".into(),
            (Role::Writer, _) => {}
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
        let health = HealthState::new(Role::Standby);
        assert_eq!(health.status().phase, Phase::Starting);
        health.restored();
        assert_eq!(health.status().phase, Phase::Waiting);
        health.lock_failing("connection refused".into());
        assert_eq!(
            health.status(),
            Status {
                phase: Phase::Waiting,
                role: Role::Standby,
                problem: Some("connection refused".into())
            }
        );
        health.lock_held_elsewhere();
        assert_eq!(health.status().phase, Phase::Active, "a standby serves");
        health.became_writer();
        assert_eq!(health.status().phase, Phase::Starting);
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
                role: Role::Writer,
                problem: Some("No space left on device".into())
            }
        );
        health.became_standby("lock lost".into());
        assert_eq!(health.status().role, Role::Standby);
        assert_eq!(health.status().phase, Phase::Starting);
        health.lock_failing("connection refused".into());
        assert_eq!(
            health.status().phase,
            Phase::Starting,
            "lost until it knows more"
        );
        health.lock_held_elsewhere();
        assert_eq!(health.status().phase, Phase::Active);
        health.stop();
        assert_eq!(health.status().phase, Phase::Starting);
    }

    #[tokio::test(start_paused = true)]
    async fn a_replica_refuses_writes_at_once() {
        let health = HealthState::new(Role::Replica);
        health.restored();
        assert_eq!(health.status().phase, Phase::Active);
        let started = tokio::time::Instant::now();
        let refused = health.wait(Gate::Write).await.unwrap_err();
        assert!(refused.contains("read replica"), "{refused}");
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(health.wait(Gate::Read).await, Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn gates_wait_then_say_why() {
        let health = std::sync::Arc::new(HealthState::new(Role::Standby));
        let waiting = tokio::spawn({
            let health = health.clone();
            async move { health.wait(Gate::Read).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        health.restored();
        assert_eq!(waiting.await.unwrap(), Ok(()));
        assert_eq!(
            health.wait(Gate::Write).await,
            Err("Timeout waiting for Postgres lock acquisition".into())
        );
        health.lock_held_elsewhere();
        let started = tokio::time::Instant::now();
        let refused = health.wait(Gate::Write).await.unwrap_err();
        assert!(
            refused.contains("another server holds the writer's lock"),
            "{refused}"
        );
        assert_eq!(started.elapsed(), STANDBY_WRITE_WAIT, "a hand-over's worth");
        health.became_writer();
        assert_eq!(
            health.wait(Gate::Write).await,
            Err("Timeout waiting for replication client to be ready".into())
        );
    }
}

//! A shape's state and the requests waiting for it to change.
//!
//! [`StateCell`] does what `tokio::sync::watch` does for one value, kept inline in the shape: a watch channel
//! allocates about 400 bytes apart (eight wait lists, to spread thousands of waiters over
//! cores), and most of a large server's shapes are idle with nobody waiting. Waiters borrow
//! the cell, so it cannot go away while one waits.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::RwLock;

use syncline_core::LogOffset;
use tokio::sync::Notify;

/// What requests wait on: published by the pipeline and the snapshot task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShapeState {
    /// The last offset readers may be given, durable on disk.
    pub durable: Option<LogOffset>,
    /// The initial snapshot is complete (and durable).
    pub snapshot_done: bool,
    /// Bumped whenever more of a running snapshot is readable.
    pub snapshot_progress: u64,
    /// The shape was invalidated or deleted: requests for it get 409.
    pub gone: bool,
    /// The snapshot failed (the shape is gone too).
    pub failed: Option<Failure>,
}

/// Why a shape's snapshot failed, and whose fault that was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What went wrong (Postgres's own message when it was Postgres).
    pub message: String,
    /// Whose fault it was.
    pub blame: Blame,
}

/// Whose fault a failed snapshot was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blame {
    /// The where clause met data it cannot handle (a data or SQL error): the request's.
    Request,
    /// The table cannot be read by the server's role, or is gone.
    Table,
    /// Postgres or storage could not serve it: retrying may help.
    Server,
}

/// The state, the number of its changes, and the waiters to wake on each.
#[derive(Debug)]
pub struct StateCell {
    state: RwLock<ShapeState>,
    /// Bumped, under the write lock, by every change.
    version: AtomicU64,
    /// Live [`StateWatch`]es.
    watchers: AtomicUsize,
    changed: Notify,
}

impl StateCell {
    /// A cell holding `state`.
    pub fn new(state: ShapeState) -> StateCell {
        StateCell {
            state: RwLock::new(state),
            version: AtomicU64::new(0),
            watchers: AtomicUsize::new(0),
            changed: Notify::new(),
        }
    }

    /// A copy of the state.
    pub fn get(&self) -> ShapeState {
        self.state.read().expect("shape state lock").clone()
    }

    /// Changes the state with `f` and wakes every waiter.
    pub fn modify(&self, f: impl FnOnce(&mut ShapeState)) {
        self.modify_if(|s| {
            f(s);
            true
        });
    }

    /// Changes the state with `f`, and wakes every waiter if `f` says it changed it.
    pub fn modify_if(&self, f: impl FnOnce(&mut ShapeState) -> bool) {
        {
            let mut state = self.state.write().expect("shape state lock");
            if !f(&mut state) {
                return;
            }
            self.version.fetch_add(1, Ordering::Release);
        }
        self.changed.notify_waiters();
    }

    /// A waiter that has seen the state as it is now. Counted before it returns, in the one
    /// order of all `SeqCst` operations (see [`crate::shapes::Shape::subscribe`]).
    pub fn watch(&self) -> StateWatch<'_> {
        self.watchers.fetch_add(1, Ordering::SeqCst);
        StateWatch {
            cell: self,
            seen: self.version.load(Ordering::Acquire),
        }
    }

    /// How many [`StateWatch`]es exist.
    pub fn watchers(&self) -> usize {
        self.watchers.load(Ordering::SeqCst)
    }
}

/// One waiter's view of a [`StateCell`]: which change it saw last.
#[derive(Debug)]
pub struct StateWatch<'a> {
    cell: &'a StateCell,
    seen: u64,
}

impl StateWatch<'_> {
    /// A copy of the state, now seen.
    pub fn borrow_and_update(&mut self) -> ShapeState {
        let state = self.cell.state.read().expect("shape state lock");
        self.seen = self.cell.version.load(Ordering::Acquire);
        state.clone()
    }

    /// Waits until the state changed since it was last seen, and marks that change seen.
    /// Cancel-safe: dropping the future loses nothing.
    pub async fn changed(&mut self) {
        loop {
            let notified = self.cell.changed.notified();
            tokio::pin!(notified);
            // Registered before the version is read: a change made after the read wakes it.
            notified.as_mut().enable();
            let now = self.cell.version.load(Ordering::Acquire);
            if now != self.seen {
                self.seen = now;
                return;
            }
            notified.await;
        }
    }
}

impl Drop for StateWatch<'_> {
    fn drop(&mut self) {
        self.cell.watchers.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_waiter_wakes_on_a_change_and_not_before() {
        let cell = Arc::new(StateCell::new(ShapeState::default()));
        let mut waiters = Vec::new();
        for _ in 0..64 {
            let cell = cell.clone();
            waiters.push(tokio::spawn(async move {
                let mut watch = cell.watch();
                assert!(!watch.borrow_and_update().snapshot_done);
                watch.changed().await;
                watch.borrow_and_update().snapshot_done
            }));
        }
        while cell.watchers() < 64 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            waiters.iter().all(|w| !w.is_finished()),
            "woken with no change"
        );
        cell.modify_if(|_| false);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            waiters.iter().all(|w| !w.is_finished()),
            "woken by no change"
        );
        cell.modify(|s| s.snapshot_done = true);
        for w in waiters {
            assert!(w.await.unwrap());
        }
        assert_eq!(cell.watchers(), 0);
    }

    #[tokio::test]
    async fn a_change_between_looks_is_not_missed() {
        let cell = StateCell::new(ShapeState::default());
        let mut watch = cell.watch();
        cell.modify(|s| s.snapshot_progress = 1);
        // Changed before the wait began: it returns at once, and the change is then seen.
        tokio::time::timeout(Duration::from_secs(5), watch.changed())
            .await
            .expect("a change made before the wait is seen");
        let waited = tokio::time::timeout(Duration::from_millis(20), watch.changed()).await;
        assert!(waited.is_err(), "the same change seen twice");
        assert_eq!(watch.borrow_and_update().snapshot_progress, 1);
    }
}

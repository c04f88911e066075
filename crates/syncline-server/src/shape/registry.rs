//! The registry: every live shape by identity and by handle, and each shape's observable state.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use syncline_core::{LogOffset, RelationDesc};
use syncline_storage::{Reader, Store};
use tokio::sync::watch;

use super::definition::ShapeDefinition;
use super::writer::SharedWriter;

/// Readers kept per shape for reuse by requests.
const IDLE_READERS_MAX: usize = 8;

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
    /// The snapshot failed with this error (the shape is gone too).
    pub failed: Option<String>,
}

/// A live shape.
#[derive(Debug)]
pub struct Shape {
    /// Its handle (and its log's id in the store).
    pub handle: String,
    /// Its definition.
    pub definition: ShapeDefinition,
    /// The table as it was when the shape was made.
    pub relation: RelationDesc,
    /// Its log's writer (opened on first use).
    pub writer: SharedWriter,
    state: watch::Sender<ShapeState>,
    readers: Mutex<Vec<Reader>>,
    last_used_ms: AtomicU64,
}

impl Shape {
    /// A shape in the given state.
    pub fn new(
        handle: String,
        definition: ShapeDefinition,
        relation: RelationDesc,
        writer: SharedWriter,
        state: ShapeState,
    ) -> Shape {
        Shape {
            handle,
            definition,
            relation,
            writer,
            state: watch::Sender::new(state),
            readers: Mutex::new(Vec::new()),
            last_used_ms: AtomicU64::new(now_ms()),
        }
    }

    /// Records a request for the shape (eviction drops the least recently used).
    pub fn touch(&self) {
        self.last_used_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// When the shape was last requested, in milliseconds since the Unix epoch.
    pub fn last_used(&self) -> u64 {
        self.last_used_ms.load(Ordering::Relaxed)
    }

    /// The current state.
    pub fn state(&self) -> ShapeState {
        self.state.borrow().clone()
    }

    /// A receiver that wakes on every state change.
    pub fn subscribe(&self) -> watch::Receiver<ShapeState> {
        self.state.subscribe()
    }

    /// Changes the state and wakes waiters.
    pub fn update(&self, f: impl FnOnce(&mut ShapeState)) {
        self.state.send_modify(f);
    }

    /// Runs `f` with a reader of the shape's log, reusing an idle one when possible.
    pub fn with_reader<T>(
        &self,
        store: &Store,
        f: impl FnOnce(&mut Reader) -> syncline_storage::Result<T>,
    ) -> syncline_storage::Result<T> {
        let idle = self.readers.lock().expect("readers lock").pop();
        let mut reader = match idle {
            Some(r) => r,
            None => store.open_reader(&self.handle)?,
        };
        let result = f(&mut reader);
        if result.is_ok() {
            let mut idle = self.readers.lock().expect("readers lock");
            if idle.len() < IDLE_READERS_MAX {
                idle.push(reader);
            }
        }
        result
    }
}

/// Every live shape, by identity and by handle.
#[derive(Debug, Default)]
pub struct Registry {
    by_identity: HashMap<String, Arc<Shape>>,
    by_handle: HashMap<String, Arc<Shape>>,
}

impl Registry {
    /// The live shape with this identity.
    pub fn by_identity(&self, identity: &str) -> Option<Arc<Shape>> {
        self.by_identity.get(identity).cloned()
    }

    /// The live shape with this handle.
    pub fn by_handle(&self, handle: &str) -> Option<Arc<Shape>> {
        self.by_handle.get(handle).cloned()
    }

    /// Adds a shape.
    pub fn insert(&mut self, shape: Arc<Shape>) {
        self.by_identity
            .insert(shape.definition.identity(), shape.clone());
        self.by_handle.insert(shape.handle.clone(), shape);
    }

    /// Removes a shape by handle, if it is the one registered.
    pub fn remove(&mut self, handle: &str) -> Option<Arc<Shape>> {
        let shape = self.by_handle.remove(handle)?;
        let identity = shape.definition.identity();
        if self
            .by_identity
            .get(&identity)
            .is_some_and(|s| s.handle == handle)
        {
            self.by_identity.remove(&identity);
        }
        Some(shape)
    }

    /// Number of live shapes.
    pub fn len(&self) -> usize {
        self.by_handle.len()
    }

    /// Whether there are no shapes.
    pub fn is_empty(&self) -> bool {
        self.by_handle.is_empty()
    }

    /// Every live shape.
    pub fn all(&self) -> Vec<Arc<Shape>> {
        self.by_handle.values().cloned().collect()
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

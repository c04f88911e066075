//! Following the writer through the files alone, on a server that does not hold the writer's
//! lock (a standby or a read replica): the shapes the writer makes and removes (its metadata
//! directory), and where each shape's log ends (its log directory), so live requests are
//! answered as soon as the writer has written a commit.
//!
//! Two ways to notice, chosen with `--follow`: `inotify` (the default) watches the metadata
//! directory and every shape's log directory, and re-reads only what changed; `poll` re-reads,
//! every `--follow-poll-interval`, the end of every shape a request waits on, and the metadata
//! directory at most once a second. With inotify the poll still runs, as a backstop for what
//! inotify cannot see (a writer on another host of a network file system).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use inotify::{EventStream, Inotify, WatchDescriptor, WatchMask};

use crate::config::FollowMode;
use crate::progress::Progress;
use crate::shapes::{Shape, Shapes};

/// Shortest interval between two reads of the whole metadata directory when polling.
const CATALOG_POLL_INTERVAL_MIN: Duration = Duration::from_secs(1);
/// Bytes of inotify events read at once.
const EVENT_BUFFER_BYTES: usize = 64 * 1024;

/// Follows the writer until the task is dropped (when this server becomes the writer).
pub async fn follow(
    shapes: Arc<Shapes>,
    progress: Arc<Progress>,
    mode: FollowMode,
    poll_interval: Duration,
) {
    // The writer writes every change to the files at once while it sees this mark.
    let _mark = shapes.mark_follower().map_err(|e| {
        tracing::warn!(error = %e, "cannot mark the shape logs as followed; the writer may keep changes to shapes nobody asks it for in memory, unseen here, until a request on it comes");
    });
    let mut watcher = match mode {
        FollowMode::Inotify => match Watcher::new(&shapes) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "inotify unavailable; following the writer by polling");
                None
            }
        },
        FollowMode::Poll => None,
    };
    let mut tick = tokio::time::interval(poll_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut catalog_read = Instant::now();
    loop {
        let changed = match watcher.as_mut() {
            Some(w) => tokio::select! {
                changed = w.next_changes() => Some(changed),
                _ = tick.tick() => None,
            },
            None => {
                tick.tick().await;
                None
            }
        };
        // Before the logs: a request woken by new data answers with the writer's position.
        // Files are read on the blocking pool and awaited, never in place: a task that blocked
        // in place goes on running while the runtime shuts down, and its next timer panics.
        let reading = progress.clone();
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || reading.follow()).await {
            tracing::debug!(error = %e, "could not read the writer's progress");
        }
        match changed {
            Some(Changes { catalog, logs }) => {
                if catalog {
                    refresh_catalog(&shapes, watcher.as_mut()).await;
                }
                let changed: Vec<Arc<Shape>> =
                    logs.iter().filter_map(|h| shapes.by_handle(h)).collect();
                follow_ends(changed).await;
            }
            None => {
                let poll_catalog = watcher.is_none()
                    && catalog_read.elapsed() >= poll_interval.max(CATALOG_POLL_INTERVAL_MIN);
                if poll_catalog {
                    catalog_read = Instant::now();
                    refresh_catalog(&shapes, None).await;
                }
                let waited_on: Vec<Arc<Shape>> = shapes
                    .all()
                    .into_iter()
                    .filter(|s| s.has_waiters())
                    .collect();
                follow_ends(waited_on).await;
            }
        }
    }
}

/// Registers what the writer made and forgets what it removed (reading the metadata on the
/// blocking pool); watches the new shapes' logs.
async fn refresh_catalog(shapes: &Arc<Shapes>, watcher: Option<&mut Watcher>) {
    let following = shapes.clone();
    match tokio::task::spawn_blocking(move || following.follow_catalog()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "could not read the writer's shape metadata");
            return;
        }
        Err(_) => return,
    }
    if let Some(w) = watcher {
        w.watch_shapes(shapes);
    }
}

/// Reads where each shape's log ends now, on the blocking pool.
async fn follow_ends(changed: Vec<Arc<Shape>>) {
    if changed.is_empty() {
        return;
    }
    let read = tokio::task::spawn_blocking(move || {
        for shape in changed {
            if let Err(e) = shape.follow_end() {
                if !shape.state().gone {
                    tracing::debug!(handle = %shape.handle, error = %e, "could not read where a shape log ends");
                }
            }
        }
    });
    let _ = read.await;
}

/// What the events read at once said changed.
struct Changes {
    /// The metadata directory changed (a shape was made or removed).
    catalog: bool,
    /// Handles whose log directory changed.
    logs: HashSet<String>,
}

/// inotify watches on the metadata directory and on every registered shape's log directory.
struct Watcher {
    events: EventStream<Vec<u8>>,
    catalog: WatchDescriptor,
    /// The handle of each watched log directory.
    logs: HashMap<WatchDescriptor, String>,
    /// The watch of each watched handle.
    watched: HashMap<String, WatchDescriptor>,
}

impl Watcher {
    fn new(shapes: &Shapes) -> std::io::Result<Watcher> {
        let inotify = Inotify::init()?;
        let catalog = inotify.watches().add(
            shapes.meta_dir(),
            WatchMask::MOVED_TO | WatchMask::CREATE | WatchMask::DELETE | WatchMask::CLOSE_WRITE,
        )?;
        let events = inotify.into_event_stream(vec![0u8; EVENT_BUFFER_BYTES])?;
        let mut watcher = Watcher {
            events,
            catalog,
            logs: HashMap::new(),
            watched: HashMap::new(),
        };
        watcher.watch_shapes(shapes);
        Ok(watcher)
    }

    /// Watches the log directory of every registered shape not yet watched, and drops the
    /// watches of shapes no longer registered.
    fn watch_shapes(&mut self, shapes: &Shapes) {
        let registered: HashSet<String> =
            shapes.all().into_iter().map(|s| s.handle.clone()).collect();
        let stale: Vec<String> = self
            .watched
            .keys()
            .filter(|h| !registered.contains(*h))
            .cloned()
            .collect();
        let mut watches = self.events.watches();
        for handle in stale {
            if let Some(wd) = self.watched.remove(&handle) {
                self.logs.remove(&wd);
                // The directory may be gone already, which removed the watch.
                let _ = watches.remove(wd);
            }
        }
        for handle in registered {
            if self.watched.contains_key(&handle) {
                continue;
            }
            let mask = WatchMask::MODIFY | WatchMask::CREATE | WatchMask::MOVED_TO;
            match watches.add(shapes.log_dir(&handle), mask) {
                Ok(wd) => {
                    self.logs.insert(wd.clone(), handle.clone());
                    self.watched.insert(handle, wd);
                }
                Err(e) => {
                    tracing::debug!(handle, error = %e, "cannot watch a shape log; it is polled")
                }
            }
        }
    }

    /// Waits for events, then takes every one already queued.
    async fn next_changes(&mut self) -> Changes {
        let mut changes = Changes {
            catalog: false,
            logs: HashSet::new(),
        };
        let mut first = true;
        loop {
            let event = if first {
                first = false;
                self.events.next().await
            } else {
                match futures_util::FutureExt::now_or_never(self.events.next()) {
                    Some(event) => event,
                    None => return changes,
                }
            };
            match event {
                Some(Ok(event)) if event.mask.contains(inotify::EventMask::Q_OVERFLOW) => {
                    changes.catalog = true;
                    changes.logs.extend(self.watched.keys().cloned());
                }
                Some(Ok(event)) if event.wd == self.catalog => changes.catalog = true,
                Some(Ok(event)) => {
                    if let Some(handle) = self.logs.get(&event.wd) {
                        changes.logs.insert(handle.clone());
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "reading inotify events failed");
                    changes.catalog = true;
                    return changes;
                }
                None => return changes,
            }
        }
    }
}

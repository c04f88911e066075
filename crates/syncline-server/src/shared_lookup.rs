//! Catalog lookups shared by the requests that wait for them at the same time: a burst of
//! thousands of requests on one table costs a few round trips to Postgres, not thousands.
//!
//! A caller only ever takes the result of a lookup that *started after it arrived*, so it sees
//! the catalog at least as it was when its request came in (a table altered or dropped just
//! before is never answered from before the change), exactly as if it had looked it up
//! alone. Lookups of one key run one at a time; callers that arrive while one runs share the
//! next. Nothing is kept once no caller waits, so memory does not grow with the keys asked
//! about.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Lookups by key whose results concurrent callers share.
pub struct SharedLookups<K, V> {
    slots: Mutex<HashMap<K, Arc<Slot<V>>>>,
}

/// One key's lookups: how many have started, and the last one's result with its number.
struct Slot<V> {
    started: AtomicU64,
    last: tokio::sync::Mutex<Option<(u64, V)>>,
}

impl<K, V> Default for SharedLookups<K, V> {
    fn default() -> Self {
        SharedLookups {
            slots: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Hash + Eq + Clone, V: Clone> SharedLookups<K, V> {
    /// The result for `key`: that of a lookup another caller started after this call arrived,
    /// or of `lookup` run now. A failed lookup is not shared (each caller then tries its own).
    pub async fn get<E>(
        &self,
        key: &K,
        lookup: impl AsyncFnOnce() -> Result<V, E>,
    ) -> Result<V, E> {
        let slot = self
            .slots
            .lock()
            .expect("lookup slots lock")
            .entry(key.clone())
            .or_insert_with(|| {
                Arc::new(Slot {
                    started: AtomicU64::new(0),
                    last: tokio::sync::Mutex::new(None),
                })
            })
            .clone();
        let arrived = slot.started.load(Ordering::SeqCst);
        let result = {
            let mut last = slot.last.lock().await;
            match &*last {
                Some((number, value)) if *number > arrived => Ok(value.clone()),
                _ => {
                    let number = slot.started.fetch_add(1, Ordering::SeqCst) + 1;
                    let looked_up = lookup().await;
                    if let Ok(value) = &looked_up {
                        *last = Some((number, value.clone()));
                    }
                    looked_up
                }
            }
        };
        let mut slots = self.slots.lock().expect("lookup slots lock");
        // The map's reference and this one: no caller waits on the slot any more.
        if Arc::strong_count(&slot) == 2 {
            slots.remove(key);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn callers_arriving_during_a_lookup_share_the_next_one() {
        let lookups = Arc::new(SharedLookups::<u32, usize>::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let (release, released) = tokio::sync::watch::channel(false);
        let slow = |lookups: Arc<SharedLookups<u32, usize>>| {
            let (runs, mut released) = (runs.clone(), released.clone());
            async move {
                lookups
                    .get(&1, async || {
                        let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                        released.wait_for(|r| *r).await.unwrap();
                        Ok::<_, ()>(n)
                    })
                    .await
            }
        };
        let first = tokio::spawn(slow(lookups.clone()));
        while runs.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let later: Vec<_> = (0..10)
            .map(|_| tokio::spawn(slow(lookups.clone())))
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        release.send(true).unwrap();
        assert_eq!(first.await.unwrap(), Ok(1));
        for caller in later {
            assert_eq!(
                caller.await.unwrap(),
                Ok(2),
                "a caller never takes a lookup that started before it arrived"
            );
        }
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert!(lookups.slots.lock().unwrap().is_empty(), "nothing is kept");
    }

    #[tokio::test]
    async fn a_caller_alone_looks_up_for_itself_every_time() {
        let lookups = SharedLookups::<&str, u32>::default();
        let mut runs = 0;
        for expected in 1..=3 {
            let got = lookups
                .get(&"users", async || {
                    runs += 1;
                    Ok::<_, ()>(runs)
                })
                .await;
            assert_eq!(got, Ok(expected));
        }
        let failed = lookups.get(&"users", async || Err::<u32, _>("down")).await;
        assert_eq!(failed, Err("down"));
    }
}

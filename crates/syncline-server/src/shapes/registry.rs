//! The registry: every live shape by identity and by handle.
//!
//! Both indexes hold the shape alone, with the hash of its key: neither the identity (a JSON
//! text of about a hundred bytes) nor a copy of the handle is kept per shape, so a server with
//! hundreds of thousands of idle shapes does not pay for them twice.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;

use super::shape::Shape;

/// Every live shape, by identity and by handle.
#[derive(Debug, Default)]
pub struct Registry {
    /// By the hash of `definition.identity()`.
    by_identity: HashTable<(u64, Arc<Shape>)>,
    /// By the hash of `handle`.
    by_handle: HashTable<(u64, Arc<Shape>)>,
    hasher: RandomState,
}

impl Registry {
    /// The live shape with this identity.
    pub fn by_identity(&self, identity: &str) -> Option<Arc<Shape>> {
        let hash = self.hasher.hash_one(identity);
        self.by_identity
            .find(hash, |(h, s)| {
                *h == hash && s.definition.identity() == identity
            })
            .map(|(_, s)| s.clone())
    }

    /// The live shape with this handle.
    pub fn by_handle(&self, handle: &str) -> Option<Arc<Shape>> {
        let hash = self.hasher.hash_one(handle);
        self.by_handle
            .find(hash, |(h, s)| *h == hash && s.handle == handle)
            .map(|(_, s)| s.clone())
    }

    /// Adds a shape, replacing the one with its identity or its handle.
    pub fn insert(&mut self, shape: Arc<Shape>) {
        let identity = shape.definition.identity();
        let hash = self.hasher.hash_one(&identity);
        let entry = self.by_identity.entry(
            hash,
            |(h, s)| *h == hash && s.definition.identity() == identity,
            |(h, _)| *h,
        );
        entry.insert((hash, shape.clone()));
        let hash = self.hasher.hash_one(&shape.handle);
        let entry = self.by_handle.entry(
            hash,
            |(h, s)| *h == hash && s.handle == shape.handle,
            |(h, _)| *h,
        );
        entry.insert((hash, shape));
    }

    /// Removes a shape by handle, if it is the one registered.
    pub fn remove(&mut self, handle: &str) -> Option<Arc<Shape>> {
        let hash = self.hasher.hash_one(handle);
        let (_, shape) = self
            .by_handle
            .find_entry(hash, |(h, s)| *h == hash && s.handle == handle)
            .ok()?
            .remove()
            .0;
        let identity = shape.definition.identity();
        let hash = self.hasher.hash_one(&identity);
        if let Ok(entry) = self
            .by_identity
            .find_entry(hash, |(h, s)| *h == hash && s.handle == handle)
        {
            entry.remove();
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
        self.by_handle.iter().map(|(_, s)| s.clone()).collect()
    }
}

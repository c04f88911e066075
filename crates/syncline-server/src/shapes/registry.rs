//! The registry: every live shape by identity and by handle.

use std::collections::HashMap;
use std::sync::Arc;

use super::shape::Shape;

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

//! The registry: every live shape by identity and by handle.
//!
//! Both indexes hold the shape alone, with the hash of its key: neither the identity (a JSON
//! text of about a hundred bytes) nor a copy of the handle is kept per shape, so a server with
//! hundreds of thousands of idle shapes does not pay for them twice.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;

/// Shapes per table OID, by table name, by schema.
type TableCounts = HashMap<String, HashMap<String, HashMap<u32, usize>>>;
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
    /// By schema, then table name: how many shapes were made on each table (OID) that had
    /// that name.
    tables: TableCounts,
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
        count_table(&mut self.tables, &shape, true);
        match entry {
            hashbrown::hash_table::Entry::Occupied(mut occupied) => {
                let replaced = std::mem::replace(occupied.get_mut(), (hash, shape));
                count_table(&mut self.tables, &replaced.1, false);
            }
            hashbrown::hash_table::Entry::Vacant(vacant) => {
                vacant.insert((hash, shape));
            }
        }
    }

    /// Whether shapes made on a table of `schema`.`name` other than the one with `oid` (a
    /// table dropped and made again under its name) are registered.
    pub fn has_other_table(&self, schema: &str, name: &str, oid: u32) -> bool {
        self.tables
            .get(schema)
            .and_then(|names| names.get(name))
            .is_some_and(|oids| oids.keys().any(|&o| o != oid))
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
        count_table(&mut self.tables, &shape, false);
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

/// Counts `shape` in (or out of) the registry's shapes per table.
fn count_table(tables: &mut TableCounts, shape: &Shape, added: bool) {
    let relation = &shape.relation;
    let names = tables.entry(relation.schema.clone()).or_default();
    let oids = names.entry(relation.name.clone()).or_default();
    let count = oids.entry(relation.oid).or_default();
    if added {
        *count += 1;
    } else {
        assert!(*count > 0, "a shape is counted out only once counted in");
        *count -= 1;
        if *count == 0 {
            oids.remove(&relation.oid);
            if oids.is_empty() {
                names.remove(&relation.name);
                if names.is_empty() {
                    tables.remove(&relation.schema);
                }
            }
        }
    }
}

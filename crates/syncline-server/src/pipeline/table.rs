//! One replicated table's shapes: their router, where clauses, encoders, and how incoming
//! tuples map onto the column layout the shapes were checked against.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use syncline_core::{RelationDesc, Value};
use syncline_pg::replication::RelationMessage;
use syncline_storage::Operation;
use syncline_where::{Router, Row, RowTypes, ShapeId, Where};

use super::encode::{ChangeContext, ChangeEncoder, EncoderLayout, PendingMessage, ShapeChange};
use super::feed::Feed;
use super::subquery::{Dep, SetViews, Subq};
use crate::shapes::Shape;
use crate::subquery::write_row_headers;

/// The pipeline's state for one shape.
pub struct Slot {
    /// The shape.
    pub shape: Arc<Shape>,
    /// Builds its messages.
    pub encoder: ChangeEncoder,
    /// Its where clause, checked against the table's layout.
    pub filter: Option<Where>,
    /// Which transactions reach its log, and when.
    pub feed: Feed,
    /// A subquery shape's value sets and what waits for them.
    pub subquery: Option<Box<Subq>>,
}

impl Slot {
    /// The messages a change makes for the shape (none if it does not concern it), rows in the
    /// table's layout, headers left open. A subquery shape's rows are judged against the value
    /// sets its log reflects, and carry their tags. `certain`: the router found the shape's
    /// clause true for the change's only row ([`syncline_where::Router::affected_certain`]),
    /// so it is not evaluated again.
    pub fn messages(
        &self,
        types: &RowTypes,
        old: Option<&[Value]>,
        new: Option<&[Value]>,
        ctx: ChangeContext,
        certain: bool,
    ) -> Vec<PendingMessage> {
        let evaluate = !certain || self.subquery.is_some();
        let old_row = old.filter(|_| evaluate).map(|v| Row::new(types, v));
        let new_row = new.filter(|_| evaluate).map(|v| Row::new(types, v));
        let includes = |row: &Option<Row>| {
            row.as_ref()
                .is_some_and(|r| match (&self.filter, &self.subquery) {
                    (None, _) => true,
                    (Some(f), Some(sq)) => f.includes_in(r, &SetViews(&sq.views)),
                    (Some(f), None) => f.includes(r),
                })
        };
        let (was_in, is_in) = if evaluate {
            (includes(&old_row), includes(&new_row))
        } else {
            assert!(
                old.is_none() || new.is_none(),
                "a certain match is of a change with one row"
            );
            (old.is_some(), new.is_some())
        };
        let change = match (old, new, was_in, is_in) {
            (_, Some(new), false, true) => ShapeChange::Insert(new),
            (Some(old), _, true, false) => ShapeChange::Delete(old),
            // A subquery shape's update is sent even when no selected column changed: its
            // tags may have.
            (Some(old), Some(new), true, true)
                if self.subquery.is_some() || self.encoder.touches(old, new) =>
            {
                ShapeChange::Update { old, new }
            }
            _ => return Vec::new(),
        };
        let mut messages = self.encoder.encode(change, ctx);
        if let (Some(filter), Some(sq)) = (&self.filter, &self.subquery) {
            let views = SetViews(&sq.views);
            for m in &mut messages {
                let (row, removed_from) = match m.op {
                    Operation::Insert => (new_row.as_ref(), None),
                    Operation::Update => (new_row.as_ref(), old_row.as_ref()),
                    Operation::Delete => (old_row.as_ref(), None),
                };
                if let Some(row) = row {
                    write_row_headers(&mut m.json, filter, &views, row, removed_from, &sq.prefix);
                }
            }
        }
        messages
    }
}

/// Whether a shape loses a column it needs from the table (selected or where-clause; the key
/// is checked once for all, by the caller) when the stream lays the table's columns out as
/// `layout` (for each column of `relation`, its position now, `None` if gone). Checked for
/// every shape on the table whenever Postgres describes it, so it allocates next to nothing.
fn loses_a_column(slot: &Slot, relation: &RelationDesc, layout: &[Option<usize>]) -> bool {
    let gone = |name: &str| {
        relation
            .column(name)
            .is_none_or(|(i, _)| layout[i].is_none())
    };
    slot.shape.definition.columns.iter().any(|c| gone(c))
        || slot
            .filter
            .as_ref()
            .is_some_and(|f| f.columns().into_iter().any(|i| layout[i].is_none()))
}

/// A table with shapes.
pub struct Table {
    /// The layout shapes are checked against.
    pub relation: RelationDesc,
    /// Column types of that layout, for evaluation.
    pub types: RowTypes,
    /// For each column of `relation`, its position in the tuples pgoutput sends now (`None`:
    /// the column is gone). `None` until the stream described the table: tuples are then
    /// taken to be in `relation`'s layout.
    pub layout: Option<Vec<Option<usize>>>,
    /// The router over the shapes' where clauses.
    pub router: Router,
    /// The shapes.
    pub slots: HashMap<ShapeId, Box<Slot>>,
    /// Subquery shapes whose value sets are not known yet: every change is theirs.
    pub unrouted: HashSet<ShapeId>,
    /// The router over the subqueries that read this table (ids are the dependencies').
    pub dep_router: Router,
    /// The subqueries that read this table.
    pub deps: HashMap<ShapeId, Dep>,
    /// Nested subqueries that read this table: every change is theirs.
    pub unrouted_deps: HashSet<ShapeId>,
    /// The encoder layouts of the shapes, by selected column positions: shapes selecting the
    /// same columns share one.
    layouts: HashMap<Vec<usize>, Arc<EncoderLayout>>,
}

impl Table {
    /// An empty table with layout `relation`.
    pub fn new(relation: RelationDesc) -> Table {
        Table {
            types: RowTypes::of(&relation),
            router: Router::new(&relation),
            dep_router: Router::new(&relation),
            relation,
            layout: None,
            slots: HashMap::new(),
            unrouted: HashSet::new(),
            deps: HashMap::new(),
            unrouted_deps: HashSet::new(),
            layouts: HashMap::new(),
        }
    }

    /// Whether neither a shape nor a subquery reads the table.
    pub fn is_unused(&self) -> bool {
        self.slots.is_empty() && self.deps.is_empty()
    }

    /// Adds a shape.
    pub fn add(&mut self, id: ShapeId, slot: Slot) {
        self.router.add(id, slot.filter.as_ref());
        self.slots.insert(id, Box::new(slot));
    }

    /// Removes a shape.
    pub fn remove(&mut self, id: ShapeId) -> Option<Slot> {
        self.router.remove(id);
        self.unrouted.remove(&id);
        let slot = *self.slots.remove(&id)?;
        // The map's reference and the slot's: no other shape uses the layout.
        if Arc::strong_count(slot.encoder.layout()) == 2 {
            self.layouts
                .retain(|_, layout| !Arc::ptr_eq(layout, slot.encoder.layout()));
        }
        Some(slot)
    }

    /// Builds a shape's slot against the table's layout; `None` if the shape no longer fits
    /// it.
    pub fn slot_for(&mut self, shape: Arc<Shape>, feed: Feed) -> Option<Slot> {
        let definition = &shape.definition;
        let positions = definition.column_positions(&self.relation)?;
        let layout = match self.layouts.get(&positions) {
            Some(layout) => layout.clone(),
            None => {
                let layout = Arc::new(EncoderLayout::new(&positions, &self.relation)?);
                self.layouts.insert(positions, layout.clone());
                layout
            }
        };
        let encoder = ChangeEncoder::with_layout(layout, definition);
        let filter = match definition.checked_where(&self.relation) {
            Some(checked) => Some(checked.ok()?),
            None => None,
        };
        Some(Slot {
            shape,
            encoder,
            filter,
            feed,
            subquery: None,
        })
    }

    /// The stream described the table anew: recomputes the layout and returns the shapes it
    /// breaks: all of them when the table was renamed; those whose selected, key or where
    /// columns were dropped, renamed or retyped; and those selecting the whole table (no
    /// `columns`) when any column was added, dropped or changed.
    pub fn describe(&mut self, message: &RelationMessage) -> Vec<ShapeId> {
        let renamed = message.schema != self.relation.schema || message.name != self.relation.name;
        let layout: Vec<Option<usize>> = self
            .relation
            .columns
            .iter()
            .map(|c| {
                message.columns.iter().position(|m| {
                    m.name == c.name && m.type_oid == c.pg_type.oid && m.type_mod == c.type_mod
                })
            })
            .collect();
        let whole_table_changed = |made_on: &RelationDesc| {
            made_on.columns.len() != message.columns.len()
                || made_on.columns.iter().zip(&message.columns).any(|(c, m)| {
                    (&c.name, c.pg_type.oid, c.type_mod) != (&m.name, m.type_oid, m.type_mod)
                })
        };
        let key_gone = self.relation.primary_key().iter().any(|c| {
            self.relation
                .column(&c.name)
                .is_none_or(|(i, _)| layout[i].is_none())
        });
        let broken = self
            .slots
            .iter()
            .filter(|(_, slot)| {
                renamed
                    || key_gone
                    || (!slot.shape.definition.explicit_columns
                        && whole_table_changed(&slot.shape.relation))
                    || loses_a_column(slot, &self.relation, &layout)
            })
            .map(|(&id, _)| id)
            .collect();
        self.layout = Some(layout);
        broken
    }

    /// The subqueries reading this table that its layout (as last described) no longer
    /// serves: a column they read is gone or changed.
    pub fn broken_deps(&self) -> Vec<ShapeId> {
        let Some(layout) = &self.layout else {
            return Vec::new();
        };
        self.deps
            .iter()
            .filter(|(_, dep)| {
                dep.needed_columns().iter().any(|name| {
                    self.relation
                        .column(name)
                        .is_none_or(|(i, _)| layout[i].is_none())
                })
            })
            .map(|(&id, _)| id)
            .collect()
    }

    /// A pgoutput tuple in the table's layout (gone columns read as NULL).
    pub fn project(&self, tuple: Vec<Value>) -> Vec<Value> {
        match &self.layout {
            None => tuple,
            Some(layout) => layout
                .iter()
                .map(|pos| {
                    pos.and_then(|p| tuple.get(p).cloned())
                        .unwrap_or(Value::Null)
                })
                .collect(),
        }
    }
}

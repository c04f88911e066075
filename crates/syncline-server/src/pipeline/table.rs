//! One replicated table's shapes: their router, where clauses, encoders, and how incoming
//! tuples map onto the column layout the shapes were checked against.

use std::collections::HashMap;
use std::sync::Arc;

use syncline_core::{RelationDesc, Value};
use syncline_pg::replication::RelationMessage;
use syncline_where::{Router, RowTypes, ShapeId, Where};

use super::encode::ChangeEncoder;
use super::feed::Feed;
use crate::shapes::Shape;

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
}

/// Columns a shape needs from the table: selected, key and where-clause columns.
fn needed_columns(slot: &Slot, relation: &RelationDesc) -> Vec<String> {
    let mut names = slot.shape.definition.columns.clone();
    names.extend(relation.primary_key().iter().map(|c| c.name.clone()));
    if let Some(filter) = &slot.filter {
        names.extend(
            filter
                .columns()
                .into_iter()
                .map(|i| relation.columns[i].name.clone()),
        );
    }
    names
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
    pub slots: HashMap<ShapeId, Slot>,
}

impl Table {
    /// An empty table with layout `relation`.
    pub fn new(relation: RelationDesc) -> Table {
        Table {
            types: RowTypes::of(&relation),
            router: Router::new(&relation),
            relation,
            layout: None,
            slots: HashMap::new(),
        }
    }

    /// Adds a shape.
    pub fn add(&mut self, id: ShapeId, slot: Slot) {
        self.router.add(id, slot.filter.as_ref());
        self.slots.insert(id, slot);
    }

    /// Removes a shape.
    pub fn remove(&mut self, id: ShapeId) -> Option<Slot> {
        self.router.remove(id);
        self.slots.remove(&id)
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
        let broken = self
            .slots
            .iter()
            .filter(|(_, slot)| {
                renamed
                    || (!slot.shape.definition.explicit_columns
                        && whole_table_changed(&slot.shape.relation))
                    || needed_columns(slot, &self.relation).iter().any(|name| {
                        self.relation
                            .column(name)
                            .is_none_or(|(i, _)| layout[i].is_none())
                    })
            })
            .map(|(&id, _)| id)
            .collect();
        self.layout = Some(layout);
        broken
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

/// Builds a shape's slot against `relation`; `None` if the shape no longer fits it.
pub fn slot_for(shape: Arc<Shape>, relation: &RelationDesc, feed: Feed) -> Option<Slot> {
    let definition = &shape.definition;
    let encoder = ChangeEncoder::new(definition, relation)?;
    let filter = match &definition.where_text {
        Some(text) => Some(Where::new(text, relation, &definition.params).ok()?),
        None => None,
    };
    Some(Slot {
        shape,
        encoder,
        filter,
        feed,
    })
}

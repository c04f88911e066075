//! Column values of one row, as carried by a change.

use bytes::Bytes;

/// One column value of a replicated row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// The value in Postgres text output form (under Syncline's session settings).
    Text(Bytes),
    /// A TOASTed value that the update did not change; Postgres did not send it.
    UnchangedToast,
}

impl Value {
    /// The text, if the value is present.
    pub fn as_text(&self) -> Option<&[u8]> {
        match self {
            Value::Text(b) => Some(b),
            _ => None,
        }
    }
}

/// A row's column values in the relation's column order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tuple(pub Vec<Value>);

impl Tuple {
    /// Fills columns the update left unchanged (TOAST) from the old row of the same key.
    pub fn fill_unchanged_from(&mut self, old: &Tuple) {
        for (new, old) in self.0.iter_mut().zip(&old.0) {
            if *new == Value::UnchangedToast {
                *new = old.clone();
            }
        }
    }
}

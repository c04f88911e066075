//! A row as evaluation sees it: column texts decoded on first use, once per row, shared by
//! every expression evaluated on it.

use std::cell::OnceCell;

use syncline_core::relation::RelationDesc;
use syncline_core::tuple::Value;

use crate::error::EvalError;
use crate::types::Type;
use crate::value::{Datum, Nullable};

/// The language type of each column of a relation (`None` for types it cannot use).
#[derive(Debug, Clone, PartialEq)]
pub struct RowTypes(pub(crate) Vec<Option<Type>>);

impl RowTypes {
    /// Types of the relation's columns, in column order.
    pub fn of(relation: &RelationDesc) -> RowTypes {
        RowTypes(
            relation
                .columns
                .iter()
                .map(|c| Type::from_pg(&c.pg_type))
                .collect(),
        )
    }
}

/// Column values of one row with lazily decoded, cached datums.
pub struct Row<'a> {
    types: &'a [Option<Type>],
    values: &'a [Value],
    cells: Vec<OnceCell<Result<Nullable, EvalError>>>,
}

impl<'a> Row<'a> {
    /// Wraps a row's values (in column order) with the relation's column types.
    pub fn new(types: &'a RowTypes, values: &'a [Value]) -> Row<'a> {
        Row {
            types: &types.0,
            values,
            cells: (0..values.len()).map(|_| OnceCell::new()).collect(),
        }
    }

    /// A row without columns, for constant expressions.
    pub(crate) fn empty() -> Row<'static> {
        Row {
            types: &[],
            values: &[],
            cells: Vec::new(),
        }
    }

    /// The decoded value of column `index`, decoding it on first use.
    pub(crate) fn get(&self, index: usize) -> Result<Nullable, EvalError> {
        let cell = self
            .cells
            .get(index)
            .ok_or_else(|| EvalError::Other(format!("row has no column {index}")))?;
        cell.get_or_init(|| self.decode(index)).clone()
    }

    /// The normal text of column `index` (equal for values Postgres's `=` calls equal); `None`
    /// for NULL.
    pub(crate) fn normal_text(&self, index: usize) -> Result<Option<String>, EvalError> {
        let ty = self.types.get(index).and_then(Option::as_ref);
        Ok(match (self.get(index)?, ty) {
            (Some(datum), Some(ty)) => Some(datum.normal_text(ty)),
            (Some(_), None) => self.raw_text(index),
            (None, _) => None,
        })
    }

    /// Column `index` as the text it came in (lossy UTF-8); `None` for NULL, unchanged TOAST
    /// or a missing column.
    pub(crate) fn raw_text(&self, index: usize) -> Option<String> {
        match self.values.get(index) {
            Some(Value::Text(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
            _ => None,
        }
    }

    fn decode(&self, index: usize) -> Result<Nullable, EvalError> {
        let ty = self.types.get(index).and_then(Option::as_ref);
        match (&self.values[index], ty) {
            (Value::Null, _) => Ok(None),
            (Value::UnchangedToast, _) => Err(EvalError::Other(format!(
                "column {index} is an unchanged TOAST value"
            ))),
            (Value::Text(_), None) => Err(EvalError::Other(format!(
                "column {index} has a type the language cannot use"
            ))),
            (Value::Text(bytes), Some(ty)) => {
                let text = std::str::from_utf8(bytes).map_err(|_| EvalError::invalid(ty, bytes))?;
                Datum::parse(ty, text).map(Some)
            }
        }
    }
}

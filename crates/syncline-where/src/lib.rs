//! Syncline's where-clause language: what a shape's `where` parameter may say, checked against
//! the shape's table, evaluated on replicated rows exactly as Postgres would, rendered back to
//! canonical SQL, and indexed by the shape router.
//!
//! Flow: [`Where::new`] parses with Postgres's own grammar (libpg_query), type-checks against a
//! [`RelationDesc`] and renders canonical SQL; [`Where::eval`] evaluates on a [`Row`] (column
//! texts decoded once per row); [`router::Router`] finds the shapes a change affects.
//!
//! **Invariants:** no I/O, no Postgres connections; user text never reaches Postgres: only
//! [`Where::sql`], rendered from the checked tree. Text compares bytewise (the "C" collation);
//! the session time zone is UTC.

pub mod check;
pub mod error;
pub mod eval;
pub mod expr;
pub mod like;
pub mod parse;
pub mod render;
pub mod router;
pub mod types;
pub mod value;

use syncline_core::relation::RelationDesc;

pub use error::{EvalError, WhereError};
pub use eval::{Row, RowTypes};
pub use expr::Expr;
pub use types::Type;

/// A checked where clause.
#[derive(Debug, Clone, PartialEq)]
pub struct Where {
    expr: Expr,
    sql: String,
}

impl Where {
    /// Parses and checks `where_text` against `relation`; `params[0]` is `$1`.
    pub fn new(
        where_text: &str,
        relation: &RelationDesc,
        params: &[String],
    ) -> Result<Where, WhereError> {
        let node = parse::parse_where(where_text)?;
        let expr = check::check(&node, relation, params)?;
        let sql = render::render(&expr);
        Ok(Where { expr, sql })
    }

    /// Canonical SQL: what the snapshot query runs and what shape identity compares.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The checked expression.
    pub fn expr(&self) -> &Expr {
        &self.expr
    }

    /// The result on `row`: `Ok(None)` is NULL.
    pub fn eval(&self, row: &Row) -> Result<Option<bool>, EvalError> {
        eval::eval_bool(&self.expr, row)
    }

    /// Whether `row` belongs to the shape: the result is exactly true (NULL and errors are
    /// not).
    pub fn includes(&self, row: &Row) -> bool {
        matches!(self.eval(row), Ok(Some(true)))
    }
}

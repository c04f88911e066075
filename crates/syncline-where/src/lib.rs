//! Syncline's where-clause language: what a shape's `where` parameter may say, checked against
//! the shape's table, evaluated on replicated rows exactly as Postgres would, rendered back to
//! canonical SQL, and indexed by the shape router.
//!
//! Flow: [`Where::new`] parses with Postgres's own grammar (libpg_query), type-checks against a
//! [`RelationDesc`] and renders canonical SQL; [`Where::eval`] evaluates on a [`Row`] (column
//! texts decoded once per row); [`Router`] finds the shapes a change affects; [`OrderBy`] checks
//! and renders a subset's sort keys the same way.
//!
//! The public surface is exactly that: [`Where`], [`OrderBy`], [`Router`] with [`Change`] and
//! [`ShapeId`], [`Row`] and [`RowTypes`], the errors [`WhereError`] and [`EvalError`], and
//! [`WHERE_BYTES_MAX`]. Everything else is internal.
//!
//! ```
//! use bytes::Bytes;
//! use syncline_core::relation::{ColumnDesc, PgType, RelationDesc, ReplicaIdentity, TypeKind};
//! use syncline_core::tuple::Value;
//! use syncline_where::{Change, Row, RowTypes, Router, Where};
//!
//! let int4 = PgType { oid: 23, name: "int4".into(), kind: TypeKind::Base };
//! let column = ColumnDesc { name: "owner".into(), pg_type: int4, type_mod: -1, not_null: true, pk_index: Some(0), array_dims: 0 };
//! let relation = RelationDesc {
//!     oid: 16384, schema: "public".into(), name: "items".into(),
//!     columns: vec![column], replica_identity: ReplicaIdentity::Full,
//! };
//! let w = Where::new("owner = $1", &relation, &["5".to_string()]).unwrap();
//! assert_eq!(w.sql(), r#"("owner" = '5'::int4)"#);
//!
//! let row = vec![Value::Text(Bytes::from_static(b"5"))];
//! assert!(w.includes(&Row::new(&RowTypes::of(&relation), &row)));
//!
//! let mut router = Router::new(&relation);
//! router.add(1, Some(&w));
//! assert_eq!(router.affected(&Change::Insert(&row)), vec![1]);
//! ```
//!
//! **Invariants:** no I/O, no Postgres connections; user text never reaches Postgres: only
//! [`Where::sql`], rendered from the checked tree. Text compares bytewise (the "C" collation);
//! the session time zone is UTC.

mod check;
mod error;
mod eval;
mod expr;
mod like;
mod order_by;
mod parse;
mod render;
mod router;
mod types;
mod value;

use syncline_core::relation::RelationDesc;

pub use error::{EvalError, WhereError};
pub use eval::{Row, RowTypes};
pub use order_by::OrderBy;
pub use parse::WHERE_BYTES_MAX;
pub use router::{Change, Router, ShapeId};

use expr::Expr;

/// Stack that parsing and checking may need: a debug build overflows 2 MiB (a tokio worker's
/// stack) when the parse-tree decoder reaches its depth limit; this leaves a wide margin.
const PARSE_STACK_RED_ZONE_BYTES: usize = 8 << 20;
/// Size of the stack parsing and checking switch to when the current one has less than
/// [`PARSE_STACK_RED_ZONE_BYTES`] left.
const PARSE_STACK_BYTES: usize = 16 << 20;

/// A checked where clause.
#[derive(Debug, Clone, PartialEq)]
pub struct Where {
    expr: Expr,
    sql: String,
}

impl Where {
    /// Parses and checks `where_text` against `relation`; `params[0]` is `$1`.
    ///
    /// Runs on a stack of its own when the caller's has less than
    /// [`PARSE_STACK_RED_ZONE_BYTES`] left: decoding the parse tree recurses once per nesting
    /// level (up to the decoder's limit of 100), with large frames, and no input may overflow a
    /// server thread's stack.
    pub fn new(
        where_text: &str,
        relation: &RelationDesc,
        params: &[String],
    ) -> Result<Where, WhereError> {
        stacker::maybe_grow(PARSE_STACK_RED_ZONE_BYTES, PARSE_STACK_BYTES, || {
            let node = parse::parse_where(where_text)?;
            let expr = check::check(&node, relation, params)?;
            let sql = render::render(&expr);
            Ok(Where { expr, sql })
        })
    }

    /// Canonical SQL: what the snapshot query runs and what shape identity compares.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The checked expression.
    pub(crate) fn expr(&self) -> &Expr {
        &self.expr
    }

    /// Positions of the columns the clause reads (each once).
    pub fn columns(&self) -> Vec<usize> {
        self.expr.columns()
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

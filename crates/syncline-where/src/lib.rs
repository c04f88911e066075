//! Syncline's where-clause language: what a shape's `where` parameter may say, checked against
//! the shape's table, evaluated on replicated rows exactly as Postgres would, rendered back to
//! canonical SQL, and indexed by the shape router.
//!
//! Flow: [`Where::new`] parses with Postgres's own grammar (libpg_query), type-checks against a
//! [`RelationDesc`] and renders canonical SQL; [`Where::eval`] evaluates on a [`Row`] (column
//! texts decoded once per row); [`Router`] finds the shapes a change affects; [`OrderBy`] checks
//! and renders a subset's sort keys the same way.
//!
//! Subqueries (`col IN (SELECT c FROM t [WHERE …])`, `(a, b) IN (SELECT x, y FROM t …)`) are
//! checked by [`Where::with_tables`] against the tables they read; each distinct one is a
//! [`Subquery`]. A clause with subqueries is evaluated with the value sets the shape reflects
//! ([`Views`]: [`Where::eval_in`]), and decomposed as Electric decomposes it ([`Dnf`]) for
//! its `active_conditions` and `tags`.
//!
//! The public surface is exactly that: [`Where`] with [`Prepared`], [`OrderBy`], [`Router`] with [`Change`] and
//! [`ShapeId`], [`Row`] and [`RowTypes`], [`Subquery`], [`TableRef`] and [`Views`], [`Dnf`] with
//! [`Position`] and [`PositionKind`], the errors [`WhereError`] (with [`ErrorKey`]) and
//! [`EvalError`], and [`WHERE_BYTES_MAX`]. Everything else is internal.
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
mod dnf;
mod error;
mod eval;
mod expr;
mod like;
mod order_by;
mod parse;
mod render;
mod router;
mod subquery;
mod types;
mod value;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use pg_query::protobuf::Node;
use syncline_core::relation::RelationDesc;
use syncline_core::sql::quote_literal;

pub use dnf::{Dnf, Position, PositionKind};
pub use error::{ErrorKey, EvalError, WhereError};
pub use eval::{Row, RowTypes};
pub use order_by::OrderBy;
pub use parse::WHERE_BYTES_MAX;
pub use router::{Change, Router, ShapeId};
pub use subquery::{Subquery, TableRef, Views};

use eval::{eval_bool, Cx};
use expr::Expr;
use render::{render, render_with, write_left};
use subquery::ByViews;
use types::Type;
use value::Datum;

/// Stack that parsing and checking may need: a debug build overflows 2 MiB (a tokio worker's
/// stack) when the parse-tree decoder reaches its depth limit; this leaves a wide margin.
const PARSE_STACK_RED_ZONE_BYTES: usize = 8 << 20;
/// Size of the stack parsing and checking switch to when the current one has less than
/// [`PARSE_STACK_RED_ZONE_BYTES`] left.
const PARSE_STACK_BYTES: usize = 16 << 20;
/// A thread stack of at least this size parses and checks clauses on itself (unless it is
/// already deep in recursion): no stack is mapped and unmapped for the call. Servers give
/// their runtime's threads this much; only what a thread touches becomes resident.
pub const IN_PLACE_THREAD_STACK_BYTES: usize = PARSE_STACK_RED_ZONE_BYTES + (8 << 20);

/// What [`Where::prepare`] made of a clause.
#[derive(Debug)]
pub enum Prepared {
    /// The clause reads no table but the shape's: checked.
    Checked(Where),
    /// The clause's subqueries read these tables: load them for [`Where::with_tables`].
    ReadsTables(Vec<TableRef>),
}

/// A checked where clause. Clones share it: a shape's clause is held by its pipeline slot and
/// by its table's router, and large deployments have hundreds of thousands of shapes.
#[derive(Debug, Clone)]
pub struct Where(Arc<Clause>);

/// What a [`Where`] holds.
#[derive(Debug)]
struct Clause {
    expr: Expr,
    sql: String,
    subqueries: Vec<Subquery>,
    /// The DNF: built when the clause is checked if it has subqueries (it may reject the
    /// clause then), on first use otherwise (most clauses never need it, and it holds copies
    /// of the clause's atoms). Boxed: unbuilt, it then takes a pointer's room.
    dnf: OnceLock<Box<Dnf>>,
}

/// Equal clauses: the DNF follows from the rest, and may not be built yet.
impl PartialEq for Where {
    fn eq(&self, other: &Where) -> bool {
        let (a, b) = (&self.0, &other.0);
        a.expr == b.expr && a.sql == b.sql && a.subqueries == b.subqueries
    }
}

impl Where {
    /// Parses and checks `where_text` against `relation`; `params[0]` is `$1`. A clause with a
    /// subquery is checked as by [`Where::with_tables`] with no table known, so it is rejected
    /// with the unknown-table error (once its subquery is otherwise well formed).
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
        Where::with_tables(where_text, relation, params, &|_| None)
    }

    /// Parses `where_text` once and, unless its subqueries read tables, checks it against
    /// `relation` as [`Where::new`] does; a clause whose subqueries read tables gives them
    /// (as [`Where::subquery_tables`] does) for the caller to load and pass to
    /// [`Where::with_tables`]. What a request does with a clause it has not seen yet, parsing
    /// it once when it has no subquery.
    pub fn prepare(
        where_text: &str,
        relation: &RelationDesc,
        params: &[String],
    ) -> Result<Prepared, WhereError> {
        stacker::maybe_grow(PARSE_STACK_RED_ZONE_BYTES, PARSE_STACK_BYTES, || {
            let node = parse::parse_where(where_text)?;
            let tables = subquery::tables(&node);
            if !tables.is_empty() {
                return Ok(Prepared::ReadsTables(tables));
            }
            Where::checked(&node, relation, params, &|_| None).map(Prepared::Checked)
        })
    }

    /// Tables the subqueries of `where_text` read, at every nesting level, each once, in order
    /// of appearance (only those of subqueries that read exactly one table). Parses only: the
    /// caller loads these relations for [`Where::with_tables`].
    pub fn subquery_tables(where_text: &str) -> Result<Vec<TableRef>, WhereError> {
        stacker::maybe_grow(PARSE_STACK_RED_ZONE_BYTES, PARSE_STACK_BYTES, || {
            let node = parse::parse_where(where_text)?;
            Ok(subquery::tables(&node))
        })
    }

    /// Parses and checks `where_text` against `relation`; `params[0]` is `$1` at every nesting
    /// level; `tables` gives the relation of each table a subquery reads (`None`: the table
    /// does not exist). Errors are Electric's, in Electric's order, each under its
    /// [`WhereError::key`].
    pub fn with_tables(
        where_text: &str,
        relation: &RelationDesc,
        params: &[String],
        tables: &dyn Fn(&TableRef) -> Option<RelationDesc>,
    ) -> Result<Where, WhereError> {
        stacker::maybe_grow(PARSE_STACK_RED_ZONE_BYTES, PARSE_STACK_BYTES, || {
            let node = parse::parse_where(where_text)?;
            Where::checked(&node, relation, params, tables)
        })
    }

    /// Checks a parsed clause (the where clause, or a subquery's): its subqueries first, then
    /// the clause, then its DNF.
    pub(crate) fn checked(
        node: &Node,
        relation: &RelationDesc,
        params: &[String],
        tables: subquery::Tables,
    ) -> Result<Where, WhereError> {
        let mut subqueries = Vec::new();
        let sublinks = subquery::prepare(node, params, tables, &mut subqueries)?;
        let expr = check::check(node, relation, params, &sublinks)?;
        let dnf = OnceLock::new();
        if !subqueries.is_empty() {
            let _ = dnf.set(Box::new(Dnf::of(&expr, subqueries.len())?));
        }
        let sql = sql_of(&expr, &subqueries);
        Ok(Where(Arc::new(Clause {
            expr,
            sql,
            subqueries,
            dnf,
        })))
    }

    /// Canonical SQL: what the snapshot query runs and what shape identity compares. A
    /// subquery is written inline, canonical and schema-qualified:
    /// `("parent_id" IN (SELECT "id" FROM "public"."parent" WHERE ("active" = true)))`.
    pub fn sql(&self) -> &str {
        &self.0.sql
    }

    /// The clause's distinct subqueries, in order of appearance (top level only: nested ones
    /// are in [`Subquery::filter`]). Every one written is listed, even one that constant
    /// folding left unused (`false AND x IN (SELECT ...)`).
    pub fn subqueries(&self) -> &[Subquery] {
        &self.0.subqueries
    }

    /// Whether the clause has subqueries.
    pub fn has_subqueries(&self) -> bool {
        !self.0.subqueries.is_empty()
    }

    /// The disjunctive normal form, as Electric's decomposer builds it (computed when a
    /// clause with subqueries is checked; for one without, on first use).
    pub fn dnf(&self) -> &Dnf {
        self.0
            .dnf
            .get_or_init(|| Box::new(Dnf::without_subqueries(&self.0.expr)))
    }

    /// The checked expression.
    pub(crate) fn expr(&self) -> &Expr {
        &self.0.expr
    }

    /// Positions of the columns the clause reads (each once).
    pub fn columns(&self) -> Vec<usize> {
        self.0.expr.columns()
    }

    /// The result on `row`: `Ok(None)` is NULL. A clause with subqueries is an error here:
    /// see [`Where::eval_in`].
    pub fn eval(&self, row: &Row) -> Result<Option<bool>, EvalError> {
        eval_bool(&self.0.expr, &Cx::of(row))
    }

    /// Whether `row` belongs to the shape: the result is exactly true (NULL and errors are
    /// not).
    pub fn includes(&self, row: &Row) -> bool {
        matches!(self.eval(row), Ok(Some(true)))
    }

    /// The result on `row` with the subqueries' value sets `views`, with SQL's `IN` semantics:
    /// NULL on the left is NULL (false for an empty set), a set holding a NULL makes a miss
    /// NULL, an empty set is false.
    pub fn eval_in(&self, row: &Row, views: &dyn Views) -> Result<Option<bool>, EvalError> {
        let membership = ByViews(views);
        eval_bool(
            &self.0.expr,
            &Cx {
                row,
                views: Some(&membership),
            },
        )
    }

    /// Whether `row` belongs to the shape given the value sets `views`: [`Where::eval_in`] is
    /// exactly true.
    pub fn includes_in(&self, row: &Row, views: &dyn Views) -> bool {
        matches!(self.eval_in(row, views), Ok(Some(true)))
    }

    /// Electric's `active_conditions` for `row`: one bool per [`Dnf`] position, whether its
    /// literal (negation applied, in three-valued logic) is exactly true: a NULL or failing
    /// atom gives false whether negated or not. So `includes_in` is true exactly when some
    /// disjunct has all its positions true.
    pub fn active_conditions(&self, row: &Row, views: &dyn Views) -> Vec<bool> {
        self.dnf().active_conditions(row, &ByViews(views))
    }

    /// Electric's `tags` for `row`: one string per disjunct, the slots of every position of
    /// the DNF joined by `/`: `""` for a position outside the disjunct, `"1"` for a plain
    /// position, and for a subquery position the lowercase hex md5 of `prefix` (stack id and
    /// shape handle) followed by `v:<text>` (`NULL` for SQL NULL), or for a row `(a, b)` by
    /// `a:<ns(a)>b:<ns(b)>` with the outer column names. The text is the value's normal text
    /// ([`Subquery::normalize`]: Postgres's output text for most types, `true`/`false` for
    /// booleans). A clause that is one bare subquery has one tag of one slot, no `/`.
    pub fn tags(&self, row: &Row, prefix: &str) -> Vec<String> {
        self.dnf().tags(row, prefix)
    }

    /// The slot hash of subquery position `position` for the left-side values `values`
    /// (Postgres text, `None` for NULL; normalized as the row's are): what a move-in or
    /// move-out pattern's `value` carries, the same function [`Where::tags`] uses. `"1"` for
    /// a plain position.
    ///
    /// # Panics
    /// When `position` is not a position of [`Where::dnf`].
    pub fn slot_hash(&self, position: usize, values: &[Option<&str>], prefix: &str) -> String {
        self.dnf().slot_hash(position, values, prefix)
    }

    /// Canonical SQL of position `position`'s literal, its negation applied (`(NOT atom)`),
    /// subqueries inline as in [`Where::sql`]: `COALESCE(<it>, false)` in a snapshot query is
    /// the position's [`Where::active_conditions`] entry. (Electric's snapshot computes a
    /// negated position as `NOT COALESCE(atom, false)`, true for a NULL atom; see
    /// [`Where::active_conditions`].)
    ///
    /// # Panics
    /// When `position` is not a position of [`Where::dnf`].
    pub fn position_sql(&self, position: usize) -> String {
        let atom = sql_of(self.dnf().atom(position), &self.0.subqueries);
        if self.dnf().positions[position].negated {
            format!("(NOT {atom})")
        } else {
            atom
        }
    }

    /// A SQL text expression over the table giving position `position`'s tag slot for each
    /// row, exactly as [`Where::tags`] computes it (`'1'` for a plain position; for a subquery
    /// position `md5(prefix ‖ ns)` with the normal texts computed in SQL): for the tags of
    /// snapshot rows. Needs Postgres 13 or later (`trim_scale`).
    ///
    /// # Panics
    /// When `position` is not a position of [`Where::dnf`].
    pub fn slot_sql(&self, position: usize, prefix: &str) -> String {
        self.dnf().slot_sql(position, prefix)
    }

    /// Canonical SQL with each subquery occurrence replaced by its current value set:
    /// `views(i)` gives subquery `i`'s tuples (texts, `None` for NULL), written as literals of
    /// the select-list types: `("parent_id" IN ('1'::int4, '2'::int4))`, and for a row
    /// `(("a", "b") IN (VALUES ('1'::int4, 'x'::text), ...))` (a row list `IN ((...), ...)`
    /// when a column is an enum, whose literals stay untyped). An empty set is `false`, under
    /// `NOT` too, so `NOT IN` and NULLs behave as with the real subquery. Literals are quoted
    /// by `syncline_core::sql`. `views` is called once per subquery.
    pub fn sql_with_views(&self, views: &dyn Fn(usize) -> Vec<Vec<Option<String>>>) -> String {
        let sets: RefCell<HashMap<usize, Vec<Vec<Option<String>>>>> = RefCell::default();
        render_with(&self.0.expr, &|i, left, out| {
            let mut sets = sets.borrow_mut();
            let tuples = sets.entry(i).or_insert_with(|| views(i));
            if tuples.is_empty() {
                out.push_str("false");
                return;
            }
            let types: Vec<&Type> = left.iter().map(Expr::ty).collect();
            let row_literal = |tuple: &Vec<Option<String>>| {
                let literals: Vec<String> = types
                    .iter()
                    .enumerate()
                    .map(|(c, ty)| literal(ty, tuple.get(c).and_then(Option::as_deref)))
                    .collect();
                literals.join(", ")
            };
            out.push('(');
            write_left(left, out);
            let rows: Vec<String> = tuples.iter().map(row_literal).collect();
            if types.len() == 1 {
                out.push_str(&format!(" IN ({}))", rows.join(", ")));
            } else if types.iter().any(|t| matches!(t, Type::Enum(_))) {
                out.push_str(&format!(" IN (({})))", rows.join("), (")));
            } else {
                out.push_str(&format!(" IN (VALUES ({})))", rows.join("), (")));
            }
        })
    }
}

/// Canonical SQL of `expr`, its subqueries written inline.
fn sql_of(expr: &Expr, subqueries: &[Subquery]) -> String {
    render_with(expr, &|i, left, out| {
        out.push('(');
        write_left(left, out);
        out.push_str(" IN (");
        out.push_str(&subqueries[i].sql);
        out.push_str("))");
    })
}

/// A value set's text as a literal of type `ty`: typed (`'1'::int4`), untyped for an enum,
/// `NULL::ty` for `None`.
fn literal(ty: &Type, text: Option<&str>) -> String {
    match text.map(|t| (t, Datum::parse(ty, t))) {
        None => render(&Expr::constant(None, ty.clone())),
        Some((_, Ok(datum))) => render(&Expr::constant(Some(datum), ty.clone())),
        Some((text, Err(_))) if matches!(ty, Type::Enum(_)) => quote_literal(text),
        Some((text, Err(_))) => format!("{}::{ty}", quote_literal(text)),
    }
}

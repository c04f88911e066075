//! Subqueries: `col IN (SELECT c FROM t [WHERE …])` and `(a, b) IN (SELECT x, y FROM t …)`,
//! accepted and rejected as Electric 1.7.12 does.
//!
//! Order of checks (Electric's `Shape.new`): every subquery of a level is checked before the
//! level's own clause, in order of appearance, and each one completely (its select list, its
//! `FROM`, its clauses, its table, its columns, then its own `WHERE` with its own subqueries)
//! before the next. Only then is the clause around them checked, where a subquery must be the
//! right side of `IN` and its left side bare columns of exactly its types.
//!
//! A value set is compared by *normal text* ([`crate::value::Datum::normal_text`]): the
//! Postgres output text of a value for most types, made equal for values `=` calls equal.

use std::collections::HashMap;

use pg_query::protobuf::{node::Node as N, Node, SelectStmt};
use syncline_core::relation::{PgType, RelationDesc, TypeKind};
use syncline_core::sql::quote_ident;

use crate::error::{ErrorKey, EvalError, WhereError};
use crate::eval::Membership;
use crate::types::Type;
use crate::value::{Datum, Nullable};
use crate::Where;

/// A table a subquery reads, as written in the clause (schema `public` when not written).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableRef {
    /// Schema name, unquoted (`public` when the clause names none).
    pub schema: String,
    /// Table name, unquoted.
    pub name: String,
}

/// One distinct subquery of a checked clause (identical subqueries, with the same canonical
/// SQL, are one).
#[derive(Debug, Clone, PartialEq)]
pub struct Subquery {
    /// The table the subquery reads.
    pub relation: RelationDesc,
    /// The select list, as positions in `relation`.
    pub columns: Vec<usize>,
    /// The subquery's own where clause, checked against `relation` (it may hold subqueries of
    /// its own: nesting).
    pub filter: Option<Where>,
    /// Canonical SQL: `SELECT "id" FROM "public"."parent" WHERE ("active" = true)`.
    pub sql: String,
}

impl Subquery {
    /// The types of the select list (`None` for a type the language cannot use).
    pub(crate) fn types(&self) -> Vec<Option<Type>> {
        self.columns
            .iter()
            .map(|&c| Type::from_pg(&self.relation.columns[c].pg_type))
            .collect()
    }

    /// The texts a value set holds for one tuple of select-list values (Postgres text, `None`
    /// for NULL), as [`Views`] and the router compare them: each value's normal text, equal
    /// for two values exactly when Postgres's `=` says they are equal. That is Postgres's
    /// output text, except `t`/`f` become `true`/`false`, a numeric drops trailing fractional
    /// zeros (`1.50` is `1.5`), a float's -0 is `0`, a `char(n)` drops its padding and an
    /// interval is justified (`30 days` is `1 mon`). A text that is not valid input for its
    /// type is kept as it is.
    pub fn normalize(&self, values: &[Option<&str>]) -> Vec<Option<String>> {
        let types = self.types();
        values
            .iter()
            .enumerate()
            .map(|(i, v)| v.map(|text| normal_text(types.get(i).and_then(Option::as_ref), text)))
            .collect()
    }
}

/// The normal text of `text` read as `ty` (the text itself when it does not read).
pub(crate) fn normal_text(ty: Option<&Type>, text: &str) -> String {
    match ty.map(|ty| (ty, Datum::parse(ty, text))) {
        Some((ty, Ok(datum))) => datum.normal_text(ty),
        _ => text.to_string(),
    }
}

/// The value sets the outer shape currently reflects for each of its subqueries (by index into
/// [`Where::subqueries`]). Tuples are compared by the texts [`Subquery::normalize`] gives.
pub trait Views {
    /// Whether the set of subquery `subquery` holds this tuple of non-NULL values (normal
    /// texts, one per select-list column).
    fn contains(&self, subquery: usize, values: &[&str]) -> bool;

    /// Whether the set holds a tuple with a NULL in it.
    fn contains_null(&self, subquery: usize) -> bool;

    /// Whether the set is empty.
    fn is_empty(&self, subquery: usize) -> bool;

    /// Whether the set holds a tuple that is neither equal to `values` (normal texts, `None`
    /// for NULL) nor certainly different from it: in every column the two are equal or one of
    /// them is NULL, and in at least one column one is NULL. SQL's `IN` is NULL rather than
    /// false exactly then.
    ///
    /// The default answers from the three methods above: exactly for one column; for a row
    /// `(a, b)` it assumes a NULL anywhere may match (so `NOT IN` can be NULL where Postgres
    /// says true). Override it to be exact for rows whose values or sets hold NULLs.
    fn contains_partial(&self, subquery: usize, values: &[Option<&str>]) -> bool {
        if values.iter().any(Option::is_none) {
            !self.is_empty(subquery)
        } else {
            self.contains_null(subquery)
        }
    }
}

/// [`Membership`] by a caller's [`Views`], with SQL's `IN` semantics: an empty set gives false
/// (even for NULL), a tuple in the set true, a possible match through a NULL NULL.
pub(crate) struct ByViews<'a>(pub(crate) &'a dyn Views);

impl Membership for ByViews<'_> {
    fn member(
        &self,
        subquery: usize,
        left: &[Nullable],
        types: &[Type],
    ) -> Result<Option<bool>, EvalError> {
        let views = self.0;
        let texts = normal_texts(left, types);
        let all: Option<Vec<&str>> = texts.iter().map(Option::as_deref).collect();
        if let Some(all) = all {
            if views.contains(subquery, &all) {
                return Ok(Some(true));
            }
        }
        let partial: Vec<Option<&str>> = texts.iter().map(Option::as_deref).collect();
        Ok(if views.contains_partial(subquery, &partial) {
            None
        } else {
            Some(false)
        })
    }

    fn is_empty(&self, subquery: usize) -> bool {
        self.0.is_empty(subquery)
    }
}

/// The normal texts of left-side values.
pub(crate) fn normal_texts(left: &[Nullable], types: &[Type]) -> Vec<Option<String>> {
    left.iter()
        .zip(types)
        .map(|(v, ty)| v.as_ref().map(|d| d.normal_text(ty)))
        .collect()
}

/// What the checker needs to know of a prepared subquery occurrence.
pub(crate) struct SublinkInfo {
    /// Index of the subquery among the clause's distinct subqueries.
    pub(crate) index: usize,
    /// Select-list types.
    pub(crate) types: Vec<Option<Type>>,
    /// The subquery's type as Electric names it in messages (`int8[]`, `row of (int4, text)[]`).
    pub(crate) readable: String,
}

/// The prepared subqueries of one clause level, by the parser location of their sublink.
#[derive(Default)]
pub(crate) struct Sublinks(HashMap<i32, SublinkInfo>);

impl Sublinks {
    /// The subquery of the sublink at `location`.
    pub(crate) fn get(&self, location: i32) -> Option<&SublinkInfo> {
        self.0.get(&location)
    }
}

/// A type as Electric names it in messages: `int4`, `enum mood`, `int4[]`.
pub(crate) fn readable(ty: Option<&Type>, pg_type: &PgType) -> String {
    match ty {
        Some(Type::Enum(name)) => format!("enum {name}"),
        Some(Type::Array(elem)) => format!("{}[]", readable(Some(elem), pg_type)),
        Some(ty) => ty.to_string(),
        None => {
            let base = pg_type.base();
            match &base.kind {
                TypeKind::Array(elem) => {
                    format!("{}[]", readable(Type::from_pg(elem).as_ref(), elem))
                }
                _ => base.name.clone(),
            }
        }
    }
}

/// The sublinks of one clause level, in order of appearance: every sublink of the expression,
/// but none inside a subquery.
pub(crate) fn top_sublinks(node: &Node) -> Vec<&pg_query::protobuf::SubLink> {
    let mut out = Vec::new();
    walk(node, &mut out);
    out.sort_by_key(|s| s.location);
    out
}

fn walk<'a>(node: &'a Node, out: &mut Vec<&'a pg_query::protobuf::SubLink>) {
    let all = |nodes: &'a [Node], out: &mut Vec<_>| nodes.iter().for_each(|n| walk(n, out));
    let one = |n: &'a Option<Box<Node>>, out: &mut Vec<_>| {
        if let Some(n) = n.as_deref() {
            walk(n, out)
        }
    };
    match &node.node {
        Some(N::SubLink(s)) => {
            out.push(s);
            one(&s.testexpr, out);
        }
        Some(N::BoolExpr(e)) => all(&e.args, out),
        Some(N::AExpr(e)) => {
            one(&e.lexpr, out);
            one(&e.rexpr, out);
        }
        Some(N::List(l)) => all(&l.items, out),
        Some(N::FuncCall(f)) => {
            all(&f.args, out);
            one(&f.agg_filter, out);
        }
        Some(N::TypeCast(c)) => one(&c.arg, out),
        Some(N::NullTest(t)) => one(&t.arg, out),
        Some(N::BooleanTest(t)) => one(&t.arg, out),
        Some(N::CoalesceExpr(c)) => all(&c.args, out),
        Some(N::MinMaxExpr(m)) => all(&m.args, out),
        Some(N::AArrayExpr(a)) => all(&a.elements, out),
        Some(N::AIndirection(a)) => {
            one(&a.arg, out);
            all(&a.indirection, out);
        }
        Some(N::AIndices(i)) => {
            one(&i.lidx, out);
            one(&i.uidx, out);
        }
        Some(N::RowExpr(r)) => all(&r.args, out),
        Some(N::CaseExpr(c)) => {
            one(&c.arg, out);
            all(&c.args, out);
            one(&c.defresult, out);
        }
        Some(N::CaseWhen(w)) => {
            one(&w.expr, out);
            one(&w.result, out);
        }
        Some(N::CollateClause(c)) => one(&c.arg, out),
        Some(N::NamedArgExpr(a)) => one(&a.arg, out),
        _ => {}
    }
}

/// The subquery's `SELECT`, if it is one.
fn select_of(sublink: &pg_query::protobuf::SubLink) -> Option<&SelectStmt> {
    match sublink.subselect.as_deref().and_then(|n| n.node.as_ref()) {
        Some(N::SelectStmt(s)) => Some(s),
        _ => None,
    }
}

/// The table a `FROM` list names, when it is exactly one table.
fn single_table(select: &SelectStmt) -> Option<TableRef> {
    match select.from_clause.as_slice() {
        [Node {
            node: Some(N::RangeVar(r)),
        }] => Some(TableRef {
            schema: if r.schemaname.is_empty() {
                "public".into()
            } else {
                r.schemaname.clone()
            },
            name: r.relname.clone(),
        }),
        _ => None,
    }
}

/// Tables the subqueries of a where clause read, at every nesting level, each once, in order of
/// appearance.
pub(crate) fn tables(node: &Node) -> Vec<TableRef> {
    let mut out = Vec::new();
    collect_tables(node, &mut out);
    out
}

fn collect_tables(node: &Node, out: &mut Vec<TableRef>) {
    for sublink in top_sublinks(node) {
        let Some(select) = select_of(sublink) else {
            continue;
        };
        if let Some(table) = single_table(select) {
            if !out.contains(&table) {
                out.push(table);
            }
        }
        if let Some(filter) = select.where_clause.as_deref() {
            collect_tables(filter, out);
        }
    }
}

/// The select list's column names, or Electric's error at the first item that is not a bare
/// column (its location counts the `SELECT 1 WHERE ` prefix: Electric reports it unshifted).
fn select_list(select: &SelectStmt) -> Result<Vec<String>, WhereError> {
    let mut names = Vec::with_capacity(select.target_list.len());
    for item in &select.target_list {
        let Some(N::ResTarget(target)) = &item.node else {
            return Err(WhereError::new("Expected a plain column reference"));
        };
        let name = match target.val.as_deref().and_then(|v| v.node.as_ref()) {
            Some(N::ColumnRef(c)) => match c.fields.as_slice() {
                [Node {
                    node: Some(N::String(s)),
                }] => Some(s.sval.clone()),
                _ => None,
            },
            _ => None,
        };
        match name {
            Some(name) => names.push(name),
            None => {
                return Err(WhereError::at(
                    target.location,
                    "Expected a plain column reference",
                ))
            }
        }
    }
    Ok(names)
}

/// Whether the `SELECT` carries any clause but `FROM` and `WHERE`.
fn has_clauses(select: &SelectStmt) -> bool {
    !select.distinct_clause.is_empty()
        || !select.group_clause.is_empty()
        || select.having_clause.is_some()
        || !select.window_clause.is_empty()
        || select.limit_offset.is_some()
        || select.limit_count.is_some()
        || !select.sort_clause.is_empty()
        || !select.locking_clause.is_empty()
        || select.with_clause.is_some()
}

/// The table callback of [`Where::with_tables`].
pub(crate) type Tables<'t> = &'t dyn Fn(&TableRef) -> Option<RelationDesc>;

/// Checks every subquery of one clause level (see the module documentation for the order) and
/// adds the distinct ones to `subqueries`.
pub(crate) fn prepare(
    node: &Node,
    params: &[String],
    tables: Tables,
    subqueries: &mut Vec<Subquery>,
) -> Result<Sublinks, WhereError> {
    let mut sublinks = Sublinks::default();
    for sublink in top_sublinks(node) {
        let Some(select) = select_of(sublink) else {
            return Err(WhereError::new("Expected a single table reference"));
        };
        let subquery = subquery(select, params, tables)?;
        let types = subquery.types();
        let readable_types: Vec<String> = subquery
            .columns
            .iter()
            .zip(&types)
            .map(|(&c, ty)| readable(ty.as_ref(), &subquery.relation.columns[c].pg_type))
            .collect();
        let readable = match readable_types.as_slice() {
            [one] => format!("{one}[]"),
            many => format!("row of ({})[]", many.join(", ")),
        };
        let index = match subqueries.iter().position(|s| s.sql == subquery.sql) {
            Some(index) => index,
            None => {
                subqueries.push(subquery);
                subqueries.len() - 1
            }
        };
        sublinks.0.insert(
            sublink.location,
            SublinkInfo {
                index,
                types,
                readable,
            },
        );
    }
    Ok(sublinks)
}

/// One subquery, checked completely.
fn subquery(
    select: &SelectStmt,
    params: &[String],
    tables: Tables,
) -> Result<Subquery, WhereError> {
    let names = select_list(select)?;
    let table =
        single_table(select).ok_or_else(|| WhereError::new("Expected a single table reference"))?;
    if has_clauses(select) {
        return Err(WhereError::new(
            "SELECT statement must not contain any clauses",
        ));
    }
    let relation = tables(&table).ok_or_else(|| {
        WhereError::under(
            ErrorKey::Table,
            format!(
                "Table {}.{} does not exist. If the table name contains capitals or special \
                 characters you must quote it.",
                quote_ident(&table.schema),
                quote_ident(&table.name)
            ),
        )
    })?;
    let missing: Vec<&str> = names
        .iter()
        .filter(|n| relation.column(n).is_none())
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return Err(WhereError::under(
            ErrorKey::Columns,
            format!(
                "The following columns are not found on the table: {}",
                missing.join(", ")
            ),
        ));
    }
    if names.is_empty() {
        return Err(WhereError::under(
            ErrorKey::Columns,
            "The list of columns must not be empty",
        ));
    }
    let columns: Vec<usize> = names
        .iter()
        .filter_map(|n| relation.column(n).map(|(i, _)| i))
        .collect();
    let filter = select
        .where_clause
        .as_deref()
        .map(|node| Where::checked(node, &relation, params, tables))
        .transpose()?;
    let select_sql: Vec<String> = columns
        .iter()
        .map(|&c| quote_ident(&relation.columns[c].name))
        .collect();
    let mut sql = format!(
        "SELECT {} FROM {}.{}",
        select_sql.join(", "),
        quote_ident(&relation.schema),
        quote_ident(&relation.name)
    );
    if let Some(filter) = &filter {
        sql.push_str(" WHERE ");
        sql.push_str(filter.sql());
    }
    Ok(Subquery {
        relation,
        columns,
        filter,
        sql,
    })
}

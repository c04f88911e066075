//! Subquery shapes' headers, as Electric 1.7 writes them: which conditions of the where
//! clause a row answers to (`tags`: per disjunct, a `/`-joined slot per position) and which of
//! them hold (`active_conditions`). Log rows get them computed here from the row and the value
//! sets the log reflects; snapshot and move-in rows get them from SQL rendered here, so Postgres
//! computes them in the query's own snapshot. Both hash the same text, so clients can match a
//! move's patterns against either.

use syncline_core::wire;
use syncline_where::{Row, Subquery, Views, Where};

/// Electric's stack id when none is configured: the first part of every slot hash.
pub const STACK_ID: &str = "single_stack";

/// What a shape's slot hashes start with: the stack id and the shape's handle.
pub fn tag_prefix(handle: &str) -> String {
    format!("{STACK_ID}{handle}")
}

/// Appends `,"tags":[…]` (with `removed_tags` when given) and `,"active_conditions":[…]` for
/// `row` to an open headers object.
pub fn write_row_headers(
    out: &mut Vec<u8>,
    filter: &Where,
    views: &dyn Views,
    row: &Row,
    removed_from: Option<&Row>,
    prefix: &str,
) {
    let tags = filter.tags(row, prefix);
    let removed = removed_from.map(|old| {
        filter
            .tags(old, prefix)
            .into_iter()
            .filter(|t| !tags.contains(t))
            .collect::<Vec<String>>()
    });
    wire::write_tags(out, &tags, removed.as_deref());
    wire::write_active_conditions(out, &filter.active_conditions(row, views));
}

/// A text expression over the shape's table giving each row's `tags` and `active_conditions`
/// headers (and `is_move_in` for the rows of a move-in) as JSON object members: what
/// [`syncline_pg::snapshot::SnapshotQuery::with_headers`] splices into the rows' headers.
/// Subquery positions are rendered with their subqueries inline, so they are evaluated in the
/// query's snapshot.
pub fn headers_sql(filter: &Where, prefix: &str, move_in: bool) -> String {
    let dnf = filter.dnf();
    let positions = dnf.positions.len();
    let mut tags = Vec::with_capacity(dnf.disjuncts.len());
    for disjunct in &dnf.disjuncts {
        let slots: Vec<String> = (0..positions)
            .map(|p| {
                if disjunct.contains(&p) {
                    filter.slot_sql(p, prefix)
                } else {
                    "''".to_owned()
                }
            })
            .collect();
        tags.push(slots.join(" || '/' || "));
    }
    let conditions: Vec<String> = (0..positions)
        .map(|p| {
            format!(
                "CASE WHEN COALESCE(({}), false) THEN 'true' ELSE 'false' END",
                filter.position_sql(p)
            )
        })
        .collect();
    let mut sql = format!(
        "',\"tags\":[\"' || {} || '\"],\"active_conditions\":[' || {} || ']'",
        tags.join(" || '\",\"' || "),
        conditions.join(" || ',' || ")
    );
    if move_in {
        sql.push_str(" || ',\"is_move_in\":true'");
    }
    sql
}

/// The SQL that seeds a dependency: its subquery's, or, when its where clause has subqueries
/// of its own (`nested`), every column of every row of its table as text, in the table's
/// column order (it judges each row again when its own dependencies change).
pub fn seed_sql(subquery: &Subquery, nested: bool) -> String {
    if !nested {
        return subquery.sql.clone();
    }
    let relation = &subquery.relation;
    let columns: Vec<String> = relation
        .columns
        .iter()
        .map(|c| format!("{}::text", syncline_core::sql::quote_ident(&c.name)))
        .collect();
    format!(
        "SELECT {} FROM {}",
        columns.join(", "),
        syncline_core::sql::qualified(&relation.schema, &relation.name)
    )
}

/// What seeds the nested dependencies of `filter`'s subqueries, in the order they must be
/// seeded (each after those it reads): (subquery SQL, seeding SQL). Subqueries without nesting
/// at the top are seeded from their own rows and are not listed.
pub fn nested_seeds(filter: &Where) -> Vec<(String, String)> {
    fn walk(subquery: &Subquery, out: &mut Vec<(String, String)>) {
        let inner = subquery.filter.as_ref().filter(|f| f.has_subqueries());
        if let Some(inner) = inner {
            for s in inner.subqueries() {
                walk(s, out);
            }
        }
        if !out.iter().any(|(key, _)| key == &subquery.sql) {
            out.push((subquery.sql.clone(), seed_sql(subquery, inner.is_some())));
        }
    }
    let mut out = Vec::new();
    for s in filter.subqueries() {
        if s.filter.as_ref().is_some_and(Where::has_subqueries) {
            walk(s, &mut out);
        }
    }
    out
}

//! A clause in disjunctive normal form, as Electric's decomposer (`replication/eval/
//! decomposer.ex`) builds it, and what Electric derives from it for a row: `active_conditions`
//! and `tags` (`shapes/dnf_plan.ex`, `shapes/subquery_tags.ex`).
//!
//! NOT is pushed to the leaves (De Morgan), AND is distributed over OR. A leaf is any
//! expression that is not AND, OR or NOT (so a subquery-free subtree is split into all its
//! atoms, as Electric splits it); an `IN (list)` is the OR of its equalities and `NOT IN (list)`
//! the NOT of that OR, as Electric's parser builds them. Every literal *occurrence* is a
//! position: the positions of the first disjunct come first, then those of the second, and so
//! on, so a literal in two disjuncts takes two positions.

use md5::{Digest, Md5};
use syncline_core::sql::{quote_ident, quote_literal};

use crate::error::WhereError;
use crate::eval::{eval_bool, Cx, Membership, Row};
use crate::expr::{CmpOp, Expr, Op};
use crate::subquery::normal_text;
use crate::types::Type;

/// Most disjuncts a clause with subqueries may have (Electric's `@max_disjuncts`).
pub(crate) const DISJUNCTS_MAX: u64 = 100;

/// Disjunctive normal form of a clause.
#[derive(Debug, Clone, PartialEq)]
pub struct Dnf {
    /// Every literal occurrence, disjunct by disjunct.
    pub positions: Vec<Position>,
    /// Each disjunct's positions, ascending.
    pub disjuncts: Vec<Vec<usize>>,
    /// Each position's expression, without its negation.
    atoms: Vec<Expr>,
}

/// One position of a [`Dnf`]: a literal, maybe negated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// What the literal tests.
    pub kind: PositionKind,
    /// Whether the literal is negated (`x NOT IN (SELECT ...)`, `NOT (a = 1)`).
    pub negated: bool,
}

/// What a position's literal tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PositionKind {
    /// Membership of left-side columns in a subquery's value set.
    Subquery {
        /// Index into [`crate::Where::subqueries`].
        subquery: usize,
        /// The left-side columns, as positions in the outer relation.
        columns: Vec<usize>,
    },
    /// A condition on the row alone (it may hold a subquery inside another expression, such
    /// as `(x IN (SELECT ...)) IS NOT TRUE`, which Electric also counts as a plain position).
    Plain,
}

/// A literal: an atom and whether it is negated.
type Literal = (Expr, bool);

/// The number of disjuncts `expr` (negated when `negated`) has in DNF, saturating.
fn count(expr: &Expr, negated: bool) -> u64 {
    match (expr, negated) {
        (Expr::And(args), false) | (Expr::Or(args), true) => args
            .iter()
            .fold(1u64, |n, a| n.saturating_mul(count(a, negated))),
        (Expr::And(args), true) | (Expr::Or(args), false) => args
            .iter()
            .fold(0u64, |n, a| n.saturating_add(count(a, negated))),
        (Expr::Not(arg), _) => count(arg, !negated),
        (
            Expr::InList {
                list,
                negated: not_in,
                ..
            },
            _,
        ) if negated == *not_in => u64::try_from(list.len()).unwrap_or(u64::MAX),
        _ => 1,
    }
}

/// `IN (list)` as the OR of its equalities.
fn equalities(arg: &Expr, list: &[Expr]) -> Vec<Expr> {
    list.iter()
        .map(|item| Expr::Op {
            op: Op::Cmp(CmpOp::Eq),
            args: vec![arg.clone(), item.clone()],
            ty: Type::Bool,
        })
        .collect()
}

/// The disjuncts of `expr` (negated when `negated`); the caller bounds their number first.
fn disjuncts(expr: &Expr, negated: bool) -> Vec<Vec<Literal>> {
    match (expr, negated) {
        (Expr::And(args), false) | (Expr::Or(args), true) => {
            cross(args.iter().map(|a| disjuncts(a, negated)).collect())
        }
        (Expr::And(args), true) | (Expr::Or(args), false) => {
            args.iter().flat_map(|a| disjuncts(a, negated)).collect()
        }
        (Expr::Not(arg), _) => disjuncts(arg, !negated),
        (
            Expr::InList {
                arg,
                list,
                negated: not_in,
            },
            _,
        ) => disjuncts(&Expr::Or(equalities(arg, list)), negated != *not_in),
        (leaf, _) => vec![vec![(leaf.clone(), negated)]],
    }
}

/// The cross product of the operands' disjuncts (AND distributed over OR), in Electric's order.
fn cross(operands: Vec<Vec<Vec<Literal>>>) -> Vec<Vec<Literal>> {
    let mut product: Vec<Vec<Literal>> = vec![Vec::new()];
    for operand in operands.into_iter().rev() {
        let mut next = Vec::with_capacity(operand.len() * product.len());
        for disjunct in &operand {
            for rest in &product {
                next.push(disjunct.iter().chain(rest).cloned().collect());
            }
        }
        product = next;
    }
    product
}

impl Dnf {
    /// The DNF of a checked clause. A clause with subqueries is rejected as Electric rejects it
    /// when it has more than [`DISJUNCTS_MAX`] disjuncts or uses one subquery both plainly
    /// and negated; a clause without is kept whole as one plain position when it would have
    /// more (Electric computes no DNF for it).
    pub(crate) fn of(expr: &Expr, subqueries: usize) -> Result<Dnf, WhereError> {
        if subqueries == 0 {
            return Ok(Dnf::without_subqueries(expr));
        }
        let n = count(expr, false);
        if n > DISJUNCTS_MAX {
            return Err(WhereError::new(format!(
                "WHERE clause too complex for DNF decomposition ({n} disjuncts exceeds limit of {DISJUNCTS_MAX})"
            )));
        }
        let dnf = Dnf::from_disjuncts(disjuncts(expr, false));
        let mut polarity: Vec<Option<bool>> = vec![None; subqueries];
        for p in &dnf.positions {
            if let PositionKind::Subquery { subquery, .. } = p.kind {
                match polarity.get_mut(subquery) {
                    Some(Some(seen)) if *seen != p.negated => {
                        return Err(WhereError::new(
                            "a subquery dependency cannot be used with both positive and negative polarity in the same filter",
                        ))
                    }
                    Some(slot) => *slot = Some(p.negated),
                    None => {}
                }
            }
        }
        Ok(dnf)
    }

    /// The DNF of a clause without subqueries, or the whole clause as one plain position when
    /// it would have more than [`DISJUNCTS_MAX`] disjuncts.
    pub(crate) fn without_subqueries(expr: &Expr) -> Dnf {
        if count(expr, false) > DISJUNCTS_MAX {
            return Dnf::from_disjuncts(vec![vec![(expr.clone(), false)]]);
        }
        Dnf::from_disjuncts(disjuncts(expr, false))
    }

    fn from_disjuncts(disjuncts: Vec<Vec<Literal>>) -> Dnf {
        let mut dnf = Dnf {
            positions: Vec::new(),
            disjuncts: Vec::with_capacity(disjuncts.len()),
            atoms: Vec::new(),
        };
        for disjunct in disjuncts {
            let mut members = Vec::with_capacity(disjunct.len());
            for (atom, negated) in disjunct {
                let kind = match &atom {
                    Expr::Sublink { subquery, left } => PositionKind::Subquery {
                        subquery: *subquery,
                        columns: left.iter().filter_map(column_index).collect(),
                    },
                    _ => PositionKind::Plain,
                };
                members.push(dnf.positions.len());
                dnf.positions.push(Position { kind, negated });
                dnf.atoms.push(atom);
            }
            dnf.disjuncts.push(members);
        }
        dnf
    }

    /// Position `position`'s expression, without its negation.
    pub(crate) fn atom(&self, position: usize) -> &Expr {
        &self.atoms[position]
    }

    /// Each position's literal on `row`: true only when it is exactly true (with its negation
    /// applied in three-valued logic: a NULL atom makes a false literal either way).
    pub(crate) fn active_conditions(&self, row: &Row, views: &dyn Membership) -> Vec<bool> {
        let cx = Cx {
            row,
            views: Some(views),
        };
        self.atoms
            .iter()
            .zip(&self.positions)
            .map(|(atom, p)| matches!(eval_bool(atom, &cx), Ok(Some(v)) if v != p.negated))
            .collect()
    }

    /// One tag per disjunct: its slots for every position joined by `/` (`""` for a position
    /// outside the disjunct, `"1"` for a plain one, the slot hash for a subquery one).
    pub(crate) fn tags(&self, row: &Row, prefix: &str) -> Vec<String> {
        let slots: Vec<String> = self
            .atoms
            .iter()
            .map(|atom| match atom {
                Expr::Sublink { left, .. } => {
                    let values: Vec<(String, Option<String>)> = left
                        .iter()
                        .map(|c| match c {
                            Expr::Column { index, name, ty } => {
                                (name.clone(), row_text(row, *index, ty))
                            }
                            other => (String::new(), Some(other.ty().to_string())),
                        })
                        .collect();
                    hash(prefix, &values)
                }
                _ => "1".to_string(),
            })
            .collect();
        self.disjuncts
            .iter()
            .map(|members| {
                let mut tag = String::new();
                for (p, slot) in slots.iter().enumerate() {
                    if p > 0 {
                        tag.push('/');
                    }
                    if members.binary_search(&p).is_ok() {
                        tag.push_str(slot);
                    }
                }
                tag
            })
            .collect()
    }

    /// The slot hash of position `position` for left-side values `values` (Postgres text,
    /// `None` for NULL); `"1"` for a plain position.
    ///
    /// # Panics
    /// When `position` is not a position of this DNF.
    pub(crate) fn slot_hash(
        &self,
        position: usize,
        values: &[Option<&str>],
        prefix: &str,
    ) -> String {
        match &self.atoms[position] {
            Expr::Sublink { left, .. } => {
                let values: Vec<(String, Option<String>)> = left
                    .iter()
                    .zip(values)
                    .map(|(c, v)| match c {
                        Expr::Column { name, ty, .. } => {
                            (name.clone(), v.map(|t| normal_text(Some(ty), t)))
                        }
                        other => (String::new(), v.map(|t| normal_text(Some(other.ty()), t))),
                    })
                    .collect();
                hash(prefix, &values)
            }
            _ => "1".to_string(),
        }
    }

    /// A SQL text expression over the outer table giving the slot [`Dnf::tags`] computes for
    /// position `position` of a row: `'1'` for a plain position, else `md5(prefix ‖ ns)` with
    /// each value's normal text computed in SQL (`"col"::text`, `trim_scale` for numeric,
    /// `'0'` for a float zero, `justify_interval` for interval), so it matches the hash of the
    /// row's tags and of patterns.
    ///
    /// # Panics
    /// When `position` is not a position of this DNF.
    pub(crate) fn slot_sql(&self, position: usize, prefix: &str) -> String {
        let Expr::Sublink { left, .. } = &self.atoms[position] else {
            return "'1'".to_string();
        };
        let namespaced = |c: &Expr| match c {
            Expr::Column { name, ty, .. } => {
                let col = quote_ident(name);
                format!(
                    "CASE WHEN {col} IS NULL THEN 'NULL' ELSE 'v:' || {} END",
                    normal_sql(ty, &col)
                )
            }
            _ => "'NULL'".to_string(),
        };
        let body: Vec<String> = match left.as_slice() {
            [one] => vec![namespaced(one)],
            many => many
                .iter()
                .map(|c| {
                    let name = match c {
                        Expr::Column { name, .. } => name.as_str(),
                        _ => "",
                    };
                    format!(
                        "{} || {}",
                        quote_literal(&format!("{name}:")),
                        namespaced(c)
                    )
                })
                .collect(),
        };
        format!("md5({} || {})", quote_literal(prefix), body.join(" || "))
    }
}

/// SQL for the normal text of column SQL `col` of type `ty` (see `Datum::normal_text`).
fn normal_sql(ty: &Type, col: &str) -> String {
    match ty {
        Type::Numeric => format!("trim_scale({col})::text"),
        Type::Float4 | Type::Float8 => {
            format!("(CASE WHEN {col} = 0 THEN '0' ELSE {col}::text END)")
        }
        Type::Interval => format!("justify_interval({col})::text"),
        _ => format!("{col}::text"),
    }
}

/// The position of a column expression.
fn column_index(e: &Expr) -> Option<usize> {
    match e {
        Expr::Column { index, .. } => Some(*index),
        _ => None,
    }
}

/// Column `index` of `row` as its normal text; `None` for NULL. A value that does not decode
/// is taken as it came.
fn row_text(row: &Row, index: usize, ty: &Type) -> Option<String> {
    match row.get(index) {
        Ok(Some(datum)) => Some(datum.normal_text(ty)),
        Ok(None) => None,
        Err(_) => row.raw_text(index),
    }
}

/// Electric's namespaced value: `v:<text>`, or `NULL` for SQL NULL.
fn namespaced(value: Option<&str>) -> String {
    match value {
        Some(text) => format!("v:{text}"),
        None => "NULL".to_string(),
    }
}

/// Lowercase hex md5 of `prefix` and the namespaced values: one column's `ns(v)`, or for a row
/// each column's name, `:` and `ns(v)`, concatenated.
fn hash(prefix: &str, values: &[(String, Option<String>)]) -> String {
    let body = match values {
        [(_, value)] => namespaced(value.as_deref()),
        many => many
            .iter()
            .map(|(name, value)| format!("{name}:{}", namespaced(value.as_deref())))
            .collect(),
    };
    let digest = Md5::new()
        .chain_update(prefix.as_bytes())
        .chain_update(body.as_bytes())
        .finalize();
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_as_electric() {
        // md5("single_stackh1v:1") and md5("single_stackh1NULL"), by `md5sum`.
        assert_eq!(
            hash("single_stackh1", &[(String::new(), Some("1".into()))]),
            "c558a6b83394892dfe0fa21d32684763"
        );
        assert_eq!(
            hash("single_stackh1", &[(String::new(), None)]),
            "03c2b5316a6edf3d5bde5b1d4afaf6c1"
        );
        // md5("single_stackh1a:v:1b:NULL"): a row `(a, b)`.
        assert_eq!(
            hash(
                "single_stackh1",
                &[("a".into(), Some("1".into())), ("b".into(), None)]
            ),
            "78f01a13276b1cbe0487e402b1a75ad3"
        );
    }
}

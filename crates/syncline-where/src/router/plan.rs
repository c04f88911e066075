//! Splitting a where clause into index accesses and residual conditions.
//!
//! A clause becomes one or more branches (its OR arms); a shape matches a row when any branch
//! does. A branch is an access the index can answer exactly (`col = c`, `arr @> c`, a range,
//! `col LIKE 'p%'`) and the remaining conjuncts, which are planned again one index level down.
//! A clause with an arm that has no access is evaluated as a whole, per shape. A subquery
//! reached through AND and OR only is an access too, answered by the shape's own value set.

use std::cmp::Ordering;

use super::key::Key;
use crate::expr::{CmpOp, Expr, Op};
use crate::types::Type;
use crate::value::{Datum, Nullable};

/// One end of a range.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bound {
    /// No limit.
    Unbounded,
    /// Includes the value.
    Incl(Datum),
    /// Excludes the value.
    Excl(Datum),
}

/// What an index answers exactly for one column.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Access {
    /// `col = value`.
    Eq(usize, Key),
    /// `col @> values` (sorted, distinct, non-empty; `c = ANY(col)` is one value).
    Contains(usize, Vec<Key>),
    /// `lo <(=) col <(=) hi`.
    Range(usize, Bound, Bound),
    /// `col LIKE 'prefix%'`.
    Prefix(usize, String),
    /// `cols IN (SELECT ...)`: the left-side values are in the shape's value set of subquery
    /// `subquery`. Indexed per shape, by the values of its set (see `Router::view_insert`).
    View {
        /// Index of the subquery in the shape's clause.
        subquery: usize,
        /// The left-side columns.
        cols: Vec<usize>,
    },
}

/// An OR arm: an access, or none when the arm must be evaluated whole; and what else must hold.
pub(crate) struct Branch {
    /// The indexed condition, if any.
    pub(crate) access: Option<Access>,
    /// Remaining conjuncts (all must be true).
    pub(crate) rest: Vec<Expr>,
}

/// The branches of `expr` (a single access-less branch when it cannot be indexed).
pub(crate) fn branches(expr: &Expr) -> Vec<Branch> {
    let whole = || {
        vec![Branch {
            access: None,
            rest: vec![expr.clone()],
        }]
    };
    match expr {
        Expr::Or(args) => {
            let mut out = Vec::new();
            for arg in args {
                let arm = branches(arg);
                if arm.iter().any(|b| b.access.is_none()) {
                    return whole();
                }
                out.extend(arm);
            }
            out
        }
        Expr::And(args) => conjunction(args).unwrap_or_else(whole),
        Expr::InList {
            arg,
            list,
            negated: false,
        } => match (column_of(arg), constants(list)) {
            (Some(col), Some(values)) => {
                let keys: Vec<Key> = values.iter().flatten().filter_map(Key::of).collect();
                if keys.len() != values.iter().flatten().count() {
                    return whole();
                }
                keys.into_iter()
                    .map(|k| Branch {
                        access: Some(Access::Eq(col, k)),
                        rest: Vec::new(),
                    })
                    .collect()
            }
            _ => whole(),
        },
        _ => match simple_access(expr) {
            Some(access) => vec![Branch {
                access: Some(access),
                rest: Vec::new(),
            }],
            None => whole(),
        },
    }
}

/// Picks the best access among the conjuncts (equality, then containment, prefix, range),
/// merging all range conditions on the chosen column; falls back to distributing a conjunct
/// that is itself an OR of accesses.
fn conjunction(args: &[Expr]) -> Option<Vec<Branch>> {
    let flat: Vec<&Expr> = args
        .iter()
        .flat_map(|a| {
            if let Expr::And(inner) = a {
                inner.iter().collect()
            } else {
                vec![a]
            }
        })
        .collect();
    let accesses: Vec<Option<Access>> = flat.iter().map(|e| simple_access(e)).collect();
    let rank = |a: &Access| match a {
        Access::Eq(..) => 0,
        Access::View { .. } => 1,
        Access::Contains(..) => 2,
        Access::Prefix(..) => 3,
        Access::Range(..) => 4,
    };
    let best = accesses
        .iter()
        .enumerate()
        .filter_map(|(i, a)| a.as_ref().map(|a| (rank(a), i)))
        .min();
    if let Some((_, i)) = best {
        let mut access = accesses[i].clone()?;
        let mut used = vec![i];
        if let Access::Range(col, lo, hi) = &mut access {
            for (j, other) in accesses.iter().enumerate() {
                if let (true, Some(Access::Range(c, l, h))) = (j != i, other) {
                    if c == col {
                        *lo = tighter(lo.clone(), l.clone(), true);
                        *hi = tighter(hi.clone(), h.clone(), false);
                        used.push(j);
                    }
                }
            }
        }
        let rest = flat
            .iter()
            .enumerate()
            .filter(|(j, _)| !used.contains(j))
            .map(|(_, e)| (*e).clone())
            .collect();
        return Some(vec![Branch {
            access: Some(access),
            rest,
        }]);
    }
    for (i, e) in flat.iter().enumerate() {
        if !matches!(e, Expr::Or(_)) {
            continue;
        }
        let arms = branches(e);
        if arms.iter().all(|b| b.access.is_some()) {
            let others: Vec<Expr> = flat
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, e)| (*e).clone())
                .collect();
            return Some(
                arms.into_iter()
                    .map(|mut b| {
                        b.rest.extend(others.iter().cloned());
                        b
                    })
                    .collect(),
            );
        }
    }
    None
}

/// The tighter of two lower (`lower`) or upper bounds.
fn tighter(a: Bound, b: Bound, lower: bool) -> Bound {
    let value = |x: &Bound| match x {
        Bound::Incl(v) | Bound::Excl(v) => Some(v.clone()),
        Bound::Unbounded => None,
    };
    match (value(&a), value(&b)) {
        (None, _) => b,
        (_, None) => a,
        (Some(x), Some(y)) => match x.compare(&y) {
            Ordering::Equal => {
                if matches!(a, Bound::Excl(_)) {
                    a
                } else {
                    b
                }
            }
            Ordering::Greater => {
                if lower {
                    a
                } else {
                    b
                }
            }
            Ordering::Less => {
                if lower {
                    b
                } else {
                    a
                }
            }
        },
    }
}

/// The column an expression reads unchanged: a column, or an integer column widened.
fn column_of(e: &Expr) -> Option<usize> {
    match e {
        Expr::Column { index, .. } => Some(*index),
        Expr::Op {
            op: Op::Cast,
            args,
            ty,
        } if ty.is_integer() && args[0].ty().is_integer() => column_of(&args[0]),
        _ => None,
    }
}

fn constant(e: &Expr) -> Option<&Nullable> {
    match e {
        Expr::Const { value, .. } => Some(value),
        _ => None,
    }
}

fn constants(list: &[Expr]) -> Option<Vec<Nullable>> {
    list.iter().map(|e| constant(e).cloned()).collect()
}

/// Whether ordering comparisons on this type can be answered from `Datum::compare` by a range
/// index.
fn rangeable(ty: &Type) -> bool {
    !matches!(ty, Type::Array(_) | Type::Jsonb | Type::Enum(_))
}

/// A single condition the index answers exactly.
fn simple_access(e: &Expr) -> Option<Access> {
    match e {
        Expr::Sublink { subquery, left } => Some(Access::View {
            subquery: *subquery,
            cols: left.iter().map(column_of).collect::<Option<Vec<_>>>()?,
        }),
        Expr::Op {
            op: Op::Cmp(cmp),
            args,
            ..
        } => {
            let (col, value, cmp) = match (column_of(&args[0]), column_of(&args[1])) {
                (Some(c), None) => (c, constant(&args[1])?.clone()?, *cmp),
                (None, Some(c)) => (c, constant(&args[0])?.clone()?, cmp.flipped()),
                _ => return None,
            };
            comparison_access(col, value, cmp, args[0].ty())
        }
        Expr::Op {
            op: Op::ArrayContains,
            args,
            ..
        } => contains_access(column_of(&args[0])?, constant(&args[1])?.as_ref()?),
        Expr::Op {
            op: Op::ArrayContainedBy,
            args,
            ..
        } => contains_access(column_of(&args[1])?, constant(&args[0])?.as_ref()?),
        Expr::Quantified {
            op: CmpOp::Eq,
            left,
            array,
            all: false,
        } => {
            let key = Key::of(constant(left)?.as_ref()?)?;
            Some(Access::Contains(column_of(array)?, vec![key]))
        }
        Expr::Op {
            op:
                Op::LikeMatch {
                    pattern,
                    negated: false,
                },
            args,
            ..
        } => Some(Access::Prefix(
            column_of(&args[0])?,
            pattern.literal_prefix()?,
        )),
        _ => None,
    }
}

fn comparison_access(col: usize, value: Datum, cmp: CmpOp, ty: &Type) -> Option<Access> {
    match cmp {
        CmpOp::Eq => Some(Access::Eq(col, Key::of(&value)?)),
        CmpOp::Ne => None,
        _ if !rangeable(ty) || Key::of(&value).is_none() => None,
        CmpOp::Lt => Some(Access::Range(col, Bound::Unbounded, Bound::Excl(value))),
        CmpOp::Le => Some(Access::Range(col, Bound::Unbounded, Bound::Incl(value))),
        CmpOp::Gt => Some(Access::Range(col, Bound::Excl(value), Bound::Unbounded)),
        CmpOp::Ge => Some(Access::Range(col, Bound::Incl(value), Bound::Unbounded)),
    }
}

fn contains_access(col: usize, value: &Datum) -> Option<Access> {
    let Datum::Array(array) = value else {
        return None;
    };
    let mut keys = Vec::with_capacity(array.elems.len());
    for elem in &array.elems {
        keys.push(Key::of(elem.as_ref()?)?);
    }
    if keys.is_empty() {
        return None;
    }
    keys.sort();
    keys.dedup();
    Some(Access::Contains(col, keys))
}

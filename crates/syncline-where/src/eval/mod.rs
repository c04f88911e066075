//! Evaluating a checked expression on a row with Postgres semantics: three-valued logic,
//! strict operators, exact numeric, "C" collation.

mod arith;
mod cast;
mod row;

use std::cmp::Ordering;
use std::sync::Arc;

pub(crate) use cast::cast_value;
pub use row::{Row, RowTypes};

use crate::error::EvalError;
use crate::expr::{ArrayBuild, BoolTest, CmpOp, Expr, Op, Subscript};
use crate::like::like;
use crate::types::Type;
use crate::value::array::Array;
use crate::value::timezone::{timezone, ZoneArg};
use crate::value::{Datum, Nullable};

/// How a subquery occurrence learns whether its left-side values are in the subquery's value
/// set: from the caller's [`crate::Views`], or from the router's own sets.
pub(crate) trait Membership {
    /// `left IN (subquery)` for the left-side values `left` of types `types`: SQL's
    /// three-valued answer (`Ok(None)` is NULL); an error when the answer is not known.
    fn member(
        &self,
        subquery: usize,
        left: &[Nullable],
        types: &[Type],
    ) -> Result<Option<bool>, EvalError>;

    /// Whether `IN (subquery)` is false whatever the left side is (the set is empty), so the
    /// left side need not be evaluated.
    fn is_empty(&self, subquery: usize) -> bool;
}

/// What evaluation reads: the row, and the subqueries' value sets when there are any.
pub(crate) struct Cx<'r, 'a> {
    /// The row.
    pub(crate) row: &'r Row<'a>,
    /// The value sets; `None` makes any subquery occurrence an error.
    pub(crate) views: Option<&'r dyn Membership>,
}

impl<'r, 'a> Cx<'r, 'a> {
    /// A row without value sets.
    pub(crate) fn of(row: &'r Row<'a>) -> Cx<'r, 'a> {
        Cx { row, views: None }
    }

    fn get(&self, index: usize) -> Result<Nullable, EvalError> {
        self.row.get(index)
    }
}

/// The error of evaluating a subquery occurrence without its value set.
pub(crate) fn no_views() -> EvalError {
    EvalError::Other("the clause has subqueries: evaluate it with their value sets".into())
}

/// Evaluates `expr` on `row`. `Ok(None)` is SQL NULL.
pub(crate) fn eval(expr: &Expr, row: &Cx) -> Result<Nullable, EvalError> {
    match expr {
        Expr::Const { value, .. } => Ok(value.clone()),
        Expr::Column { index, .. } => row.get(*index),
        // Most operators take two operands: no vectors for them (a comparison per change and
        // shape is the router's and the pipeline's commonest evaluation).
        Expr::Op { op, args, ty } if args.len() == 2 => {
            let (left, right) = (eval(&args[0], row)?, eval(&args[1], row)?);
            match (left, right) {
                (Some(left), Some(right)) => apply(op, args, &[left, right], ty),
                _ => Ok(None),
            }
        }
        Expr::Op { op, args, ty } => {
            let mut values = Vec::with_capacity(args.len());
            for arg in args {
                values.push(eval(arg, row)?);
            }
            match values.into_iter().collect::<Option<Vec<Datum>>>() {
                Some(values) => apply(op, args, &values, ty),
                None => Ok(None),
            }
        }
        Expr::Not(arg) => Ok(eval_bool(arg, row)?.map(|b| !b).map(Datum::Bool)),
        Expr::And(args) => logic(args, row, false),
        Expr::Or(args) => logic(args, row, true),
        Expr::IsNull { arg, negated } => {
            Ok(Some(Datum::Bool(eval(arg, row)?.is_none() != *negated)))
        }
        Expr::BoolTest { arg, test } => {
            let v = eval_bool(arg, row)?;
            let result = match test {
                BoolTest::True => v == Some(true),
                BoolTest::NotTrue => v != Some(true),
                BoolTest::False => v == Some(false),
                BoolTest::NotFalse => v != Some(false),
                BoolTest::Unknown => v.is_none(),
                BoolTest::NotUnknown => v.is_some(),
            };
            Ok(Some(Datum::Bool(result)))
        }
        Expr::Distinct {
            left,
            right,
            negated,
        } => {
            let same = match (eval(left, row)?, eval(right, row)?) {
                (None, None) => true,
                (Some(a), Some(b)) => a.compare(&b) == Ordering::Equal,
                _ => false,
            };
            Ok(Some(Datum::Bool(same == *negated)))
        }
        Expr::InList { arg, list, negated } => {
            let needle = eval(arg, row)?;
            let candidates = list
                .iter()
                .map(|c| eval(c, row))
                .collect::<Result<Vec<_>, _>>()?;
            let Some(needle) = needle else {
                return Ok(None);
            };
            let mut saw_null = false;
            for candidate in candidates {
                match candidate {
                    Some(c) if needle.compare(&c) == Ordering::Equal => {
                        return Ok(Some(Datum::Bool(!negated)))
                    }
                    Some(_) => {}
                    None => saw_null = true,
                }
            }
            Ok(if saw_null {
                None
            } else {
                Some(Datum::Bool(*negated))
            })
        }
        Expr::Quantified {
            op,
            left,
            array,
            all,
        } => quantified(*op, eval(left, row)?, eval(array, row)?, *all),
        Expr::Coalesce { args, .. } => {
            for arg in args {
                if let Some(v) = eval(arg, row)? {
                    return Ok(Some(v));
                }
            }
            Ok(None)
        }
        Expr::MinMax { greatest, args, .. } => {
            let mut best: Nullable = None;
            for arg in args {
                if let Some(v) = eval(arg, row)? {
                    let better = match &best {
                        None => true,
                        Some(b) => {
                            v.compare(b)
                                == if *greatest {
                                    Ordering::Greater
                                } else {
                                    Ordering::Less
                                }
                        }
                    };
                    if better {
                        best = Some(v);
                    }
                }
            }
            Ok(best)
        }
        Expr::Concat(args) => {
            let mut out = String::new();
            for arg in args {
                if let Some(v) = eval(arg, row)? {
                    out.push_str(&v.to_text(arg.ty()));
                }
            }
            Ok(Some(Datum::Text(Arc::from(out))))
        }
        Expr::ArrayCtor { elems, .. } => {
            let values = elems
                .iter()
                .map(|e| eval(e, row))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Some(Datum::Array(Arc::new(Array::from_elems(values)))))
        }
        Expr::Subscript {
            array, subscripts, ..
        } => subscript(eval(array, row)?, subscripts, row),
        Expr::ArrayBuild { kind, args, .. } => {
            array_build(*kind, eval(&args[0], row)?, eval(&args[1], row)?)
        }
        Expr::Sublink { subquery, left, .. } => {
            let views = row.views.ok_or_else(no_views)?;
            if views.is_empty(*subquery) {
                return Ok(Some(Datum::Bool(false)));
            }
            let values = left
                .iter()
                .map(|e| eval(e, row))
                .collect::<Result<Vec<_>, _>>()?;
            let types: Vec<Type> = left.iter().map(|e| e.ty().clone()).collect();
            Ok(views.member(*subquery, &values, &types)?.map(Datum::Bool))
        }
    }
}

/// Evaluates a boolean expression.
pub(crate) fn eval_bool(expr: &Expr, row: &Cx) -> Result<Option<bool>, EvalError> {
    match eval(expr, row)? {
        Some(Datum::Bool(b)) => Ok(Some(b)),
        None => Ok(None),
        Some(other) => Err(EvalError::Other(format!(
            "expected a boolean, got {other:?}"
        ))),
    }
}

/// The values a boolean expression may have for routing: a set of true, false and NULL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Possible(u8);

impl Possible {
    const TRUE: u8 = 1;
    const FALSE: u8 = 2;
    const NULL: u8 = 4;
    /// Anything: an error, or a value not known.
    pub(crate) const ANY: Possible = Possible(Self::TRUE | Self::FALSE | Self::NULL);

    fn of(v: Option<bool>) -> Possible {
        Possible(match v {
            Some(true) => Self::TRUE,
            Some(false) => Self::FALSE,
            None => Self::NULL,
        })
    }

    fn values(self) -> impl Iterator<Item = Option<bool>> {
        [Some(true), Some(false), None]
            .into_iter()
            .filter(move |v| self.0 & Possible::of(*v).0 != 0)
    }

    /// Whether the expression may be true.
    pub(crate) fn may_be_true(self) -> bool {
        self.0 & Self::TRUE != 0
    }

    /// Every value `f` gives for a value of `self` and one of `other`.
    fn combine(
        self,
        other: Possible,
        f: impl Fn(Option<bool>, Option<bool>) -> Option<bool>,
    ) -> Possible {
        let mut out = 0;
        for a in self.values() {
            for b in other.values() {
                out |= Possible::of(f(a, b)).0;
            }
        }
        Possible(out)
    }
}

/// SQL's AND of two truth values.
fn and3(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    }
}

/// SQL's OR of two truth values.
fn or3(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (Some(false), Some(false)) => Some(false),
        _ => None,
    }
}

/// Evaluates a boolean expression for routing: the values it may have, where an operand that
/// fails (or whose value is not known, such as a subquery the router cannot decide) may be
/// anything, combined through AND, OR and NOT with SQL's truth tables. So an AND with a false
/// operand is false and an OR with a true one true whatever the others give (for Postgres the
/// order of operands decides whether it fails), and the answer does not depend on which
/// conjunct an index checks first.
pub(crate) fn eval_bool_for_routing(expr: &Expr, row: &Cx) -> Possible {
    match expr {
        Expr::And(args) => args.iter().fold(Possible::of(Some(true)), |acc, a| {
            acc.combine(eval_bool_for_routing(a, row), and3)
        }),
        Expr::Or(args) => args.iter().fold(Possible::of(Some(false)), |acc, a| {
            acc.combine(eval_bool_for_routing(a, row), or3)
        }),
        Expr::Not(arg) => {
            eval_bool_for_routing(arg, row).combine(Possible::of(None), |a, _| a.map(|b| !b))
        }
        _ => match eval_bool(expr, row) {
            Ok(v) => Possible::of(v),
            Err(_) => Possible::ANY,
        },
    }
}

/// Evaluates an expression without columns; `None` when it needs a row or fails.
pub(crate) fn eval_constant(expr: &Expr) -> Option<Nullable> {
    eval_constant_checked(expr).ok()
}

/// Evaluates an expression without columns.
pub(crate) fn eval_constant_checked(expr: &Expr) -> Result<Nullable, EvalError> {
    if !expr.columns().is_empty() {
        return Err(EvalError::Other("expression reads columns".into()));
    }
    eval(expr, &Cx::of(&Row::empty()))
}

/// AND (`stop_on` false) / OR (`stop_on` true) with Postgres's truth tables.
fn logic(args: &[Expr], row: &Cx, stop_on: bool) -> Result<Nullable, EvalError> {
    let mut saw_null = false;
    for arg in args {
        match eval_bool(arg, row)? {
            Some(b) if b == stop_on => return Ok(Some(Datum::Bool(stop_on))),
            Some(_) => {}
            None => saw_null = true,
        }
    }
    Ok(if saw_null {
        None
    } else {
        Some(Datum::Bool(!stop_on))
    })
}

fn quantified(
    op: CmpOp,
    left: Nullable,
    array: Nullable,
    all: bool,
) -> Result<Nullable, EvalError> {
    let Some(Datum::Array(array)) = array else {
        return Ok(None);
    };
    if array.elems.is_empty() {
        return Ok(Some(Datum::Bool(all)));
    }
    let Some(left) = left else { return Ok(None) };
    let mut saw_null = false;
    for elem in &array.elems {
        match elem {
            None => saw_null = true,
            Some(e) => {
                if op.holds(left.compare(e)) != all {
                    return Ok(Some(Datum::Bool(!all)));
                }
            }
        }
    }
    Ok(if saw_null {
        None
    } else {
        Some(Datum::Bool(all))
    })
}

/// An array access as Postgres evaluates it: a NULL array is NULL without evaluating the
/// subscripts; otherwise every given subscript is evaluated (upper ones first, then lower ones),
/// and any NULL among them gives NULL.
fn subscript(array: Nullable, subscripts: &[Subscript], row: &Cx) -> Result<Nullable, EvalError> {
    let Some(Datum::Array(array)) = array else {
        return Ok(None);
    };
    let bound = |e: &Option<Expr>| -> Result<Option<Nullable>, EvalError> {
        e.as_ref().map(|e| eval(e, row)).transpose()
    };
    let uppers = subscripts
        .iter()
        .map(|s| bound(&s.upper))
        .collect::<Result<Vec<_>, _>>()?;
    let lowers = subscripts
        .iter()
        .map(|s| bound(&s.lower))
        .collect::<Result<Vec<_>, _>>()?;
    let int = |v: Option<Nullable>| -> Option<Option<i64>> {
        match v {
            None => Some(None),
            Some(Some(Datum::Int(i))) => Some(Some(i)),
            Some(_) => None,
        }
    };
    let mut bounds = Vec::with_capacity(subscripts.len());
    for ((s, lower), upper) in subscripts.iter().zip(lowers).zip(uppers) {
        let (Some(lower), Some(upper)) = (int(lower), int(upper)) else {
            return Ok(None);
        };
        bounds.push((if s.slice { lower } else { Some(1) }, upper));
    }
    if subscripts.iter().any(|s| s.slice) {
        return Ok(Some(Datum::Array(Arc::new(array.slice(&bounds)))));
    }
    let index: Option<Vec<i64>> = bounds.iter().map(|(_, upper)| *upper).collect();
    Ok(index.and_then(|index| array.element(&index)))
}

fn array_build(kind: ArrayBuild, a: Nullable, b: Nullable) -> Result<Nullable, EvalError> {
    let as_array = |v: Nullable| match v {
        Some(Datum::Array(a)) => Some(a),
        _ => None,
    };
    let one_dim = |a: &Array| a.dims.len() <= 1;
    let multi = || {
        EvalError::Other("multidimensional arrays are not supported by array concatenation".into())
    };
    Ok(match kind {
        ArrayBuild::Cat => match (as_array(a), as_array(b)) {
            (None, None) => None,
            (Some(x), None) | (None, Some(x)) => Some(Datum::Array(x)),
            (Some(x), Some(y)) if x.elems.is_empty() => Some(Datum::Array(y)),
            (Some(x), Some(y)) if y.elems.is_empty() => Some(Datum::Array(x)),
            (Some(x), Some(y)) if one_dim(&x) && one_dim(&y) => {
                let elems = x.elems.iter().chain(&y.elems).cloned().collect();
                Some(Datum::Array(Arc::new(Array::from_elems(elems))))
            }
            _ => return Err(multi()),
        },
        ArrayBuild::Append | ArrayBuild::Prepend => {
            let (array, elem) = if kind == ArrayBuild::Append {
                (a, b)
            } else {
                (b, a)
            };
            let array = as_array(array).unwrap_or_default();
            if !one_dim(&array) {
                return Err(multi());
            }
            let mut elems = array.elems.clone();
            if kind == ArrayBuild::Append {
                elems.push(elem);
            } else {
                elems.insert(0, elem);
            }
            Some(Datum::Array(Arc::new(Array::from_elems(elems))))
        }
    })
}

fn text(d: &Datum) -> &str {
    match d {
        Datum::Text(s) | Datum::Bpchar(s) => s,
        _ => "",
    }
}

fn array(d: &Datum) -> &Array {
    static EMPTY: Array = Array {
        dims: Vec::new(),
        elems: Vec::new(),
    };
    match d {
        Datum::Array(a) => a,
        _ => &EMPTY,
    }
}

/// Applies a strict operation to non-NULL argument values.
fn apply(op: &Op, args: &[Expr], values: &[Datum], ty: &Type) -> Result<Nullable, EvalError> {
    let b = |v: bool| Ok(Some(Datum::Bool(v)));
    let s = |v: String| Ok(Some(Datum::Text(Arc::from(v))));
    match op {
        Op::Cmp(cmp) => b(cmp.holds(values[0].compare(&values[1]))),
        Op::Cast => cast_value(Some(values[0].clone()), args[0].ty(), ty),
        Op::Like {
            insensitive,
            negated,
        } => {
            let escape = values.get(2).map(text);
            b(like(text(&values[0]), text(&values[1]), escape, *insensitive)? != *negated)
        }
        Op::LikeMatch { pattern, negated } => b(pattern.matches(text(&values[0]))? != *negated),
        Op::Lower => s(text(&values[0]).to_ascii_lowercase()),
        Op::Upper => s(text(&values[0]).to_ascii_uppercase()),
        Op::TextConcat => s(format!("{}{}", text(&values[0]), text(&values[1]))),
        Op::ArrayContains => b(array(&values[0]).contains(array(&values[1]))),
        Op::ArrayContainedBy => b(array(&values[1]).contains(array(&values[0]))),
        Op::ArrayOverlaps => b(array(&values[0]).overlaps(array(&values[1]))),
        Op::ArrayNdims => Ok(match array(&values[0]).dims.len() {
            0 => None,
            n => Some(Datum::Int(i64::try_from(n).expect("at most 6 dimensions"))),
        }),
        Op::JsonGet | Op::JsonGetText | Op::JsonContains | Op::JsonHasKey => json(op, values),
        Op::Timezone => at_time_zone(args, values),
        _ => arith::apply(op, args, values, ty),
    }
}

/// `timezone(zone, ts)`: a timestamp argument is local time in the zone, a timestamptz an
/// instant.
fn at_time_zone(args: &[Expr], values: &[Datum]) -> Result<Nullable, EvalError> {
    let zone = match &values[0] {
        Datum::Interval(iv) => ZoneArg::Interval(iv),
        other => ZoneArg::Name(text(other)),
    };
    let Datum::Timestamp(ts) = values[1] else {
        return Err(EvalError::Other("timezone() expects a timestamp".into()));
    };
    let to_utc = *args[1].ty() == Type::Timestamp;
    Ok(Some(Datum::Timestamp(timezone(zone, ts, to_utc)?)))
}

fn json(op: &Op, values: &[Datum]) -> Result<Nullable, EvalError> {
    let Datum::Jsonb(doc) = &values[0] else {
        return Ok(None);
    };
    let found = match &values[1] {
        Datum::Text(key) if matches!(op, Op::JsonGet | Op::JsonGetText) => doc.field(key),
        Datum::Int(i) => doc.element(*i),
        Datum::Text(key) => return Ok(Some(Datum::Bool(doc.has_key(key)))),
        Datum::Jsonb(other) => return Ok(Some(Datum::Bool(doc.contains(other)))),
        _ => None,
    };
    Ok(match (op, found) {
        (_, None) => None,
        (Op::JsonGet, Some(v)) => Some(Datum::Jsonb(Arc::new(v.clone()))),
        (_, Some(v)) => v.as_text().map(|t| Datum::Text(Arc::from(t))),
    })
}

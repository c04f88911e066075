//! Arithmetic: integers with overflow checks per type, floats, numeric, date/time and
//! interval operators.

use std::sync::Arc;

use super::cast::{check_float, check_int};
use crate::error::EvalError;
use crate::expr::{Expr, Op};
use crate::types::Type;
use crate::value::datetime::{self, Interval, DATE_INFINITY, USECS_PER_DAY};
use crate::value::float::to_float4;
use crate::value::numeric::Numeric;
use crate::value::{Datum, Nullable};

/// Applies an arithmetic operation to non-NULL values; `ty` is the result type.
pub(crate) fn apply(
    op: &Op,
    args: &[Expr],
    values: &[Datum],
    ty: &Type,
) -> Result<Nullable, EvalError> {
    let result = match values {
        [v] => unary(op, v, ty)?,
        [a, b] => binary(op, (args[0].ty(), a), (args[1].ty(), b), ty)?,
        _ => {
            return Err(EvalError::Other(format!(
                "{op:?} takes one or two arguments"
            )))
        }
    };
    Ok(Some(result))
}

fn unary(op: &Op, v: &Datum, ty: &Type) -> Result<Datum, EvalError> {
    match (op, v) {
        (Op::Neg, Datum::Int(i)) => check_int(
            i.checked_neg().ok_or(EvalError::OutOfRange(int_name(ty)))?,
            ty,
        ),
        (Op::Abs, Datum::Int(i)) => check_int(
            i.checked_abs().ok_or(EvalError::OutOfRange(int_name(ty)))?,
            ty,
        ),
        (Op::BitNot, Datum::Int(i)) => check_int(!i, ty),
        (Op::Neg, Datum::Float(f)) => Ok(Datum::Float(-f)),
        (Op::Abs, Datum::Float(f)) => Ok(Datum::Float(f.abs())),
        (Op::Sqrt, Datum::Float(f)) if *f < 0.0 => Err(EvalError::Other(
            "cannot take square root of a negative number".into(),
        )),
        (Op::Sqrt, Datum::Float(f)) => Ok(Datum::Float(f.sqrt())),
        (Op::Neg, Datum::Numeric(n)) => Ok(Datum::Numeric(Arc::new(n.neg()))),
        (Op::Abs, Datum::Numeric(n)) => Ok(Datum::Numeric(Arc::new(n.abs()))),
        (Op::Neg, Datum::Interval(iv)) => Ok(Datum::Interval(
            iv.neg().ok_or(EvalError::OutOfRange("interval"))?,
        )),
        (Op::JustifyDays, Datum::Interval(iv)) => justified(iv.justify_days()),
        (Op::JustifyHours, Datum::Interval(iv)) => justified(iv.justify_hours()),
        (Op::JustifyInterval, Datum::Interval(iv)) => justified(iv.justify_interval()),
        _ => Err(EvalError::Other(format!("{op:?} does not apply to {v:?}"))),
    }
}

fn justified(iv: Option<Interval>) -> Result<Datum, EvalError> {
    iv.map(Datum::Interval)
        .ok_or(EvalError::OutOfRange("interval"))
}

fn int_name(ty: &Type) -> &'static str {
    match ty {
        Type::Int2 => "smallint",
        Type::Int8 => "bigint",
        _ => "integer",
    }
}

fn binary(
    op: &Op,
    (lt, a): (&Type, &Datum),
    (rt, b): (&Type, &Datum),
    ty: &Type,
) -> Result<Datum, EvalError> {
    match (a, b) {
        (Datum::Int(x), Datum::Int(y)) => int_op(op, *x, *y, ty),
        (Datum::Float(x), Datum::Float(y)) => float_op(op, *x, *y, ty),
        (Datum::Numeric(x), Datum::Numeric(y)) => numeric_op(op, x, y),
        (Datum::Date(d), Datum::Int(n)) => date_plus_days(*d, if *op == Op::Sub { -n } else { *n }),
        (Datum::Int(n), Datum::Date(d)) => date_plus_days(*d, *n),
        (Datum::Date(x), Datum::Date(y)) => date_diff(*x, *y),
        (Datum::Interval(x), Datum::Interval(y)) => {
            let y = if *op == Op::Sub {
                y.neg().ok_or(EvalError::OutOfRange("interval"))?
            } else {
                *y
            };
            Ok(Datum::Interval(
                x.add(&y).ok_or(EvalError::OutOfRange("interval"))?,
            ))
        }
        (Datum::Interval(iv), other) => plus_interval(rt, other, iv, false),
        (other, Datum::Interval(iv)) => plus_interval(lt, other, iv, *op == Op::Sub),
        (Datum::Timestamp(x), Datum::Timestamp(y)) => timestamp_diff(*x, *y),
        _ => Err(EvalError::Other(format!(
            "{op:?} does not apply to {a:?} and {b:?}"
        ))),
    }
}

fn int_op(op: &Op, x: i64, y: i64, ty: &Type) -> Result<Datum, EvalError> {
    let overflow = EvalError::OutOfRange(int_name(ty));
    let v = match op {
        Op::Add => x.checked_add(y),
        Op::Sub => x.checked_sub(y),
        Op::Mul => x.checked_mul(y),
        Op::Div if y == 0 => return Err(EvalError::DivisionByZero),
        Op::Div => x.checked_div(y),
        Op::Mod if y == 0 => return Err(EvalError::DivisionByZero),
        Op::Mod => Some(x.checked_rem(y).unwrap_or(0)),
        Op::BitAnd => Some(x & y),
        Op::BitOr => Some(x | y),
        Op::BitXor => Some(x ^ y),
        _ => {
            return Err(EvalError::Other(format!(
                "{op:?} does not apply to integers"
            )))
        }
    };
    check_int(v.ok_or(overflow)?, ty)
}

fn float_op(op: &Op, x: f64, y: f64, ty: &Type) -> Result<Datum, EvalError> {
    let single = *ty == Type::Float4;
    let v = match op {
        Op::Add => x + y,
        Op::Sub => x - y,
        Op::Mul => x * y,
        Op::Div if y == 0.0 && !x.is_nan() => return Err(EvalError::DivisionByZero),
        Op::Div => x / y,
        Op::Pow => return pow(x, y),
        _ => return Err(EvalError::Other(format!("{op:?} does not apply to floats"))),
    };
    let v = if single { f64::from(to_float4(v)) } else { v };
    let inputs_finite = x.is_finite() && y.is_finite();
    if v.is_infinite() && inputs_finite {
        return Err(EvalError::Other("value out of range: overflow".into()));
    }
    if v == 0.0 && *op == Op::Mul && x != 0.0 && y != 0.0 {
        return Err(EvalError::Other("value out of range: underflow".into()));
    }
    check_float(v, ty)
}

fn pow(x: f64, y: f64) -> Result<Datum, EvalError> {
    if x == 0.0 && y < 0.0 {
        return Err(EvalError::Other(
            "zero raised to a negative power is undefined".into(),
        ));
    }
    if x < 0.0 && y.is_finite() && y.floor() != y {
        return Err(EvalError::Other(
            "a negative number raised to a non-integer power yields a complex result".into(),
        ));
    }
    let v = x.powf(y);
    if v.is_infinite() && x.is_finite() && y.is_finite() {
        return Err(EvalError::Other("value out of range: overflow".into()));
    }
    if v == 0.0 && x != 0.0 && x.is_finite() && y.is_finite() {
        return Err(EvalError::Other("value out of range: underflow".into()));
    }
    Ok(Datum::Float(v))
}

fn numeric_op(op: &Op, x: &Numeric, y: &Numeric) -> Result<Datum, EvalError> {
    let v = match op {
        Op::Add => x.add(y),
        Op::Sub => x.sub(y),
        Op::Mul => x.mul(y),
        Op::Div => x.div(y)?,
        Op::Mod => x.rem(y)?,
        _ => {
            return Err(EvalError::Other(format!(
                "{op:?} does not apply to numeric"
            )))
        }
    };
    Ok(Datum::Numeric(Arc::new(v.checked()?)))
}

fn date_plus_days(d: i32, n: i64) -> Result<Datum, EvalError> {
    if d == DATE_INFINITY || d == -DATE_INFINITY - 1 {
        return Ok(Datum::Date(d));
    }
    let v = (d as i64)
        .checked_add(n)
        .and_then(|v| i32::try_from(v).ok());
    let v = v.filter(|v| {
        i64::from(*v)
            .checked_mul(USECS_PER_DAY)
            .and_then(datetime::valid_timestamp)
            .is_some()
    });
    v.map(Datum::Date).ok_or(EvalError::OutOfRange("date"))
}

fn date_diff(x: i32, y: i32) -> Result<Datum, EvalError> {
    let infinite = |d: i32| d == DATE_INFINITY || d == -DATE_INFINITY - 1;
    if infinite(x) || infinite(y) {
        return Err(EvalError::Other("cannot subtract infinite dates".into()));
    }
    Ok(Datum::Int(x as i64 - y as i64))
}

fn plus_interval(ty: &Type, v: &Datum, iv: &Interval, subtract: bool) -> Result<Datum, EvalError> {
    let iv = if subtract {
        iv.neg().ok_or(EvalError::OutOfRange("interval"))?
    } else {
        *iv
    };
    let ts = match v {
        Datum::Date(_) => {
            match super::cast_value(Some(v.clone()), &Type::Date, &Type::Timestamp)? {
                Some(Datum::Timestamp(t)) => t,
                _ => return Err(EvalError::OutOfRange("timestamp")),
            }
        }
        Datum::Timestamp(t) => *t,
        _ => return Err(EvalError::Other(format!("cannot add an interval to {ty}"))),
    };
    datetime::add_interval(ts, &iv)
        .map(Datum::Timestamp)
        .ok_or(EvalError::OutOfRange("timestamp"))
}

fn timestamp_diff(x: i64, y: i64) -> Result<Datum, EvalError> {
    let infinite =
        |t: i64| t == datetime::TIMESTAMP_INFINITY || t == -datetime::TIMESTAMP_INFINITY - 1;
    if infinite(x) || infinite(y) {
        return Err(EvalError::Other(
            "cannot subtract infinite timestamps".into(),
        ));
    }
    datetime::timestamp_diff(x, y)
        .map(Datum::Interval)
        .ok_or(EvalError::OutOfRange("interval"))
}

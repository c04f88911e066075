//! Value conversions between the language's types, as Postgres's cast functions do them.

use std::sync::Arc;

use crate::error::EvalError;
use crate::types::Type;
use crate::value::array::Array;
use crate::value::datetime::{DATE_INFINITY, TIMESTAMP_INFINITY, USECS_PER_DAY};
use crate::value::numeric::Numeric;
use crate::value::{bpchar_trim, float, Datum, Nullable};

fn int_range(ty: &Type) -> Option<(i64, i64, &'static str)> {
    match ty {
        Type::Int2 => Some((i16::MIN as i64, i16::MAX as i64, "smallint")),
        Type::Int4 => Some((i32::MIN as i64, i32::MAX as i64, "integer")),
        Type::Int8 => Some((i64::MIN, i64::MAX, "bigint")),
        _ => None,
    }
}

/// Checks an integer fits `ty`.
pub(crate) fn check_int(v: i64, ty: &Type) -> Result<Datum, EvalError> {
    match int_range(ty) {
        Some((min, max, name)) if v < min || v > max => Err(EvalError::OutOfRange(name)),
        _ => Ok(Datum::Int(v)),
    }
}

/// Rounds a float to `float4` when `ty` is float4, rejecting overflow.
pub(crate) fn check_float(v: f64, ty: &Type) -> Result<Datum, EvalError> {
    if *ty == Type::Float4 {
        let narrowed = float::to_float4(v);
        if narrowed.is_infinite() && v.is_finite() {
            return Err(EvalError::OutOfRange("real"));
        }
        return Ok(Datum::Float(narrowed as f64));
    }
    Ok(Datum::Float(v))
}

/// Converts `value` from type `from` to type `to`.
pub(crate) fn cast_value(value: Nullable, from: &Type, to: &Type) -> Result<Nullable, EvalError> {
    let Some(v) = value else { return Ok(None) };
    if from == to {
        return Ok(Some(v));
    }
    let string = |t: &Type| matches!(t, Type::Text | Type::Varchar | Type::Bpchar);
    if string(to) || matches!(to, Type::Enum(_)) && string(from) {
        // bpchar to text or varchar drops the padding (`rtrim1`); any other conversion goes
        // through the text output, padding and all.
        let text = match &v {
            Datum::Bpchar(s) if matches!(to, Type::Text | Type::Varchar) => {
                Arc::from(bpchar_trim(s))
            }
            _ => Arc::from(v.to_text(from)),
        };
        return Ok(Some(match to {
            Type::Bpchar => Datum::Bpchar(text),
            _ => Datum::Text(text),
        }));
    }
    if string(from) || matches!(from, Type::Enum(_)) {
        return Datum::parse(to, &v.to_text(from)).map(Some);
    }
    if let (Datum::Array(array), Type::Array(from_elem), Type::Array(to_elem)) = (&v, from, to) {
        let elems = array
            .elems
            .iter()
            .map(|e| cast_value(e.clone(), from_elem, to_elem))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Some(Datum::Array(Arc::new(Array {
            dims: array.dims.clone(),
            elems,
        }))));
    }
    let out = match (v, to) {
        (Datum::Int(i), t) if t.is_integer() => check_int(i, t)?,
        (Datum::Int(i), Type::Float4 | Type::Float8) => check_float(i as f64, to)?,
        (Datum::Int(i), Type::Numeric) => Datum::Numeric(Arc::new(Numeric::from_i64(i))),
        (Datum::Int(i), Type::Bool) => Datum::Bool(i != 0),
        (Datum::Bool(b), Type::Int4) => Datum::Int(b as i64),
        (Datum::Numeric(n), t) if t.is_integer() => {
            let name = int_range(t).map_or("integer", |r| r.2);
            match n.as_ref() {
                Numeric::NaN => {
                    return Err(EvalError::Other(format!("cannot convert NaN to {name}")))
                }
                Numeric::PosInf | Numeric::NegInf => {
                    return Err(EvalError::Other(format!(
                        "cannot convert infinity to {name}"
                    )))
                }
                Numeric::Finite(_) => {
                    check_int(n.round_to_i64().ok_or(EvalError::OutOfRange(name))?, t)?
                }
            }
        }
        (Datum::Numeric(n), Type::Float4) => check_float(
            float::parse(&n.to_text(), true).unwrap_or_else(|| n.to_f64()),
            to,
        )?,
        (Datum::Numeric(n), Type::Float8) => Datum::Float(n.to_f64()),
        (Datum::Float(f), t) if t.is_integer() => {
            let name = int_range(t).map_or("integer", |r| r.2);
            let r = f.round_ties_even();
            if !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&r) {
                return Err(EvalError::OutOfRange(name));
            }
            #[allow(
                clippy::cast_possible_truncation,
                reason = "r is integral and inside i64's range, checked above"
            )]
            let i = r as i64;
            check_int(i, t)?
        }
        (Datum::Float(f), Type::Float4 | Type::Float8) => check_float(f, to)?,
        (Datum::Float(f), Type::Numeric) => {
            Datum::Numeric(Arc::new(float_to_numeric(f, *from == Type::Float4)))
        }
        (Datum::Date(d), Type::Timestamp | Type::Timestamptz) => Datum::Timestamp(match d {
            DATE_INFINITY => TIMESTAMP_INFINITY,
            d if d == -DATE_INFINITY - 1 => -TIMESTAMP_INFINITY - 1,
            d => d as i64 * USECS_PER_DAY,
        }),
        (Datum::Timestamp(t), Type::Date) => Datum::Date(match t {
            TIMESTAMP_INFINITY => DATE_INFINITY,
            t if t == -TIMESTAMP_INFINITY - 1 => -DATE_INFINITY - 1,
            t => i32::try_from(t.div_euclid(USECS_PER_DAY))
                .map_err(|_| EvalError::OutOfRange("date"))?,
        }),
        (Datum::Timestamp(t), Type::Timestamp | Type::Timestamptz) => Datum::Timestamp(t),
        (v, to) => return Err(EvalError::Other(format!("cannot cast {v:?} to {to}"))),
    };
    Ok(Some(out))
}

/// Postgres's float to numeric: the float printed with 15 (float4: 6) significant digits.
fn float_to_numeric(f: f64, single: bool) -> Numeric {
    if f.is_nan() {
        return Numeric::NaN;
    }
    if f.is_infinite() {
        return if f > 0.0 {
            Numeric::PosInf
        } else {
            Numeric::NegInf
        };
    }
    let text = if single {
        format!("{:.5e}", float::to_float4(f))
    } else {
        format!("{f:.14e}")
    };
    let n = Numeric::parse(&text).unwrap_or(Numeric::NaN);
    match n {
        Numeric::Finite(v) => Numeric::Finite(v.normalized_scale()),
        other => other,
    }
}

trait NormalizedScale {
    fn normalized_scale(&self) -> Self;
}

impl NormalizedScale for bigdecimal::BigDecimal {
    /// Drops trailing fractional zeros, keeping a scale of at least 0 (`%g` output has none).
    fn normalized_scale(&self) -> Self {
        let n = self.normalized();
        if n.as_bigint_and_exponent().1 < 0 {
            n.with_scale(0)
        } else {
            n
        }
    }
}

//! Hashable keys for values, equal exactly when Postgres's `=` says the values are equal.

use std::sync::Arc;

use crate::value::numeric::Numeric;
use crate::value::{bpchar_trim, Datum};

/// A value as a hash key: numerics by their normalised digits, floats with -0 = 0 and one NaN,
/// intervals by their comparison span.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Key {
    /// `bool`.
    Bool(bool),
    /// Any integer type.
    Int(i64),
    /// `float4` / `float8` bits after normalisation.
    Float(u64),
    /// `numeric`, normalised.
    Numeric(Arc<str>),
    /// Text and enum labels.
    Text(Arc<str>),
    /// `uuid`.
    Uuid(u128),
    /// `date`.
    Date(i32),
    /// `time`, `timestamp`, `timestamptz`.
    Micros(i64),
    /// `interval`.
    Interval(i128),
}

impl Key {
    /// The key of a value; `None` for arrays and jsonb, which are not indexed by equality.
    pub(crate) fn of(d: &Datum) -> Option<Key> {
        Some(match d {
            Datum::Bool(b) => Key::Bool(*b),
            Datum::Int(i) => Key::Int(*i),
            Datum::Float(f) if f.is_nan() => Key::Float(f64::NAN.to_bits()),
            Datum::Float(f) => Key::Float((f + 0.0).to_bits()),
            Datum::Numeric(n) => Key::Numeric(Arc::from(match n.as_ref() {
                Numeric::Finite(v) => v.normalized().to_string(),
                other => other.to_text(),
            })),
            Datum::Text(s) => Key::Text(s.clone()),
            Datum::Bpchar(s) => Key::Text(Arc::from(bpchar_trim(s))),
            Datum::Uuid(u) => Key::Uuid(*u),
            Datum::Date(d) => Key::Date(*d),
            Datum::Time(t) | Datum::Timestamp(t) => Key::Micros(*t),
            Datum::Interval(iv) => Key::Interval(iv.span()),
            Datum::Jsonb(_) | Datum::Array(_) => return None,
        })
    }
}

//! Runtime values: decoding Postgres text into typed datums, comparing them and printing them.

pub(crate) mod array;
pub(crate) mod datetime;
pub(crate) mod float;
pub(crate) mod jsonb;
pub(crate) mod numeric;
pub(crate) mod timezone;

use std::cmp::Ordering;
use std::sync::Arc;

use crate::error::EvalError;
use crate::types::Type;
use array::Array;
use datetime::Interval;
use numeric::Numeric;

/// A non-NULL value of one of the language's types. NULL is `Option::None` around it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Datum {
    /// `bool`.
    Bool(bool),
    /// `int2`, `int4`, `int8` (range checked by the operations of each type).
    Int(i64),
    /// `float4` (held widened) and `float8`.
    Float(f64),
    /// `numeric`.
    Numeric(Arc<Numeric>),
    /// `text`, `varchar` and enum labels.
    Text(Arc<str>),
    /// `bpchar` as stored, padded: compared without its trailing spaces.
    Bpchar(Arc<str>),
    /// `uuid`, big-endian.
    Uuid(u128),
    /// `date`: days since 1970-01-01.
    Date(i32),
    /// `time`: microseconds since midnight.
    Time(i64),
    /// `timestamp` and `timestamptz`: microseconds since 1970-01-01 (UTC for timestamptz).
    Timestamp(i64),
    /// `interval`.
    Interval(Interval),
    /// `jsonb`.
    Jsonb(Arc<jsonb::Jsonb>),
    /// Arrays.
    Array(Arc<Array>),
}

/// A value that may be NULL.
pub(crate) type Nullable = Option<Datum>;

impl Datum {
    /// Decodes Postgres text output (or input) of `ty`.
    pub(crate) fn parse(ty: &Type, text: &str) -> Result<Datum, EvalError> {
        let invalid = || EvalError::invalid(ty, text.as_bytes());
        Ok(match ty {
            Type::Bool => Datum::Bool(parse_bool(text).ok_or_else(invalid)?),
            Type::Int2 => Datum::Int(parse_int(
                text,
                i16::MIN as i64,
                i16::MAX as i64,
                "smallint",
            )?),
            Type::Int4 => Datum::Int(parse_int(
                text,
                i32::MIN as i64,
                i32::MAX as i64,
                "integer",
            )?),
            Type::Int8 => Datum::Int(parse_int(text, i64::MIN, i64::MAX, "bigint")?),
            Type::Float4 => Datum::Float(float::parse(text, true).ok_or_else(invalid)?),
            Type::Float8 => Datum::Float(float::parse(text, false).ok_or_else(invalid)?),
            Type::Numeric => Datum::Numeric(Arc::new(
                Numeric::parse(text).ok_or_else(invalid)?.checked()?,
            )),
            Type::Text | Type::Varchar | Type::Enum(_) => Datum::Text(Arc::from(text)),
            Type::Bpchar => Datum::Bpchar(Arc::from(text)),
            Type::Uuid => Datum::Uuid(parse_uuid(text).ok_or_else(invalid)?),
            Type::Date => {
                let days = datetime::parse_date(text).ok_or_else(invalid)?;
                if !datetime::date_in_range(days) {
                    return Err(EvalError::Other(format!("date out of range: \"{text}\"")));
                }
                Datum::Date(days)
            }
            Type::Time => Datum::Time(datetime::parse_time(text).ok_or_else(invalid)?),
            Type::Timestamp | Type::Timestamptz => {
                let micros = datetime::parse_timestamp(text, *ty == Type::Timestamptz)
                    .ok_or_else(invalid)?;
                if !datetime::timestamp_in_range(micros) {
                    return Err(EvalError::Other(format!(
                        "timestamp out of range: \"{text}\""
                    )));
                }
                Datum::Timestamp(micros)
            }
            Type::Interval => Datum::Interval(Interval::parse(text).ok_or_else(invalid)?),
            Type::Jsonb => Datum::Jsonb(Arc::new(jsonb::Jsonb::parse(text)?)),
            Type::Array(elem) => Datum::Array(Arc::new(Array::parse(elem, text)?)),
        })
    }

    /// Postgres text output of a value of type `ty`.
    pub(crate) fn to_text(&self, ty: &Type) -> String {
        match (self, ty) {
            (Datum::Bool(b), _) => (if *b { "true" } else { "false" }).into(),
            (Datum::Int(i), _) => i.to_string(),
            (Datum::Float(f), Type::Float4) => float::to_text(*f, true),
            (Datum::Float(f), _) => float::to_text(*f, false),
            (Datum::Numeric(n), _) => n.to_text(),
            (Datum::Text(s) | Datum::Bpchar(s), _) => s.to_string(),
            (Datum::Uuid(u), _) => format_uuid(*u),
            (Datum::Date(d), _) => datetime::date_to_text(*d),
            (Datum::Time(t), _) => datetime::time_to_text(*t),
            (Datum::Timestamp(t), Type::Timestamptz) => datetime::timestamp_to_text(*t, true),
            (Datum::Timestamp(t), _) => datetime::timestamp_to_text(*t, false),
            (Datum::Interval(iv), _) => iv.to_text(),
            (Datum::Jsonb(j), _) => j.to_text(),
            (Datum::Array(a), Type::Array(elem)) => a.to_text(elem),
            (Datum::Array(a), _) => a.to_text(&Type::Text),
        }
    }

    /// A text for this value of type `ty` that is equal for two values exactly when Postgres's
    /// `=` says they are equal, and valid input for the type: Postgres's text output, except
    /// that a numeric drops trailing fractional zeros (`1.50` is `1.5`), a float's -0 is `0`, a
    /// `bpchar` drops its trailing spaces, and an interval is written in its justified form
    /// (a month is 30 days, a day 24 hours: `30 days` is `1 mon`). Arrays and jsonb keep their
    /// output text (so `{1.50}` and `{1.5}` differ).
    pub(crate) fn normal_text(&self, ty: &Type) -> String {
        match self {
            Datum::Numeric(n) => match n.as_ref() {
                Numeric::Finite(v) => {
                    let plain = v.normalized().to_plain_string();
                    if plain == "-0" {
                        "0".into()
                    } else {
                        plain
                    }
                }
                other => other.to_text(),
            },
            Datum::Float(f) if *f == 0.0 => "0".into(),
            Datum::Bpchar(s) => bpchar_trim(s).to_string(),
            Datum::Interval(iv) => justified(iv.span()).unwrap_or(*iv).to_text(),
            other => other.to_text(ty),
        }
    }

    /// Total order of two values of the same type, as Postgres's btree opclass orders them.
    pub(crate) fn compare(&self, other: &Datum) -> Ordering {
        match (self, other) {
            (Datum::Bool(a), Datum::Bool(b)) => a.cmp(b),
            (Datum::Int(a), Datum::Int(b)) => a.cmp(b),
            (Datum::Float(a), Datum::Float(b)) => float::compare(*a, *b),
            (Datum::Numeric(a), Datum::Numeric(b)) => a.cmp(b),
            (Datum::Text(a), Datum::Text(b)) => a.as_bytes().cmp(b.as_bytes()),
            (Datum::Bpchar(a), Datum::Bpchar(b)) => {
                bpchar_trim(a).as_bytes().cmp(bpchar_trim(b).as_bytes())
            }
            (Datum::Uuid(a), Datum::Uuid(b)) => a.cmp(b),
            (Datum::Date(a), Datum::Date(b)) => a.cmp(b),
            (Datum::Time(a), Datum::Time(b)) | (Datum::Timestamp(a), Datum::Timestamp(b)) => {
                a.cmp(b)
            }
            (Datum::Interval(a), Datum::Interval(b)) => a.span().cmp(&b.span()),
            (Datum::Jsonb(a), Datum::Jsonb(b)) => a.compare(b),
            (Datum::Array(a), Datum::Array(b)) => a.compare(b),
            _ => Ordering::Equal,
        }
    }
}

/// The interval of `span` microseconds as months of 30 days, days of 24 hours and the rest
/// (each part with the span's sign); `None` when the months do not fit.
fn justified(span: i128) -> Option<Interval> {
    let day = i128::from(datetime::USECS_PER_DAY);
    let month = 30 * day;
    Some(Interval {
        months: i32::try_from(span / month).ok()?,
        days: i32::try_from(span % month / day).ok()?,
        micros: i64::try_from(span % day).ok()?,
    })
}

/// A `bpchar` value without its trailing spaces: what its comparisons see and what a cast to
/// text keeps.
pub(crate) fn bpchar_trim(text: &str) -> &str {
    text.trim_end_matches(' ')
}

fn parse_bool(text: &str) -> Option<bool> {
    let t = text.trim().to_ascii_lowercase();
    if t.is_empty() {
        return None;
    }
    let is_prefix = |word: &str, min: usize| t.len() >= min && word.starts_with(t.as_str());
    if is_prefix("true", 1) || is_prefix("yes", 1) || t == "on" || t == "1" {
        Some(true)
    } else if is_prefix("false", 1) || is_prefix("no", 1) || is_prefix("off", 2) || t == "0" {
        Some(false)
    } else {
        None
    }
}

fn parse_int(text: &str, min: i64, max: i64, name: &'static str) -> Result<i64, EvalError> {
    let t = text.trim_matches(|c: char| c.is_ascii_whitespace());
    let body = t.strip_prefix(['+', '-']).unwrap_or(t);
    let plain: String = body.chars().filter(|&c| c != '_').collect();
    let ok = !plain.is_empty()
        && plain.bytes().all(|b| b.is_ascii_digit())
        && !body.starts_with('_')
        && !body.ends_with('_')
        && !body.contains("__");
    if !ok {
        return Err(EvalError::invalid(name, text.as_bytes()));
    }
    let digits = format!("{}{}", if t.starts_with('-') { "-" } else { "" }, plain);
    match digits
        .parse::<i128>()
        .ok()
        .and_then(|v| i64::try_from(v).ok())
    {
        Some(v) if v >= min && v <= max => Ok(v),
        _ => Err(EvalError::Other(format!(
            "value \"{text}\" is out of range for type {name}"
        ))),
    }
}

fn parse_uuid(text: &str) -> Option<u128> {
    let t = text.trim();
    let t = t
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .unwrap_or(t);
    let mut hex = String::with_capacity(32);
    let mut after_group = false;
    for (i, c) in t.chars().enumerate() {
        if c == '-' {
            if i == 0 || after_group || !hex.len().is_multiple_of(4) {
                return None;
            }
            after_group = true;
            continue;
        }
        after_group = false;
        if !c.is_ascii_hexdigit() {
            return None;
        }
        hex.push(c);
    }
    if hex.len() != 32 || after_group {
        return None;
    }
    u128::from_str_radix(&hex, 16).ok()
}

fn format_uuid(u: u128) -> String {
    let h = format!("{u:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_scalars() {
        assert_eq!(Datum::parse(&Type::Bool, "t").unwrap(), Datum::Bool(true));
        assert_eq!(
            Datum::parse(&Type::Bool, "false").unwrap(),
            Datum::Bool(false)
        );
        assert_eq!(Datum::parse(&Type::Int4, " -12 ").unwrap(), Datum::Int(-12));
        assert!(Datum::parse(&Type::Int2, "40000").is_err());
        let u = Datum::parse(&Type::Uuid, "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11").unwrap();
        assert_eq!(
            u.to_text(&Type::Uuid),
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
        );
    }
}

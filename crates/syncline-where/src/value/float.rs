//! `float4` / `float8` input, output and ordering as Postgres does them.

use std::cmp::Ordering;

/// Parses float input (`1.5`, `-1e10`, `NaN`, `Infinity`, `-inf`). With `single`, the value is
/// rounded to `float4` and must fit it.
pub(crate) fn parse(text: &str, single: bool) -> Option<f64> {
    let t = text.trim_matches(|c: char| c.is_ascii_whitespace());
    let special = match t.to_ascii_lowercase().as_str() {
        "nan" => Some(f64::NAN),
        "infinity" | "+infinity" | "inf" | "+inf" => Some(f64::INFINITY),
        "-infinity" | "-inf" => Some(f64::NEG_INFINITY),
        _ => None,
    };
    if let Some(v) = special {
        return Some(v);
    }
    let body = t.strip_prefix(['+', '-']).unwrap_or(t);
    if !body.starts_with(|c: char| c.is_ascii_digit() || c == '.')
        || body.contains(['_', 'i', 'I', 'n', 'N'])
    {
        return None;
    }
    if single {
        let v: f32 = t.parse().ok()?;
        return v.is_finite().then_some(v as f64);
    }
    let v: f64 = t.parse().ok()?;
    v.is_finite().then_some(v)
}

/// Shortest text that reads back to the same value, in Postgres's layout: plain notation for
/// decimal exponents in `-4..15` (`-4..6` for `float4`), else `1.5e+20` style.
pub(crate) fn to_text(v: f64, single: bool) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return (if v > 0.0 { "Infinity" } else { "-Infinity" }).into();
    }
    let sci = if single {
        format!("{:e}", to_float4(v))
    } else {
        format!("{v:e}")
    };
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let limit = if single { 6 } else { 15 };
    if exponent < -4 || exponent >= limit {
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let point = exponent + 1;
    let body = match usize::try_from(point) {
        Err(_) | Ok(0) => format!("0.{}{}", "0".repeat(point.unsigned_abs() as usize), digits),
        Ok(point) if point >= digits.len() => {
            format!("{}{}", digits, "0".repeat(point - digits.len()))
        }
        Ok(point) => format!("{}.{}", &digits[..point], &digits[point..]),
    };
    if negative && body != "0" {
        format!("-{body}")
    } else if negative {
        "-0".into()
    } else {
        body
    }
}

/// Postgres's float order: NaN equals NaN and sorts above everything; -0 equals 0.
/// `v` rounded to the nearest `float4` (`real`), as Postgres stores one.
#[allow(
    clippy::cast_possible_truncation,
    reason = "rounding to single precision is the operation"
)]
pub(crate) fn to_float4(v: f64) -> f32 {
    v as f32
}

pub(crate) fn compare(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_like_postgres() {
        let cases = [
            (1e15, "1e+15"),
            (1e14, "100000000000000"),
            (0.0001, "0.0001"),
            (1.5e-5, "1.5e-05"),
            (-2.5, "-2.5"),
            (0.1, "0.1"),
        ];
        for (v, text) in cases {
            assert_eq!(to_text(v, false), text);
        }
        assert_eq!(to_text(1e6, true), "1e+06");
        assert_eq!(to_text(0.1f32 as f64, true), "0.1");
    }

    #[test]
    fn orders_nan_last() {
        assert_eq!(compare(f64::NAN, f64::INFINITY), Ordering::Greater);
        assert_eq!(compare(-0.0, 0.0), Ordering::Equal);
    }
}

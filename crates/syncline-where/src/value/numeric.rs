//! Postgres `numeric`: exact decimal arithmetic with Postgres's scale rules, NaN and infinities.

use std::cmp::Ordering;
use std::str::FromStr;

use bigdecimal::num_bigint::{BigInt, Sign};
use bigdecimal::{BigDecimal, RoundingMode, Signed, Zero};

use crate::error::EvalError;

/// Digits Postgres keeps at least in a quotient (`NUMERIC_MIN_SIG_DIGITS`).
const QUOTIENT_DIGITS_MIN: i64 = 16;
/// Largest display scale Postgres produces (`NUMERIC_MAX_DISPLAY_SCALE`).
const DISPLAY_SCALE_MAX: i64 = 1000;
/// Largest exponent numeric input accepts (`NUMERIC_MAX_PRECISION`).
const EXPONENT_MAX: i64 = 1000;
/// Most digits after the point a numeric holds (`NUMERIC_DSCALE_MAX`).
const SCALE_MAX: i64 = 0x3FFF;
/// Most digits before the point a numeric holds (131072).
const INTEGER_DIGITS_MAX: i64 = 131_072;
/// Decimal digits per Postgres numeric base digit (`DEC_DIGITS`, base 10000).
const BASE_DIGITS: i64 = 4;

/// A numeric value. Orders as Postgres does: -Infinity < finite < Infinity < NaN, NaN = NaN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Numeric {
    /// `-Infinity`.
    NegInf,
    /// A finite value with its display scale (digits after the point, never negative).
    Finite(BigDecimal),
    /// `Infinity`.
    PosInf,
    /// `NaN`.
    NaN,
}

impl Numeric {
    /// Parses Postgres numeric input (`12.50`, `-1e3`, `NaN`, `Infinity`), surrounding spaces
    /// allowed.
    pub(crate) fn parse(text: &str) -> Option<Numeric> {
        let t = text.trim_matches(|c: char| c.is_ascii_whitespace());
        match t.to_ascii_lowercase().as_str() {
            "nan" => return Some(Numeric::NaN),
            "infinity" | "+infinity" | "inf" | "+inf" => return Some(Numeric::PosInf),
            "-infinity" | "-inf" => return Some(Numeric::NegInf),
            _ => {}
        }
        let body = t.strip_prefix(['+', '-']).unwrap_or(t);
        let (mantissa, exponent) = match body.find(['e', 'E']) {
            Some(i) => (&body[..i], Some(&body[i + 1..])),
            None => (body, None),
        };
        let digits_ok = mantissa.bytes().any(|b| b.is_ascii_digit())
            && mantissa.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            && mantissa.bytes().filter(|&b| b == b'.').count() <= 1;
        let exponent_ok = exponent.is_none_or(|e| {
            let e = e.strip_prefix(['+', '-']).unwrap_or(e);
            !e.is_empty()
                && e.len() <= 4
                && e.bytes().all(|b| b.is_ascii_digit())
                && e.parse::<i64>().is_ok_and(|e| e <= EXPONENT_MAX)
        });
        if !digits_ok || !exponent_ok {
            return None;
        }
        let value = BigDecimal::from_str(t).ok()?;
        let scale = value.as_bigint_and_exponent().1;
        Some(Numeric::Finite(if scale < 0 {
            value.with_scale(0)
        } else {
            value
        }))
    }

    /// Rejects values Postgres cannot store (`value overflows numeric format`).
    pub(crate) fn checked(self) -> Result<Numeric, EvalError> {
        if let Numeric::Finite(v) = &self {
            let (digits, scale) = v.as_bigint_and_exponent();
            let integer_digits =
                i64::try_from(digits.magnitude().to_string().len()).unwrap_or(i64::MAX) - scale;
            if scale > SCALE_MAX || integer_digits > INTEGER_DIGITS_MAX {
                return Err(EvalError::Other("value overflows numeric format".into()));
            }
        }
        Ok(self)
    }

    /// From an integer.
    pub(crate) fn from_i64(v: i64) -> Numeric {
        Numeric::Finite(BigDecimal::from(v))
    }

    /// Postgres text output.
    pub(crate) fn to_text(&self) -> String {
        match self {
            Numeric::NegInf => "-Infinity".into(),
            Numeric::PosInf => "Infinity".into(),
            Numeric::NaN => "NaN".into(),
            Numeric::Finite(v) => v.to_plain_string(),
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Numeric::NegInf => 0,
            Numeric::Finite(_) => 1,
            Numeric::PosInf => 2,
            Numeric::NaN => 3,
        }
    }

    /// Negation.
    pub(crate) fn neg(&self) -> Numeric {
        match self {
            Numeric::NegInf => Numeric::PosInf,
            Numeric::PosInf => Numeric::NegInf,
            Numeric::NaN => Numeric::NaN,
            Numeric::Finite(v) => Numeric::Finite(-v),
        }
    }

    /// Absolute value.
    pub(crate) fn abs(&self) -> Numeric {
        match self {
            Numeric::NegInf => Numeric::PosInf,
            Numeric::Finite(v) => Numeric::Finite(v.abs()),
            other => other.clone(),
        }
    }

    fn sign(&self) -> i8 {
        match self {
            Numeric::NegInf => -1,
            Numeric::PosInf => 1,
            Numeric::NaN => 0,
            Numeric::Finite(v) => match v.sign() {
                Sign::Minus => -1,
                Sign::NoSign => 0,
                Sign::Plus => 1,
            },
        }
    }

    /// Sum.
    pub(crate) fn add(&self, other: &Numeric) -> Numeric {
        match (self, other) {
            (Numeric::Finite(a), Numeric::Finite(b)) => Numeric::Finite(a + b),
            (Numeric::NaN, _) | (_, Numeric::NaN) => Numeric::NaN,
            (Numeric::PosInf, Numeric::NegInf) | (Numeric::NegInf, Numeric::PosInf) => Numeric::NaN,
            (Numeric::Finite(_), inf) | (inf, _) => inf.clone(),
        }
    }

    /// Difference.
    pub(crate) fn sub(&self, other: &Numeric) -> Numeric {
        self.add(&other.neg())
    }

    /// Product.
    pub(crate) fn mul(&self, other: &Numeric) -> Numeric {
        match (self, other) {
            (Numeric::Finite(a), Numeric::Finite(b)) => Numeric::Finite(a * b),
            (Numeric::NaN, _) | (_, Numeric::NaN) => Numeric::NaN,
            _ => match self.sign() * other.sign() {
                0 => Numeric::NaN,
                s if s > 0 => Numeric::PosInf,
                _ => Numeric::NegInf,
            },
        }
    }

    /// Quotient, rounded to the scale Postgres's `select_div_scale` picks.
    pub(crate) fn div(&self, other: &Numeric) -> Result<Numeric, EvalError> {
        match (self, other) {
            (Numeric::NaN, _) | (_, Numeric::NaN) => Ok(Numeric::NaN),
            (_, d) if d.sign() == 0 => Err(EvalError::DivisionByZero),
            (Numeric::Finite(a), Numeric::Finite(b)) => {
                let scale = quotient_scale(a, b);
                Ok(Numeric::Finite(divide_round(a, b, scale)))
            }
            (Numeric::Finite(_), _) => Ok(Numeric::Finite(BigDecimal::zero())),
            (_, Numeric::Finite(_)) => Ok(if self.sign() * other.sign() > 0 {
                Numeric::PosInf
            } else {
                Numeric::NegInf
            }),
            _ => Ok(Numeric::NaN),
        }
    }

    /// Remainder, with the sign of the dividend.
    pub(crate) fn rem(&self, other: &Numeric) -> Result<Numeric, EvalError> {
        match (self, other) {
            (Numeric::NaN, _) | (_, Numeric::NaN) => Ok(Numeric::NaN),
            (_, d) if d.sign() == 0 => Err(EvalError::DivisionByZero),
            (Numeric::Finite(a), Numeric::Finite(b)) => Ok(Numeric::Finite(a % b)),
            (Numeric::Finite(_), _) => Ok(self.clone()),
            _ => Ok(Numeric::NaN),
        }
    }

    /// Rounds half away from zero to an integer, for casts to integer types.
    pub(crate) fn round_to_i64(&self) -> Option<i64> {
        match self {
            Numeric::Finite(v) => {
                let (digits, _) = v
                    .with_scale_round(0, RoundingMode::HalfUp)
                    .into_bigint_and_exponent();
                i64::try_from(digits).ok()
            }
            _ => None,
        }
    }

    /// Nearest float (for casts to float types).
    pub(crate) fn to_f64(&self) -> f64 {
        match self {
            Numeric::NegInf => f64::NEG_INFINITY,
            Numeric::PosInf => f64::INFINITY,
            Numeric::NaN => f64::NAN,
            Numeric::Finite(v) => v.to_plain_string().parse().unwrap_or(f64::NAN),
        }
    }
}

impl PartialOrd for Numeric {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Numeric {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Numeric::Finite(a), Numeric::Finite(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

/// Base-10000 weight and leading base digit of `|v|` (both 0 for zero), as Postgres stores it.
fn weight_and_first_digit(v: &BigDecimal) -> (i64, i64) {
    let (digits, scale) = v.as_bigint_and_exponent();
    let digits = digits.magnitude().to_string();
    if digits == "0" {
        return (0, 0);
    }
    let exponent = i64::try_from(digits.len()).unwrap_or(i64::MAX) - 1 - scale;
    let weight = exponent.div_euclid(BASE_DIGITS);
    let lead = usize::try_from(exponent - weight * BASE_DIGITS + 1).expect("1..=BASE_DIGITS");
    let first: String = digits.chars().take(lead).collect();
    let missing = u32::try_from(lead - first.len()).expect("below BASE_DIGITS");
    let first = first.parse::<i64>().unwrap_or(0) * 10i64.pow(missing);
    (weight, first)
}

/// Postgres's `select_div_scale`.
fn quotient_scale(a: &BigDecimal, b: &BigDecimal) -> i64 {
    let (w1, f1) = weight_and_first_digit(a);
    let (w2, f2) = weight_and_first_digit(b);
    let mut qweight = w1 - w2;
    // Equal leading digits: Postgres assumes the dividend is the smaller.
    if f1 <= f2 {
        qweight -= 1;
    }
    let scale = QUOTIENT_DIGITS_MIN - qweight * BASE_DIGITS;
    let scale = scale
        .max(a.as_bigint_and_exponent().1)
        .max(b.as_bigint_and_exponent().1)
        .max(0);
    scale.min(DISPLAY_SCALE_MAX)
}

/// `a / b` rounded half away from zero to `scale` digits after the point.
fn divide_round(a: &BigDecimal, b: &BigDecimal, scale: i64) -> BigDecimal {
    let (ma, sa) = a.as_bigint_and_exponent();
    let (mb, sb) = b.as_bigint_and_exponent();
    let shift = scale + sb - sa;
    let ten = BigInt::from(10);
    let shift_abs = u32::try_from(shift.unsigned_abs()).expect("scales are bounded by SCALE_MAX");
    let (num, den) = if shift >= 0 {
        (ma * ten.pow(shift_abs), mb)
    } else {
        (ma, mb * ten.pow(shift_abs))
    };
    let negative = (num.sign() == Sign::Minus) != (den.sign() == Sign::Minus);
    let (n, d) = (num.abs(), den.abs());
    let mut q = &n / &d;
    let r = &n - &q * &d;
    if r * 2 >= d {
        q += 1;
    }
    BigDecimal::new(if negative { -q } else { q }, scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Numeric {
        Numeric::parse(s).unwrap()
    }

    #[test]
    fn parses_and_prints_like_postgres() {
        for (input, output) in [
            ("1.50", "1.50"),
            ("-0.00", "0.00"),
            ("1.5e3", "1500"),
            (" 12 ", "12"),
            ("NaN", "NaN"),
            ("-inf", "-Infinity"),
        ] {
            assert_eq!(n(input).to_text(), output, "{input}");
        }
        for bad in ["", "1.2.3", "e5", "abc", "1e", "--1"] {
            assert!(Numeric::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn divides_with_postgres_scale() {
        assert_eq!(
            n("1").div(&n("3")).unwrap().to_text(),
            "0.33333333333333333333"
        );
        assert_eq!(
            n("10").div(&n("4")).unwrap().to_text(),
            "2.5000000000000000"
        );
        assert_eq!(
            n("2").div(&n("3")).unwrap().to_text(),
            "0.66666666666666666667"
        );
        assert_eq!(
            n("-2").div(&n("3")).unwrap().to_text(),
            "-0.66666666666666666667"
        );
        assert_eq!(
            n("42").div(&n("42")).unwrap().to_text(),
            "1.00000000000000000000"
        );
    }

    #[test]
    fn orders_specials() {
        assert!(n("-inf") < n("-1e100") && n("1e100") < n("inf") && n("inf") < n("nan"));
        assert_eq!(n("1.0").cmp(&n("1.000")), Ordering::Equal);
    }
}

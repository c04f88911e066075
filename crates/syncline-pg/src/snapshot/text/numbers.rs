//! Integers, floats and numeric.

use crate::error::{PgError, PgResult};

/// Appends an integer in decimal.
pub fn write_int(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Appends a float8 as Postgres does with `extra_float_digits > 0`: the shortest text that
/// reads back as the same value, fixed notation for decimal exponents in `-4..15`.
pub fn write_float8(out: &mut Vec<u8>, v: f64) {
    if special(out, v.is_nan(), v.is_infinite(), v.is_sign_negative()) {
        return;
    }
    let mut buf = ryu::Buffer::new();
    let text = buf.format_finite(v);
    // Fast path: in 1e-4..1e15 ryu already prints Postgres's fixed layout, but for a `.0` that
    // Postgres leaves off.
    if (1e-4..2f64.powi(44)).contains(&v.abs()) && !text.contains('e') {
        out.extend_from_slice(text.strip_suffix(".0").unwrap_or(text).as_bytes());
        return;
    }
    let mut d = Decimal::parse(text);
    // Postgres's Ryu never accepts a decimal lying exactly on the rounding interval's bound
    // (`acceptBounds = false`, since not every strtod rounds such ties alike); the ryu crate
    // does for even mantissas. That can only happen for magnitudes in this range.
    if (2f64.powi(44)..1e41).contains(&v.abs()) {
        let reads_back = |text: &str| text.parse::<f64>() == Ok(v);
        if d.on_bound(&reads_back) {
            d = Decimal::strictly_inside(&|n| format!("{:.*e}", n - 1, v), &reads_back, 17);
        }
    }
    d.write(out, 15);
}

/// Appends a float4 the same way, fixed notation for decimal exponents in `-4..6`.
pub fn write_float4(out: &mut Vec<u8>, v: f32) {
    if special(out, v.is_nan(), v.is_infinite(), v.is_sign_negative()) {
        return;
    }
    let mut d = Decimal::parse(ryu::Buffer::new().format_finite(v));
    if v.abs() >= 2f32.powi(15) {
        let reads_back = |text: &str| text.parse::<f32>() == Ok(v);
        if d.on_bound(&reads_back) {
            d = Decimal::strictly_inside(&|n| format!("{:.*e}", n - 1, v), &reads_back, 9);
        }
    }
    d.write(out, 6);
}

fn special(out: &mut Vec<u8>, nan: bool, infinite: bool, negative: bool) -> bool {
    let text: &[u8] = match (nan, infinite, negative) {
        (true, _, _) => b"NaN",
        (_, true, false) => b"Infinity",
        (_, true, true) => b"-Infinity",
        _ => return false,
    };
    out.extend_from_slice(text);
    true
}

/// A finite decimal: sign, significant digits (no leading or trailing zeros, `0` for zero) and
/// the decimal exponent of the first digit.
struct Decimal {
    negative: bool,
    buf: [u8; 40],
    len: usize,
    exp: i32,
}

/// Digits appended to nudge a decimal past a bound without changing anything else about it.
const NUDGE_ZEROS: &str = "000000000000000000000";

impl Decimal {
    /// Reads `-1.25e-7`, `1234.5`, `0.001` (Ryu's and Rust's `{:e}` forms).
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_possible_wrap,
        reason = "positions within a float's shortest text, at most 40 bytes"
    )]
    fn parse(text: &str) -> Decimal {
        let (negative, text) = match text.strip_prefix('-') {
            Some(t) => (true, t),
            None => (false, text),
        };
        let (mantissa, exp_suffix) = match text.split_once('e') {
            Some((m, e)) => (m, e.parse::<i32>().expect("exponent")),
            None => (text, 0),
        };
        let int_len = mantissa.find('.').unwrap_or(mantissa.len()) as i32;
        let mut all = [0u8; 40];
        let mut n = 0;
        for b in mantissa.bytes().filter(|b| *b != b'.') {
            all[n] = b;
            n += 1;
        }
        let leading = all[..n]
            .iter()
            .take_while(|&&b| b == b'0')
            .count()
            .min(n - 1);
        let mut len = n - leading;
        while len > 1 && all[leading + len - 1] == b'0' {
            len -= 1;
        }
        let mut buf = [0u8; 40];
        buf[..len].copy_from_slice(&all[leading..leading + len]);
        let exp = if &buf[..len] == b"0" {
            0
        } else {
            int_len - 1 - leading as i32 + exp_suffix
        };
        Decimal {
            negative,
            buf,
            len,
            exp,
        }
    }

    fn digits(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    fn text(&self, digits: &[u8], tail: &str) -> String {
        let sign = if self.negative { "-" } else { "" };
        let digits = std::str::from_utf8(digits).expect("ASCII digits");
        format!("{sign}0.{digits}{tail}e{}", self.exp + 1)
    }

    /// Whether the decimal lies exactly on a bound of the interval that reads back as the
    /// value: nudged outward by a far smaller amount than any digit, it no longer reads back.
    fn on_bound(&self, reads_back: &dyn Fn(&str) -> bool) -> bool {
        let above = self.text(self.digits(), &format!("{NUDGE_ZEROS}1"));
        let mut lower = self.digits().to_vec();
        let mut i = lower.len();
        while i > 0 && lower[i - 1] == b'0' {
            lower[i - 1] = b'9';
            i -= 1;
        }
        if i == 0 {
            return !reads_back(&above);
        }
        lower[i - 1] -= 1;
        let below = self.text(&lower, &NUDGE_ZEROS.replace('0', "9"));
        !reads_back(&above) || !reads_back(&below)
    }

    /// The shortest correctly rounded decimal strictly inside the interval.
    fn strictly_inside(
        format_digits: &dyn Fn(usize) -> String,
        reads_back: &dyn Fn(&str) -> bool,
        digits_max: usize,
    ) -> Decimal {
        for n in 1..digits_max {
            let candidate = Decimal::parse(&format_digits(n));
            let text = candidate.text(candidate.digits(), "");
            if reads_back(&text) && !candidate.on_bound(reads_back) {
                return candidate;
            }
        }
        Decimal::parse(&format_digits(digits_max))
    }

    /// Appends the decimal in Postgres's layout: fixed for exponents in `-4..fixed_exp_max`,
    /// else `d.ddde±XX`.
    fn write(&self, out: &mut Vec<u8>, fixed_exp_max: i32) {
        let (digits, exp) = (self.digits(), self.exp);
        if self.negative {
            out.push(b'-');
        }
        if (-4..fixed_exp_max).contains(&exp) {
            if exp < 0 {
                out.extend_from_slice(b"0.");
                out.extend(std::iter::repeat_n(
                    b'0',
                    usize::try_from(-exp - 1).unwrap_or(0),
                ));
                out.extend_from_slice(digits);
            } else {
                let int_len = usize::try_from(exp).unwrap_or(0) + 1;
                if digits.len() <= int_len {
                    out.extend_from_slice(digits);
                    out.extend(std::iter::repeat_n(b'0', int_len - digits.len()));
                } else {
                    out.extend_from_slice(&digits[..int_len]);
                    out.push(b'.');
                    out.extend_from_slice(&digits[int_len..]);
                }
            }
        } else {
            out.push(digits[0]);
            if digits.len() > 1 {
                out.push(b'.');
                out.extend_from_slice(&digits[1..]);
            }
            out.push(b'e');
            out.push(if exp < 0 { b'-' } else { b'+' });
            let abs = exp.unsigned_abs();
            if abs < 10 {
                out.push(b'0');
            }
            write_int(out, abs as i64);
        }
    }
}

const NUMERIC_POS: u16 = 0x0000;
const NUMERIC_NEG: u16 = 0x4000;
const NUMERIC_NAN: u16 = 0xC000;
const NUMERIC_PINF: u16 = 0xD000;
const NUMERIC_NINF: u16 = 0xF000;

/// Appends a binary numeric (base-10000 digits, weight, sign, display scale) as text.
pub fn write_numeric(out: &mut Vec<u8>, raw: &[u8]) -> PgResult<()> {
    let bad = || PgError::Protocol(format!("malformed binary numeric ({} bytes)", raw.len()));
    if raw.len() < 8 {
        return Err(bad());
    }
    let word = |i: usize| u16::from_be_bytes([raw[2 * i], raw[2 * i + 1]]);
    let ndigits = word(0) as usize;
    let weight = i64::from(i16::from_be_bytes([raw[2], raw[3]]));
    let sign = word(2);
    let dscale = word(3) as usize;
    if raw.len() != 8 + 2 * ndigits {
        return Err(bad());
    }
    let digit = |i: i64| {
        usize::try_from(i)
            .ok()
            .filter(|i| *i < ndigits)
            .map_or(0, |i| word(4 + i))
    };
    let special: &[u8] = match sign {
        NUMERIC_NAN => b"NaN",
        NUMERIC_PINF => b"Infinity",
        NUMERIC_NINF => b"-Infinity",
        NUMERIC_NEG => b"-",
        NUMERIC_POS => b"",
        _ => return Err(bad()),
    };
    out.extend_from_slice(special);
    if matches!(sign, NUMERIC_NAN | NUMERIC_PINF | NUMERIC_NINF) {
        return Ok(());
    }
    if weight < 0 {
        out.push(b'0');
    } else {
        write_int(out, digit(0) as i64);
        for i in 1..=weight {
            push4(out, digit(i));
        }
    }
    if dscale > 0 {
        out.push(b'.');
        let start = out.len();
        let mut group = weight + 1;
        while out.len() - start < dscale {
            push4(out, digit(group));
            group += 1;
        }
        out.truncate(start + dscale);
    }
    Ok(())
}

fn push4(out: &mut Vec<u8>, d: u16) {
    out.extend_from_slice(&[
        b'0' + (d / 1000) as u8,
        b'0' + (d / 100 % 10) as u8,
        b'0' + (d / 10 % 10) as u8,
        b'0' + (d % 10) as u8,
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f8(v: f64) -> String {
        let mut out = Vec::new();
        write_float8(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn float8_layout_matches_postgres() {
        assert_eq!(f8(0.0), "0");
        assert_eq!(f8(-0.0), "-0");
        assert_eq!(f8(1.5), "1.5");
        assert_eq!(f8(0.0001), "0.0001");
        assert_eq!(f8(0.00001), "1e-05");
        assert_eq!(f8(123456789012345.0), "123456789012345");
        assert_eq!(f8(1e15), "1e+15");
        assert_eq!(f8(1.2345e20), "1.2345e+20");
        assert_eq!(f8(f64::MAX), "1.7976931348623157e+308");
        assert_eq!(f8(f64::NAN), "NaN");
        assert_eq!(f8(f64::NEG_INFINITY), "-Infinity");
    }

    #[test]
    fn values_on_a_rounding_bound_get_the_longer_form() {
        let mut out = Vec::new();
        write_float4(&mut out, "4.831379e7".parse().unwrap());
        assert_eq!(out, b"4.8313792e+07");
    }

    #[test]
    fn ints_cover_extremes() {
        let mut out = Vec::new();
        write_int(&mut out, i64::MIN);
        assert_eq!(out, b"-9223372036854775808");
    }
}

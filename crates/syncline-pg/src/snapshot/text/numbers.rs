//! Integers, floats and numeric.

use crate::error::{PgError, PgResult};

/// Appends an integer in decimal.
pub fn write_int(out: &mut Vec<u8>, v: i64) {
    let mut buf = itoa_buf();
    out.extend_from_slice(format_int(&mut buf, v));
}

fn itoa_buf() -> [u8; 20] {
    [0; 20]
}

fn format_int(buf: &mut [u8; 20], v: i64) -> &[u8] {
    let negative = v < 0;
    let mut n = v.unsigned_abs();
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if negative {
        // i64::MIN has 19 digits, so the 20-byte buffer always has room for the sign.
        i -= 1;
        buf[i] = b'-';
    }
    &buf[i..]
}

/// Appends a float8 as Postgres does with `extra_float_digits > 0`: the shortest text that
/// reads back as the same value (Ryu, like Postgres, so ties round to even), fixed notation
/// for decimal exponents in `-4..15`.
pub fn write_float8(out: &mut Vec<u8>, v: f64) {
    if special(out, v.is_nan(), v.is_infinite(), v.is_sign_negative()) {
        return;
    }
    write_shortest(out, ryu::Buffer::new().format_finite(v), 15);
}

/// Appends a float4 the same way, fixed notation for decimal exponents in `-4..6`.
pub fn write_float4(out: &mut Vec<u8>, v: f32) {
    if special(out, v.is_nan(), v.is_infinite(), v.is_sign_negative()) {
        return;
    }
    write_shortest(out, ryu::Buffer::new().format_finite(v), 6);
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

/// Re-lays Ryu's shortest digits (`-1.25e-7`, `1234.5`, `0.001`) in Postgres's layout.
fn write_shortest(out: &mut Vec<u8>, ryu_text: &str, fixed_exp_max: i32) {
    let (negative, text) = match ryu_text.strip_prefix('-') {
        Some(t) => (true, t),
        None => (false, ryu_text),
    };
    let (mantissa, exp_suffix) = match text.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().expect("exponent")),
        None => (text, 0),
    };
    let int_len = mantissa.find('.').unwrap_or(mantissa.len()) as i32;
    let all: Vec<u8> = mantissa.bytes().filter(|b| *b != b'.').collect();
    let leading_zeros = all.iter().take_while(|&&b| b == b'0').count();
    let mut digits = all[leading_zeros.min(all.len() - 1)..].to_vec();
    while digits.len() > 1 && digits[digits.len() - 1] == b'0' {
        digits.pop();
    }
    // Decimal exponent of the first significant digit.
    let exp = if digits == b"0" { 0 } else { int_len - 1 - leading_zeros as i32 + exp_suffix };
    if negative {
        out.push(b'-');
    }
    if (-4..fixed_exp_max).contains(&exp) {
        if exp < 0 {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat_n(b'0', (-exp - 1) as usize));
            out.extend_from_slice(&digits);
        } else {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.extend_from_slice(&digits);
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
    let weight = word(1) as i16 as i64;
    let sign = word(2);
    let dscale = word(3) as usize;
    if raw.len() != 8 + 2 * ndigits {
        return Err(bad());
    }
    let digit = |i: i64| if (0..ndigits as i64).contains(&i) { word(4 + i as usize) } else { 0 };
    match sign {
        NUMERIC_NAN => return Ok(out.extend_from_slice(b"NaN")),
        NUMERIC_PINF => return Ok(out.extend_from_slice(b"Infinity")),
        NUMERIC_NINF => return Ok(out.extend_from_slice(b"-Infinity")),
        NUMERIC_NEG => out.push(b'-'),
        NUMERIC_POS => {}
        _ => return Err(bad()),
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
    out.extend_from_slice(&[b'0' + (d / 1000) as u8, b'0' + (d / 100 % 10) as u8, b'0' + (d / 10 % 10) as u8, b'0' + (d % 10) as u8]);
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
    fn ints_cover_extremes() {
        let mut out = Vec::new();
        write_int(&mut out, i64::MIN);
        assert_eq!(out, b"-9223372036854775808");
    }
}

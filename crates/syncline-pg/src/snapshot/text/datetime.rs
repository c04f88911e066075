//! Dates, times, timestamps and intervals, as Postgres prints them with `DateStyle=ISO`,
//! `TimeZone=UTC` and `IntervalStyle=iso_8601`.

use syncline_core::pg_time::POSTGRES_EPOCH_UNIX_DAYS;

use super::numbers::write_int;

const USECS_PER_SEC: i64 = 1_000_000;
const USECS_PER_MINUTE: i64 = 60 * USECS_PER_SEC;
const USECS_PER_HOUR: i64 = 60 * USECS_PER_MINUTE;
const USECS_PER_DAY: i64 = 24 * USECS_PER_HOUR;

/// Proleptic Gregorian `(year, month, day)` of a day count since 1970-01-01; year 0 is 1 BC.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "day is 1..=31 and month 1..=12 by construction"
)]
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Appends a non-negative `v` with at least `width` digits, zero-padded.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "single decimal digits of a non-negative v below 100"
)]
fn pad(out: &mut Vec<u8>, v: i64, width: usize) {
    debug_assert!(v >= 0);
    if width == 2 && v < 100 {
        out.extend_from_slice(&[b'0' + (v / 10) as u8, b'0' + (v % 10) as u8]);
        return;
    }
    let mut buf = itoa::Buffer::new();
    let digits = buf.format(v);
    out.extend(std::iter::repeat_n(
        b'0',
        width.saturating_sub(digits.len()),
    ));
    out.extend_from_slice(digits.as_bytes());
}

/// Writes `YYYY-MM-DD` and returns whether the date is BC (the caller appends ` BC` last).
fn write_ymd(out: &mut Vec<u8>, pg_days: i64) -> bool {
    let (year, month, day) = civil_from_days(pg_days + POSTGRES_EPOCH_UNIX_DAYS);
    let bc = year <= 0;
    pad(out, if bc { 1 - year } else { year }, 4);
    out.push(b'-');
    pad(out, i64::from(month), 2);
    out.push(b'-');
    pad(out, i64::from(day), 2);
    bc
}

/// `HH:MM:SS` plus `.ffffff` with trailing zeros trimmed, for a time of day in microseconds.
fn write_hms(out: &mut Vec<u8>, us: i64) {
    pad(out, us / USECS_PER_HOUR, 2);
    out.push(b':');
    pad(out, us / USECS_PER_MINUTE % 60, 2);
    out.push(b':');
    pad(out, us / USECS_PER_SEC % 60, 2);
    write_fraction(out, us % USECS_PER_SEC);
}

fn write_fraction(out: &mut Vec<u8>, frac_us: i64) {
    if frac_us == 0 {
        return;
    }
    out.push(b'.');
    let start = out.len();
    pad(out, frac_us, 6);
    while out.len() > start && out[out.len() - 1] == b'0' {
        out.pop();
    }
}

/// `date`: days since 2000-01-01, `i32::MIN`/`MAX` for ∓infinity.
pub fn write_date(out: &mut Vec<u8>, days: i32) {
    match days {
        i32::MAX => out.extend_from_slice(b"infinity"),
        i32::MIN => out.extend_from_slice(b"-infinity"),
        _ => {
            if write_ymd(out, i64::from(days)) {
                out.extend_from_slice(b" BC");
            }
        }
    }
}

/// `time`: microseconds since midnight.
pub fn write_time(out: &mut Vec<u8>, us: i64) {
    write_hms(out, us);
}

/// `timetz`: microseconds since midnight and the zone in seconds west of UTC.
pub fn write_timetz(out: &mut Vec<u8>, us: i64, zone_west_s: i32) {
    write_hms(out, us);
    write_zone(out, zone_west_s);
}

fn write_zone(out: &mut Vec<u8>, zone_west_s: i32) {
    out.push(if zone_west_s <= 0 { b'+' } else { b'-' });
    let abs = i64::from(zone_west_s.unsigned_abs());
    pad(out, abs / 3600, 2);
    let (min, sec) = (abs / 60 % 60, abs % 60);
    if min != 0 || sec != 0 {
        out.push(b':');
        pad(out, min, 2);
    }
    if sec != 0 {
        out.push(b':');
        pad(out, sec, 2);
    }
}

/// `timestamp` / `timestamptz`: microseconds since 2000-01-01 (UTC for timestamptz),
/// `i64::MIN`/`MAX` for ∓infinity.
pub fn write_timestamp(out: &mut Vec<u8>, us: i64, with_zone: bool) {
    match us {
        i64::MAX => return out.extend_from_slice(b"infinity"),
        i64::MIN => return out.extend_from_slice(b"-infinity"),
        _ => {}
    }
    let bc = write_ymd(out, us.div_euclid(USECS_PER_DAY));
    out.push(b' ');
    write_hms(out, us.rem_euclid(USECS_PER_DAY));
    if with_zone {
        out.extend_from_slice(b"+00");
    }
    if bc {
        out.extend_from_slice(b" BC");
    }
}

/// `interval` in ISO 8601 form (`P1Y2M3DT4H5M6.5S`, `PT0S` for zero).
pub fn write_interval(out: &mut Vec<u8>, micros: i64, days: i32, months: i32) {
    let (year, mon) = (months / 12, months % 12);
    let hour = micros / USECS_PER_HOUR;
    let min = micros % USECS_PER_HOUR / USECS_PER_MINUTE;
    let sec = micros % USECS_PER_MINUTE / USECS_PER_SEC;
    let fsec = micros % USECS_PER_SEC;
    if year == 0 && mon == 0 && days == 0 && micros == 0 {
        return out.extend_from_slice(b"PT0S");
    }
    out.push(b'P');
    let part = |out: &mut Vec<u8>, v: i64, unit: u8| {
        if v != 0 {
            write_int(out, v);
            out.push(unit);
        }
    };
    part(out, i64::from(year), b'Y');
    part(out, i64::from(mon), b'M');
    part(out, i64::from(days), b'D');
    if micros != 0 {
        out.push(b'T');
    }
    part(out, hour, b'H');
    part(out, min, b'M');
    if sec != 0 || fsec != 0 {
        if sec < 0 || fsec < 0 {
            out.push(b'-');
        }
        write_int(out, sec.abs());
        write_fraction(out, fsec.abs());
        out.push(b'S');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn dates_around_the_epochs_and_bc() {
        assert_eq!(text(|o| write_date(o, 0)), "2000-01-01");
        assert_eq!(text(|o| write_date(o, -10_957)), "1970-01-01");
        assert_eq!(text(|o| write_date(o, -730_119)), "0001-01-01");
        assert_eq!(text(|o| write_date(o, -730_120)), "0001-12-31 BC");
    }

    #[test]
    fn timestamps_trim_fractions() {
        assert_eq!(
            text(|o| write_timestamp(o, 1_500_000, true)),
            "2000-01-01 00:00:01.5+00"
        );
        assert_eq!(
            text(|o| write_timestamp(o, -1, false)),
            "1999-12-31 23:59:59.999999"
        );
    }

    #[test]
    fn intervals_in_iso_8601() {
        assert_eq!(text(|o| write_interval(o, 0, 0, 0)), "PT0S");
        assert_eq!(
            text(|o| write_interval(o, 4 * USECS_PER_HOUR + 6_500_000, 3, 14)),
            "P1Y2M3DT4H6.5S"
        );
        assert_eq!(text(|o| write_interval(o, -1_500_000, 0, 0)), "PT-1.5S");
    }
}

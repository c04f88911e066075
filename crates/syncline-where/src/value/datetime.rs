//! Dates, times, timestamps and intervals in Postgres's ISO text form.
//!
//! Values are integers as in Postgres: dates are days and timestamps microseconds since
//! 1970-01-01, with the extreme values standing for `-infinity` and `infinity`. `timestamptz`
//! is UTC; text without an offset is read in the session time zone, which Syncline sets to UTC.

use chrono::{Datelike, NaiveDate};

/// Microseconds per second.
pub(crate) const USECS_PER_SEC: i64 = 1_000_000;
/// Microseconds per day.
pub(crate) const USECS_PER_DAY: i64 = 86_400 * USECS_PER_SEC;
/// Date value standing for `infinity` (also `-infinity` as `i32::MIN`).
pub(crate) const DATE_INFINITY: i32 = i32::MAX;
/// Timestamp value standing for `infinity` (also `-infinity` as `i64::MIN`).
pub(crate) const TIMESTAMP_INFINITY: i64 = i64::MAX;

/// An `interval`: months, days and microseconds, kept apart as Postgres keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Interval {
    /// Months (a year is 12).
    pub(crate) months: i32,
    /// Days.
    pub(crate) days: i32,
    /// Microseconds.
    pub(crate) micros: i64,
}

impl Interval {
    /// The span Postgres compares intervals by (a month is 30 days, a day 24 hours).
    pub(crate) fn span(&self) -> i128 {
        (self.months as i128 * 30 + self.days as i128) * USECS_PER_DAY as i128 + self.micros as i128
    }

    /// Postgres text output (`intervalstyle = postgres`).
    pub(crate) fn to_text(self) -> String {
        let mut parts = Vec::new();
        let (years, months) = (self.months / 12, self.months % 12);
        let plural =
            |n: i64, unit: &str| format!("{n} {unit}{}", if n == 1 || n == -1 { "" } else { "s" });
        if years != 0 {
            parts.push(plural(years as i64, "year"));
        }
        if months != 0 {
            parts.push(format!(
                "{months} mon{}",
                if months == 1 || months == -1 { "" } else { "s" }
            ));
        }
        if self.days != 0 {
            parts.push(plural(self.days as i64, "day"));
        }
        let any_negative = self.months < 0 || self.days < 0;
        if self.micros != 0 || parts.is_empty() {
            let sign = if self.micros < 0 {
                "-"
            } else if any_negative {
                "+"
            } else {
                ""
            };
            parts.push(format!(
                "{sign}{}",
                format_time_of_day(self.micros.unsigned_abs(), true)
            ));
        }
        parts.join(" ")
    }

    /// Parses `N unit ...` with an optional `[-]HH:MM[:SS[.f]]`, as Postgres prints intervals
    /// and as they are commonly written (`'1 day'`, `'2 hours 30 minutes'`).
    pub(crate) fn parse(text: &str) -> Option<Interval> {
        let mut result = Interval::default();
        let tokens: Vec<&str> = text.split_ascii_whitespace().collect();
        if tokens.is_empty() {
            return None;
        }
        let mut i = 0;
        while i < tokens.len() {
            let token = tokens[i];
            if token.contains(':') {
                result.micros = result.micros.checked_add(parse_clock(token)?)?;
                i += 1;
                continue;
            }
            let (number, unit) = match token.find(|c: char| c.is_ascii_alphabetic()) {
                Some(at) if at > 0 => (&token[..at], &token[at..]),
                _ => (token, *tokens.get(i + 1)?),
            };
            i += if number.len() == token.len() { 2 } else { 1 };
            result = add_unit(result, number, &unit.to_ascii_lowercase())?;
        }
        Some(result)
    }

    /// Negation; `None` on overflow.
    pub(crate) fn neg(&self) -> Option<Interval> {
        Some(Interval {
            months: self.months.checked_neg()?,
            days: self.days.checked_neg()?,
            micros: self.micros.checked_neg()?,
        })
    }

    /// Field-wise sum; `None` on overflow.
    pub(crate) fn add(&self, o: &Interval) -> Option<Interval> {
        Some(Interval {
            months: self.months.checked_add(o.months)?,
            days: self.days.checked_add(o.days)?,
            micros: self.micros.checked_add(o.micros)?,
        })
    }

    /// `justify_hours`: whole days out of the microseconds, signs made consistent.
    pub(crate) fn justify_hours(&self) -> Option<Interval> {
        let mut days = self
            .days
            .checked_add(i32::try_from(self.micros / USECS_PER_DAY).ok()?)?;
        let mut micros = self.micros % USECS_PER_DAY;
        if days > 0 && micros < 0 {
            micros += USECS_PER_DAY;
            days -= 1;
        } else if days < 0 && micros > 0 {
            micros -= USECS_PER_DAY;
            days += 1;
        }
        Some(Interval {
            months: self.months,
            days,
            micros,
        })
    }

    /// `justify_days`: whole 30-day months out of the days, signs made consistent.
    pub(crate) fn justify_days(&self) -> Option<Interval> {
        let mut months = self.months.checked_add(self.days / 30)?;
        let mut days = self.days % 30;
        if months > 0 && days < 0 {
            days += 30;
            months -= 1;
        } else if months < 0 && days > 0 {
            days -= 30;
            months += 1;
        }
        Some(Interval {
            months,
            days,
            micros: self.micros,
        })
    }

    /// `justify_interval`: both of the above, signs consistent across all three fields.
    pub(crate) fn justify_interval(&self) -> Option<Interval> {
        let mut months = self.months;
        let mut days = self.days;
        if (days > 0 && self.micros > 0) || (days < 0 && self.micros < 0) {
            months = months.checked_add(days / 30)?;
            days %= 30;
        }
        days = days.checked_add(i32::try_from(self.micros / USECS_PER_DAY).ok()?)?;
        let mut micros = self.micros % USECS_PER_DAY;
        months = months.checked_add(days / 30)?;
        days %= 30;
        if months > 0 && (days < 0 || (days == 0 && micros < 0)) {
            days += 30;
            months -= 1;
        } else if months < 0 && (days > 0 || (days == 0 && micros > 0)) {
            days -= 30;
            months += 1;
        }
        if days > 0 && micros < 0 {
            micros += USECS_PER_DAY;
            days -= 1;
        } else if days < 0 && micros > 0 {
            micros -= USECS_PER_DAY;
            days += 1;
        }
        Some(Interval {
            months,
            days,
            micros,
        })
    }
}

fn add_unit(mut iv: Interval, number: &str, unit: &str) -> Option<Interval> {
    let unit = unit.trim_end_matches('s');
    let seconds_unit = match unit {
        "second" | "sec" => Some(USECS_PER_SEC),
        "millisecond" | "m" => Some(1000),
        "microsecond" | "u" => Some(1),
        _ => None,
    };
    if let Some(scale) = seconds_unit {
        let micros = parse_fraction(number, scale)?;
        iv.micros = iv.micros.checked_add(micros)?;
        return Some(iv);
    }
    let n: i64 = number.parse().ok()?;
    match unit {
        "year" | "yr" | "y" => {
            iv.months = iv
                .months
                .checked_add(i32::try_from(n.checked_mul(12)?).ok()?)?
        }
        "mon" | "month" => iv.months = iv.months.checked_add(i32::try_from(n).ok()?)?,
        "week" | "w" => {
            iv.days = iv
                .days
                .checked_add(i32::try_from(n.checked_mul(7)?).ok()?)?
        }
        "day" | "d" => iv.days = iv.days.checked_add(i32::try_from(n).ok()?)?,
        "hour" | "hr" | "h" => {
            iv.micros = iv
                .micros
                .checked_add(n.checked_mul(3600 * USECS_PER_SEC)?)?
        }
        "minute" | "min" => {
            iv.micros = iv.micros.checked_add(n.checked_mul(60 * USECS_PER_SEC)?)?
        }
        _ => return None,
    }
    Some(iv)
}

/// `[-]S[.ffffff]` scaled by `unit` microseconds, exactly; at most 6 fractional digits kept.
fn parse_fraction(text: &str, unit: i64) -> Option<i64> {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (whole, frac) = body.split_once('.').unwrap_or((body, ""));
    if whole.is_empty() && frac.is_empty()
        || !whole
            .bytes()
            .chain(frac.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole: i64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut frac_micros = 0i64;
    let mut scale = unit;
    for digit in frac.bytes().take(12) {
        scale /= 10;
        frac_micros += (digit - b'0') as i64 * scale;
    }
    let v = whole.checked_mul(unit)?.checked_add(frac_micros)?;
    Some(if negative { -v } else { v })
}

/// `[-]HH:MM[:SS[.ffffff]]` as microseconds.
fn parse_clock(text: &str) -> Option<i64> {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let mut fields = body.split(':');
    let hours: i64 = digits(fields.next()?)?;
    let minutes: i64 = digits(fields.next()?)?;
    let seconds = match fields.next() {
        Some(s) => parse_fraction(s, USECS_PER_SEC).filter(|_| !s.starts_with(['-', '+']))?,
        None => 0,
    };
    if fields.next().is_some() || minutes > 59 || seconds >= 60 * USECS_PER_SEC {
        return None;
    }
    let v = hours
        .checked_mul(3600 * USECS_PER_SEC)?
        .checked_add(minutes * 60 * USECS_PER_SEC + seconds)?;
    Some(if negative { -v } else { v })
}

fn digits(text: &str) -> Option<i64> {
    if text.is_empty() || text.len() > 10 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// `HH:MM:SS[.ffffff]` with trailing fractional zeros dropped; hours may exceed 24 when
/// `unbounded_hours` (intervals).
fn format_time_of_day(micros: u64, unbounded_hours: bool) -> String {
    let secs = micros / USECS_PER_SEC as u64;
    let frac = micros % USECS_PER_SEC as u64;
    let hours = if unbounded_hours {
        secs / 3600
    } else {
        (secs / 3600) % 24
    };
    let mut out = format!("{:02}:{:02}:{:02}", hours, (secs / 60) % 60, secs % 60);
    if frac != 0 {
        let f = format!("{frac:06}");
        out.push('.');
        out.push_str(f.trim_end_matches('0'));
    }
    out
}

/// Parses `HH:MM[:SS[.f]]` as a time of day (24:00:00 allowed, as in Postgres).
pub(crate) fn parse_time(text: &str) -> Option<i64> {
    let t = text.trim();
    if t.starts_with(['-', '+']) {
        return None;
    }
    let v = parse_clock(t)?;
    (v <= USECS_PER_DAY).then_some(v)
}

/// Text output of a time of day.
pub(crate) fn time_to_text(micros: i64) -> String {
    if micros == USECS_PER_DAY {
        return "24:00:00".into();
    }
    format_time_of_day(micros.unsigned_abs(), false)
}

fn epoch() -> NaiveDate {
    NaiveDate::from_ymd_opt(1970, 1, 1).expect("valid epoch")
}

/// Days since 1970-01-01 of a calendar date; `None` if out of range.
pub(crate) fn days_from_ymd(year: i32, month: u32, day: u32) -> Option<i32> {
    let date = NaiveDate::from_ymd_opt(year, month, day)?;
    i32::try_from((date - epoch()).num_days()).ok()
}

fn ymd_from_days(days: i32) -> Option<NaiveDate> {
    epoch().checked_add_signed(chrono::Duration::days(days as i64))
}

/// Parses `YYYY-MM-DD[ BC]`, `infinity`, `-infinity`.
pub(crate) fn parse_date(text: &str) -> Option<i32> {
    let t = text.trim();
    match t.to_ascii_lowercase().as_str() {
        "infinity" | "+infinity" => return Some(DATE_INFINITY),
        "-infinity" => return Some(-DATE_INFINITY - 1),
        _ => {}
    }
    let (body, bc) = strip_bc(t);
    date_part(body, bc)
}

fn strip_bc(t: &str) -> (&str, bool) {
    match t.strip_suffix(" BC").or_else(|| t.strip_suffix(" bc")) {
        Some(rest) => (rest.trim_end(), true),
        None => (t, false),
    }
}

fn date_part(body: &str, bc: bool) -> Option<i32> {
    let mut fields = body.split('-');
    let (y, m, d) = (fields.next()?, fields.next()?, fields.next()?);
    if fields.next().is_some() || y.len() < 4 || m.len() != 2 || d.len() != 2 {
        return None;
    }
    let year = i32::try_from(digits(y)?).ok()?;
    if year == 0 {
        return None;
    }
    let year = if bc { 1 - year } else { year };
    days_from_ymd(
        year,
        u32::try_from(digits(m)?).ok()?,
        u32::try_from(digits(d)?).ok()?,
    )
}

/// Text output of a date.
pub(crate) fn date_to_text(days: i32) -> String {
    match days {
        DATE_INFINITY => "infinity".into(),
        d if d == -DATE_INFINITY - 1 => "-infinity".into(),
        d => match ymd_from_days(d) {
            Some(date) => format_ymd(date),
            None => "infinity".into(),
        },
    }
}

fn format_ymd(date: NaiveDate) -> String {
    let year = date.year();
    if year <= 0 {
        format!("{:04}-{:02}-{:02} BC", 1 - year, date.month(), date.day())
    } else {
        format!("{:04}-{:02}-{:02}", year, date.month(), date.day())
    }
}

/// Parses a timestamp: `YYYY-MM-DD[( |T)HH:MM[:SS[.f]]][offset][ BC]`. With `with_zone`, an
/// offset (`Z`, `+HH`, `+HH:MM`, `+HH:MM:SS`) is honoured and the result is UTC; without it, an
/// offset is ignored as Postgres ignores it for `timestamp`.
pub(crate) fn parse_timestamp(text: &str, with_zone: bool) -> Option<i64> {
    let t = text.trim();
    match t.to_ascii_lowercase().as_str() {
        "infinity" | "+infinity" => return Some(TIMESTAMP_INFINITY),
        "-infinity" => return Some(-TIMESTAMP_INFINITY - 1),
        _ => {}
    }
    let (body, bc) = strip_bc(t);
    let (date, rest) = match body.find([' ', 'T', 't']) {
        Some(at) => (&body[..at], body[at + 1..].trim_start()),
        None => (body, ""),
    };
    let days = date_part(date, bc)? as i64;
    let (clock, offset) = split_offset(rest)?;
    let time = if clock.is_empty() {
        0
    } else {
        parse_time(clock)?
    };
    let offset = if with_zone { offset } else { 0 };
    days.checked_mul(USECS_PER_DAY)?
        .checked_add(time)?
        .checked_sub(offset)
}

/// Splits a time from a trailing UTC offset, returning the offset in microseconds.
fn split_offset(rest: &str) -> Option<(&str, i64)> {
    if let Some(clock) = rest.strip_suffix(['Z', 'z']) {
        return Some((clock.trim_end(), 0));
    }
    let Some(at) = rest.rfind(['+', '-']) else {
        return Some((rest, 0));
    };
    let (clock, zone) = (rest[..at].trim_end(), &rest[at..]);
    let sign = if zone.starts_with('-') { -1 } else { 1 };
    let fields: Vec<&str> = zone[1..].split(':').collect();
    let secs = match fields.as_slice() {
        [hhmm] if hhmm.len() == 4 && hhmm.is_ascii() => {
            digits(&hhmm[..2])? * 3600 + digits(&hhmm[2..])? * 60
        }
        [h] if h.len() <= 2 => digits(h)? * 3600,
        [h, m] => digits(h)? * 3600 + digits(m)? * 60,
        [h, m, s] => digits(h)? * 3600 + digits(m)? * 60 + digits(s)?,
        _ => return None,
    };
    if secs > 15 * 3600 + 59 * 60 + 59 {
        return None;
    }
    Some((clock, sign * secs * USECS_PER_SEC))
}

/// Text output of a timestamp; `with_zone` appends `+00` (the session is UTC).
pub(crate) fn timestamp_to_text(micros: i64, with_zone: bool) -> String {
    match micros {
        TIMESTAMP_INFINITY => return "infinity".into(),
        m if m == -TIMESTAMP_INFINITY - 1 => return "-infinity".into(),
        _ => {}
    }
    let days = micros.div_euclid(USECS_PER_DAY);
    let time = micros.rem_euclid(USECS_PER_DAY);
    let Some(date) = i32::try_from(days).ok().and_then(ymd_from_days) else {
        return "infinity".into();
    };
    let year = date.year();
    let ymd = format!(
        "{:04}-{:02}-{:02}",
        if year <= 0 { 1 - year } else { year },
        date.month(),
        date.day()
    );
    let zone = if with_zone { "+00" } else { "" };
    let bc = if year <= 0 { " BC" } else { "" };
    format!(
        "{ymd} {}{zone}{bc}",
        format_time_of_day(time.unsigned_abs(), false)
    )
}

/// `timestamp + interval` (months first, clamping the day to the month's end, then days, then
/// microseconds), as Postgres does in a UTC session; `None` when out of range.
pub(crate) fn add_interval(ts: i64, iv: &Interval) -> Option<i64> {
    if ts == TIMESTAMP_INFINITY || ts == -TIMESTAMP_INFINITY - 1 {
        return Some(ts);
    }
    let days = ts.div_euclid(USECS_PER_DAY);
    let time = ts.rem_euclid(USECS_PER_DAY);
    let mut date = ymd_from_days(i32::try_from(days).ok()?)?;
    if iv.months != 0 {
        let total = date.year() as i64 * 12 + date.month0() as i64 + iv.months as i64;
        let (year, month0) = (total.div_euclid(12), total.rem_euclid(12));
        let year = i32::try_from(year).ok()?;
        let month = u32::try_from(month0).ok()? + 1;
        let last = last_day_of_month(year, month)?;
        date = NaiveDate::from_ymd_opt(year, month, date.day().min(last))?;
    }
    let days = (date - epoch()).num_days().checked_add(iv.days as i64)?;
    let result = days
        .checked_mul(USECS_PER_DAY)?
        .checked_add(time)?
        .checked_add(iv.micros)?;
    valid_timestamp(result)
}

fn last_day_of_month(year: i32, month: u32) -> Option<u32> {
    let next = if month == 12 {
        NaiveDate::from_ymd_opt(year + 1, 1, 1)?
    } else {
        NaiveDate::from_ymd_opt(year, month + 1, 1)?
    };
    Some(next.pred_opt()?.day())
}

/// The first timestamp Postgres has, 4714-11-24 00:00:00 BC (Julian day 0).
const TIMESTAMP_MIN: i64 = -210_866_803_200 * USECS_PER_SEC;
/// The first date Postgres has, 4714-11-24 BC.
const DATE_MIN: i32 = -2_440_588;

/// Checks a computed timestamp is not before Postgres's first (4714-11-24 BC) and not infinity.
pub(crate) fn valid_timestamp(micros: i64) -> Option<i64> {
    (TIMESTAMP_MIN..TIMESTAMP_INFINITY)
        .contains(&micros)
        .then_some(micros)
}

/// Whether a timestamp read from text is one Postgres takes: ±infinity, or not before its
/// first.
pub(crate) fn timestamp_in_range(micros: i64) -> bool {
    micros == -TIMESTAMP_INFINITY - 1 || micros >= TIMESTAMP_MIN
}

/// Whether a date read from text is one Postgres takes: ±infinity, or not before its first.
pub(crate) fn date_in_range(days: i32) -> bool {
    days == -DATE_INFINITY - 1 || days >= DATE_MIN
}

/// `timestamp - timestamp` as Postgres returns it (days and time, justified by hours).
pub(crate) fn timestamp_diff(a: i64, b: i64) -> Option<Interval> {
    let micros = a.checked_sub(b)?;
    Interval {
        months: 0,
        days: 0,
        micros,
    }
    .justify_hours()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_postgres_output() {
        for text in [
            "2024-02-29 23:59:59.5",
            "0044-03-15 10:00:00 BC",
            "infinity",
            "1970-01-01 00:00:00",
        ] {
            assert_eq!(
                timestamp_to_text(parse_timestamp(text, false).unwrap(), false),
                text
            );
        }
        assert_eq!(
            timestamp_to_text(
                parse_timestamp("2024-01-01 02:00:00+02", true).unwrap(),
                true
            ),
            "2024-01-01 00:00:00+00"
        );
        assert_eq!(
            date_to_text(parse_date("2024-01-31").unwrap()),
            "2024-01-31"
        );
        assert!(parse_date("2024-02-30").is_none());
    }

    #[test]
    fn intervals_like_postgres() {
        let iv = Interval::parse("1 year 2 mons -3 days 04:05:06.5").unwrap();
        assert_eq!(iv.to_text(), "1 year 2 mons -3 days +04:05:06.5");
        assert_eq!(
            Interval::parse("1 mon").unwrap().span(),
            Interval::parse("30 days").unwrap().span()
        );
        let jan31 = parse_timestamp("2024-01-31", false).unwrap();
        let plus = add_interval(jan31, &Interval::parse("1 mon").unwrap()).unwrap();
        assert_eq!(timestamp_to_text(plus, false), "2024-02-29 00:00:00");
    }
}

//! Time zones for `timezone(zone, ts)` and `ts AT TIME ZONE zone`, resolved and applied as
//! Postgres does (`timestamptz_zone`, `timestamp_zone`, `timestamptz_izone`, `timestamp_izone`).
//!
//! A zone name is looked up in Postgres's order: its `Default` abbreviations (`EST`, `utc`;
//! case-insensitive), then IANA zone names (case-insensitive; the tz database compiled into
//! `tzdb_data`), then a POSIX zone spec without daylight-saving rules (`UTC+3`, `+05:30`,
//! `<+05>-5`). POSIX offsets count hours *west* of Greenwich: `UTC+3` is three hours behind UTC.

mod abbreviations;

use syncline_core::pg_time::POSTGRES_EPOCH_UNIX_SECS;
use tz::TimeZoneRef;

use super::datetime::{valid_timestamp, Interval, TIMESTAMP_INFINITY, USECS_PER_SEC};
use crate::error::EvalError;
use abbreviations::Abbrev;

/// Longest zone name Postgres reads (`TZ_STRLEN_MAX`); it cuts longer text to this.
const ZONE_NAME_BYTES_MAX: usize = 255;
/// Largest hour of a POSIX offset Postgres accepts (a week minus an hour).
const POSIX_HOURS_MAX: i64 = 167;
/// Seconds per day: Postgres looks for a zone's transition within a day of a local time.
const SECS_PER_DAY: i64 = 86_400;

/// The zone argument of `timezone()`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ZoneArg<'a> {
    /// `text`: an abbreviation, an IANA name or a POSIX spec.
    Name(&'a str),
    /// `interval`: an offset east of Greenwich.
    Interval(&'a Interval),
}

/// `timezone(zone, ts)`: with `to_utc`, `ts` (microseconds) is a local time in the zone and the
/// result the instant (timestamp → timestamptz); otherwise `ts` is an instant and the result
/// the zone's local time then (timestamptz → timestamp). Infinities pass through before the
/// zone is looked at, as in Postgres.
pub(crate) fn timezone(zone: ZoneArg, ts: i64, to_utc: bool) -> Result<i64, EvalError> {
    if ts == TIMESTAMP_INFINITY || ts == -TIMESTAMP_INFINITY - 1 {
        return Ok(ts);
    }
    let zone = match zone {
        ZoneArg::Name(name) => Zone::lookup(name)?,
        ZoneArg::Interval(iv) => Zone::of_interval(iv)?,
    };
    if to_utc {
        zone.local_to_utc(ts)
    } else {
        zone.utc_to_local(ts)
    }
}

/// A resolved time zone.
#[derive(Debug, Clone, Copy)]
enum Zone {
    /// A fixed offset, seconds east of Greenwich: an abbreviation, a POSIX spec, an interval.
    Fixed(i64),
    /// An IANA zone.
    Named(&'static TimeZoneRef<'static>),
    /// An abbreviation whose offset Postgres takes from a zone's history (`MSK`).
    Dynamic {
        /// The abbreviation, lower case.
        abbrev: &'static str,
        /// The zone it belongs to.
        zone: &'static TimeZoneRef<'static>,
    },
}

impl Zone {
    /// Looks `name` up as Postgres does; an unknown name is Postgres's error.
    fn lookup(name: &str) -> Result<Zone, EvalError> {
        let name = clip(name, ZONE_NAME_BYTES_MAX);
        let lower = name.to_ascii_lowercase();
        match abbreviations::find(&lower) {
            Some((_, Abbrev::Fixed(east))) => return Ok(Zone::Fixed(east as i64)),
            Some((abbrev, Abbrev::Dynamic(zone))) => {
                let zone = tzdb_data::find_tz(zone.as_bytes()).ok_or_else(|| unknown(name))?;
                return Ok(Zone::Dynamic { abbrev, zone });
            }
            None => {}
        }
        if let Some(zone) = tzdb_data::find_tz(name.as_bytes()) {
            return Ok(Zone::Named(zone));
        }
        match posix_spec(name) {
            Some((west, "")) => Ok(Zone::Fixed(-west)),
            Some(_) => Err(EvalError::Other(format!(
                "time zone \"{name}\" has daylight-saving rules, which are not supported"
            ))),
            None => Err(unknown(name)),
        }
    }

    /// The zone of an interval: its whole seconds east (months or days are an error).
    fn of_interval(iv: &Interval) -> Result<Zone, EvalError> {
        if iv.months != 0 || iv.days != 0 {
            return Err(EvalError::Other(format!(
                "interval time zone \"{}\" must not include months or days",
                iv.to_text()
            )));
        }
        // Postgres keeps the seconds in an int: they wrap at 32 bits.
        #[allow(clippy::cast_possible_truncation, reason = "the wrap is Postgres's")]
        let seconds = (iv.micros / USECS_PER_SEC) as i32;
        Ok(Zone::Fixed(i64::from(seconds)))
    }

    /// The local time in the zone at instant `utc` (microseconds).
    fn utc_to_local(&self, utc: i64) -> Result<i64, EvalError> {
        let secs = utc.div_euclid(USECS_PER_SEC);
        let east = match *self {
            Zone::Fixed(east) => east,
            Zone::Named(zone) => offset_at(zone, secs)?,
            Zone::Dynamic { abbrev, zone } => match abbrev_offset(zone, abbrev, time_t(utc)) {
                Some(east) => east,
                None => local_offset(zone, secs + offset_at(zone, secs)?)?,
            },
        };
        shift(utc, east)
    }

    /// The instant at which clocks in the zone show `local` (microseconds).
    fn local_to_utc(&self, local: i64) -> Result<i64, EvalError> {
        let secs = local.div_euclid(USECS_PER_SEC);
        let east = match *self {
            Zone::Fixed(east) => east,
            Zone::Named(zone) => local_offset(zone, secs)?,
            Zone::Dynamic { abbrev, zone } => {
                let east = local_offset(zone, secs)?;
                abbrev_offset(zone, abbrev, secs - east).unwrap_or(east)
            }
        };
        shift(local, -east)
    }
}

fn unknown(name: &str) -> EvalError {
    EvalError::Other(format!("time zone \"{name}\" not recognized"))
}

fn out_of_range() -> EvalError {
    EvalError::Other("timestamp out of range".into())
}

/// `ts` moved by `east` seconds, within Postgres's timestamp range.
fn shift(ts: i64, east: i64) -> Result<i64, EvalError> {
    east.checked_mul(USECS_PER_SEC)
        .and_then(|d| ts.checked_add(d))
        .and_then(valid_timestamp)
        .ok_or_else(out_of_range)
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn clip(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Unix seconds as Postgres's `timestamptz_to_time_t` computes them: truncated towards
/// 2000-01-01, not floored.
fn time_t(utc: i64) -> i64 {
    utc.saturating_sub(POSTGRES_EPOCH_UNIX_SECS * USECS_PER_SEC) / USECS_PER_SEC
        + POSTGRES_EPOCH_UNIX_SECS
}

/// The zone's offset east, in seconds, at Unix second `t`.
fn offset_at(zone: &TimeZoneRef, t: i64) -> Result<i64, EvalError> {
    zone.find_local_time_type(t)
        .map(|ty| ty.ut_offset() as i64)
        .map_err(|_| out_of_range())
}

/// The offset east Postgres gives local time `local` (seconds) in `zone`
/// (`DetermineTimeZoneOffset`). Postgres compares the offsets before and after the first
/// transition past `local` minus a day: a local time that exists under one of them only
/// takes that one, a repeated time (clocks set back) the offset after the transition, and a
/// skipped time (clocks set forward) the offset before it. Like Postgres, this assumes a zone
/// changes its offset at most once in two days.
fn local_offset(zone: &TimeZoneRef, local: i64) -> Result<i64, EvalError> {
    let before = offset_at(zone, local - SECS_PER_DAY)?;
    let after = offset_at(zone, local + SECS_PER_DAY)?;
    if before != after && offset_at(zone, local - after)? == after {
        Ok(after)
    } else {
        Ok(before)
    }
}

/// What abbreviation `abbrev` (lower case) meant in `zone` at Unix second `t`
/// (`pg_interpret_timezone_abbrev`): the offset of the latest period using it that began at
/// or before `t`, else of the first one after; `None` when the zone never used it. Postgres
/// compares the upper-cased abbreviation with the zone's designations exactly.
fn abbrev_offset(zone: &TimeZoneRef, abbrev: &str, t: i64) -> Option<i64> {
    let upper = abbrev.to_ascii_uppercase();
    let abbrev = upper.as_str();
    let types = zone.local_time_types();
    let transitions = zone.transitions();
    let cutoff = transitions.partition_point(|tr| tr.unix_leap_time() <= t);
    if cutoff == transitions.len() {
        let rule_types = match zone.extra_rule() {
            Some(tz::timezone::TransitionRule::Fixed(ty)) => vec![ty],
            Some(tz::timezone::TransitionRule::Alternate(alt)) => vec![alt.std(), alt.dst()],
            None => Vec::new(),
        };
        if let Some(ty) = rule_types
            .into_iter()
            .find(|ty| ty.time_zone_designation() == abbrev)
        {
            return Some(ty.ut_offset() as i64);
        }
    }
    let named = |tr: &&tz::timezone::Transition| {
        types[tr.local_time_type_index()].time_zone_designation() == abbrev
    };
    transitions[..cutoff]
        .iter()
        .rev()
        .find(named)
        .or_else(|| transitions[cutoff..].iter().find(named))
        .map(|tr| types[tr.local_time_type_index()].ut_offset() as i64)
}

/// A POSIX zone spec as Postgres's `tzparse` reads its standard-time part: a name (letters and
/// anything but digits, `,`, `+`, `-`; possibly empty) or `<name>`, then an offset
/// `[+-]hh[:mm[:ss]]` west of Greenwich. Returns the offset in seconds and what follows it
/// (a daylight-saving part when not empty).
fn posix_spec(spec: &str) -> Option<(i64, &str)> {
    if spec.starts_with(':') {
        return None;
    }
    let rest = match spec.strip_prefix('<') {
        Some(quoted) => &quoted[quoted.find('>')? + 1..],
        None => spec.trim_start_matches(|c: char| !(c.is_ascii_digit() || ",+-".contains(c))),
    };
    let (negative, rest) = match rest.as_bytes().first()? {
        b'-' => (true, &rest[1..]),
        b'+' => (false, &rest[1..]),
        _ => (false, rest),
    };
    let (hours, mut rest) = posix_number(rest, POSIX_HOURS_MAX)?;
    let mut secs = hours * 3600;
    if let Some(after) = rest.strip_prefix(':') {
        let (minutes, after) = posix_number(after, 59)?;
        secs += minutes * 60;
        rest = after;
        if let Some(after) = rest.strip_prefix(':') {
            let (seconds, after) = posix_number(after, 60)?;
            secs += seconds;
            rest = after;
        }
    }
    Some((if negative { -secs } else { secs }, rest))
}

/// Leading decimal digits (at least one) of at most `max`, and the rest.
fn posix_number(text: &str, max: i64) -> Option<(i64, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let mut value = 0i64;
    for b in text[..digits].bytes() {
        value = value * 10 + (b - b'0') as i64;
        if value > max {
            return None;
        }
    }
    Some((value, &text[digits..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::datetime::{parse_timestamp, timestamp_to_text};

    fn at(zone: &str, ts: &str, to_utc: bool) -> String {
        let ts = parse_timestamp(ts, !to_utc).unwrap();
        match timezone(ZoneArg::Name(zone), ts, to_utc) {
            Ok(v) => timestamp_to_text(v, to_utc),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn zones_as_postgres_reads_them() {
        let cases = [
            ("UTC", "2024-07-01 00:00:00+00", "2024-07-01 00:00:00"),
            ("est", "2024-07-01 00:00:00+00", "2024-06-30 19:00:00"),
            (
                "america/NEW_york",
                "2024-07-01 00:00:00+00",
                "2024-06-30 20:00:00",
            ),
            ("UTC+3", "2024-07-01 00:00:00+00", "2024-06-30 21:00:00"),
            ("+05:30", "2024-01-01 00:00:00+00", "2023-12-31 18:30:00"),
            ("<+05>-5", "2024-07-01 00:00:00+00", "2024-07-01 05:00:00"),
            (
                "America/Foo+3",
                "2024-07-01 00:00:00+00",
                "2024-06-30 21:00:00",
            ),
            ("+167", "2024-07-01 00:00:00+00", "2024-06-24 01:00:00"),
            ("MSK", "2012-07-01 00:00:00+00", "2012-07-01 04:00:00"),
            ("MSK", "2005-07-01 00:00:00+00", "2005-07-01 03:00:00"),
            ("ART", "2024-07-01 00:00:00+00", "2024-06-30 21:00:00"),
            ("Europe/Berlin", "infinity", "infinity"),
            ("bad", "infinity", "infinity"),
            (
                "bad",
                "2024-01-01 00:00:00+00",
                "time zone \"bad\" not recognized",
            ),
            (
                "+168",
                "2024-01-01 00:00:00+00",
                "time zone \"+168\" not recognized",
            ),
        ];
        for (zone, ts, want) in cases {
            assert_eq!(at(zone, ts, false), want, "{zone} {ts}");
        }
        // Postgres reads 255 bytes of a name: here the offset is cut to `+`.
        let long = format!("{}+03", "A".repeat(254));
        let cut = format!("time zone \"{}+\" not recognized", "A".repeat(254));
        assert_eq!(at(&long, "2024-01-01 00:00:00+00", false), cut);
    }

    #[test]
    fn local_times_around_transitions() {
        let cases = [
            // Clocks set forward: a skipped time takes the offset before.
            (
                "America/New_York",
                "2024-03-10 02:30:00",
                "2024-03-10 07:30:00+00",
            ),
            // Clocks set back: a repeated time takes the offset after.
            (
                "America/New_York",
                "2024-11-03 01:30:00",
                "2024-11-03 06:30:00+00",
            ),
            (
                "Australia/Sydney",
                "2024-04-07 02:30:00",
                "2024-04-06 16:30:00+00",
            ),
            (
                "Europe/Berlin",
                "2024-01-01 00:00:00",
                "2023-12-31 23:00:00+00",
            ),
        ];
        for (zone, ts, want) in cases {
            assert_eq!(at(zone, ts, true), want, "{zone} {ts}");
        }
    }
}

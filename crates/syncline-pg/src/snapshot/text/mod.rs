//! Binary COPY values rendered as the exact text Postgres outputs under
//! [`crate::SESSION_SETTINGS`] (`SELECT col::text` is the oracle in the tests).

mod array;
mod datetime;
mod numbers;

use syncline_core::{PgType, TypeKind};

use crate::error::{PgError, PgResult};

/// How one column's binary value becomes text. Chosen once per column from its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextDecoder {
    /// `bool`: `true` / `false`.
    Bool,
    /// `int2`.
    Int2,
    /// `int4`.
    Int4,
    /// `int8`.
    Int8,
    /// `oid` (unsigned 32-bit).
    Oid,
    /// `float4`, shortest round-trip form.
    Float4,
    /// `float8`, shortest round-trip form.
    Float8,
    /// `numeric`.
    Numeric,
    /// Types whose binary form is their text: text, varchar, bpchar, name, enums, json, and
    /// columns the query casts `::text`.
    Text,
    /// `jsonb` (a version byte, then text).
    Jsonb,
    /// `uuid`.
    Uuid,
    /// `bytea`, hex output.
    Bytea,
    /// `date`.
    Date,
    /// `time`.
    Time,
    /// `timetz`.
    TimeTz,
    /// `timestamp`.
    Timestamp,
    /// `timestamptz` (rendered in UTC).
    TimestampTz,
    /// `interval`, ISO 8601 style.
    Interval,
    /// An array of the element decoder's type.
    Array(Box<TextDecoder>),
}

impl TextDecoder {
    /// The decoder for a column of type `ty`, or `None` when the type has no binary decoder
    /// here and the column must be selected as `col::text`.
    pub fn for_type(ty: &PgType) -> Option<TextDecoder> {
        let ty = ty.base();
        Some(match &ty.kind {
            TypeKind::Enum => TextDecoder::Text,
            TypeKind::Array(elem) => TextDecoder::Array(Box::new(TextDecoder::for_type(elem)?)),
            TypeKind::Base => match ty.oid {
                16 => TextDecoder::Bool,
                21 => TextDecoder::Int2,
                23 => TextDecoder::Int4,
                20 => TextDecoder::Int8,
                26 => TextDecoder::Oid,
                700 => TextDecoder::Float4,
                701 => TextDecoder::Float8,
                1700 => TextDecoder::Numeric,
                25 | 1043 | 1042 | 19 | 114 => TextDecoder::Text,
                3802 => TextDecoder::Jsonb,
                2950 => TextDecoder::Uuid,
                17 => TextDecoder::Bytea,
                1082 => TextDecoder::Date,
                1083 => TextDecoder::Time,
                1266 => TextDecoder::TimeTz,
                1114 => TextDecoder::Timestamp,
                1184 => TextDecoder::TimestampTz,
                1186 => TextDecoder::Interval,
                _ => return None,
            },
            TypeKind::Domain(_) | TypeKind::Other => return None,
        })
    }

    /// Whether the text may contain characters that JSON strings must escape (`bytea` always
    /// does: its hex form starts with a backslash).
    pub fn may_need_json_escape(&self) -> bool {
        matches!(
            self,
            TextDecoder::Text | TextDecoder::Jsonb | TextDecoder::Bytea | TextDecoder::Array(_)
        )
    }

    /// Appends the text form of the binary value `raw` to `out`.
    pub fn write_text(&self, raw: &[u8], out: &mut Vec<u8>) -> PgResult<()> {
        match self {
            TextDecoder::Bool => out.extend_from_slice(if fixed::<1>(raw)?[0] != 0 {
                b"true"
            } else {
                b"false"
            }),
            TextDecoder::Int2 => numbers::write_int(out, i16::from_be_bytes(fixed(raw)?) as i64),
            TextDecoder::Int4 => numbers::write_int(out, i32::from_be_bytes(fixed(raw)?) as i64),
            TextDecoder::Int8 => numbers::write_int(out, i64::from_be_bytes(fixed(raw)?)),
            TextDecoder::Oid => numbers::write_int(out, u32::from_be_bytes(fixed(raw)?) as i64),
            TextDecoder::Float4 => numbers::write_float4(out, f32::from_be_bytes(fixed(raw)?)),
            TextDecoder::Float8 => numbers::write_float8(out, f64::from_be_bytes(fixed(raw)?)),
            TextDecoder::Numeric => numbers::write_numeric(out, raw)?,
            TextDecoder::Text => out.extend_from_slice(raw),
            TextDecoder::Jsonb => match raw.split_first() {
                Some((1, text)) => out.extend_from_slice(text),
                _ => return Err(bad("jsonb", raw)),
            },
            TextDecoder::Uuid => write_uuid(out, &fixed::<16>(raw)?),
            TextDecoder::Bytea => write_bytea(out, raw),
            TextDecoder::Date => datetime::write_date(out, i32::from_be_bytes(fixed(raw)?)),
            TextDecoder::Time => datetime::write_time(out, i64::from_be_bytes(fixed(raw)?)),
            TextDecoder::TimeTz => {
                let raw = fixed::<12>(raw)?;
                let time = i64::from_be_bytes(raw[..8].try_into().expect("8 bytes"));
                let zone = i32::from_be_bytes(raw[8..].try_into().expect("4 bytes"));
                datetime::write_timetz(out, time, zone);
            }
            TextDecoder::Timestamp => {
                datetime::write_timestamp(out, i64::from_be_bytes(fixed(raw)?), false)
            }
            TextDecoder::TimestampTz => {
                datetime::write_timestamp(out, i64::from_be_bytes(fixed(raw)?), true)
            }
            TextDecoder::Interval => {
                let raw = fixed::<16>(raw)?;
                let micros = i64::from_be_bytes(raw[..8].try_into().expect("8 bytes"));
                let days = i32::from_be_bytes(raw[8..12].try_into().expect("4 bytes"));
                let months = i32::from_be_bytes(raw[12..].try_into().expect("4 bytes"));
                datetime::write_interval(out, micros, days, months);
            }
            TextDecoder::Array(elem) => array::write_array(out, raw, elem)?,
        }
        Ok(())
    }
}

fn fixed<const N: usize>(raw: &[u8]) -> PgResult<[u8; N]> {
    raw.try_into().map_err(|_| {
        PgError::Protocol(format!(
            "expected a {N}-byte binary value, got {} bytes",
            raw.len()
        ))
    })
}

fn bad(what: &str, raw: &[u8]) -> PgError {
    PgError::Protocol(format!(
        "malformed binary {what} value ({} bytes)",
        raw.len()
    ))
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn write_uuid(out: &mut Vec<u8>, raw: &[u8; 16]) {
    for (i, b) in raw.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push(b'-');
        }
        out.push(HEX[(b >> 4) as usize]);
        out.push(HEX[(b & 15) as usize]);
    }
}

fn write_bytea(out: &mut Vec<u8>, raw: &[u8]) {
    out.reserve(2 + raw.len() * 2);
    out.extend_from_slice(b"\\x");
    for b in raw {
        out.push(HEX[(b >> 4) as usize]);
        out.push(HEX[(b & 15) as usize]);
    }
}

//! Electric's JSON message lines for snapshot rows:
//! `{"key":"\"public\".\"items\"/\"1\"","value":{"id":"1",…},"headers":{"operation":"insert","relation":["public","items"]}}`.

use super::copy_binary::RowRef;
use super::query::{SnapshotColumn, SnapshotQuery};
use super::text::TextDecoder;
use crate::error::PgResult;

/// Builds message lines (and keys) for rows of one snapshot query.
pub struct RowEncoder {
    columns: Vec<EncodedColumn>,
    /// Positions (in `columns`) of the key columns, in key order.
    key_columns: Vec<usize>,
    /// `"schema"."table"`, the key's start.
    key_prefix: Vec<u8>,
    /// `},"headers":{…}}` closing every line.
    line_suffix: Vec<u8>,
    scratch: Vec<u8>,
    key: Vec<u8>,
}

struct EncodedColumn {
    decoder: TextDecoder,
    /// `"name":` (preceded by `,` for all but the first column).
    prefix: Vec<u8>,
}

impl RowEncoder {
    /// An encoder for rows of `schema.table` whose fields are `columns`, keyed by the columns at
    /// positions `key_columns`.
    pub fn new(
        schema: &str,
        table: &str,
        columns: &[SnapshotColumn],
        key_columns: Vec<usize>,
    ) -> Self {
        let columns = columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut prefix = Vec::new();
                if i > 0 {
                    prefix.push(b',');
                }
                write_json_string(&mut prefix, c.name.as_bytes());
                prefix.push(b':');
                EncodedColumn {
                    decoder: c.decoder.clone(),
                    prefix,
                }
            })
            .collect();
        let mut key_prefix = Vec::new();
        for (i, part) in [schema, table].into_iter().enumerate() {
            if i > 0 {
                key_prefix.push(b'.');
            }
            key_prefix.push(b'"');
            key_prefix.extend_from_slice(part.as_bytes());
            key_prefix.push(b'"');
        }
        let mut line_suffix = b"},\"headers\":{\"operation\":\"insert\",\"relation\":[".to_vec();
        write_json_string(&mut line_suffix, schema.as_bytes());
        line_suffix.push(b',');
        write_json_string(&mut line_suffix, table.as_bytes());
        line_suffix.extend_from_slice(b"]}}");
        RowEncoder {
            columns,
            key_columns,
            key_prefix,
            line_suffix,
            scratch: Vec::new(),
            key: Vec::new(),
        }
    }

    /// Adds `"snapshot_mark":mark` to every line's headers (rows of a subset snapshot).
    pub fn with_snapshot_mark(mut self, mark: u32) -> Self {
        let close = self.line_suffix.len() - 2;
        let header = format!(",\"snapshot_mark\":{mark}");
        self.line_suffix.splice(close..close, header.bytes());
        self
    }

    /// An encoder for the rows of `query`.
    pub fn for_query(query: &SnapshotQuery) -> Self {
        Self::new(
            &query.schema,
            &query.table,
            &query.columns,
            query.key_columns.clone(),
        )
    }

    /// Appends the message line for `row` to `line` (no newline) and returns the row's key.
    pub fn encode(&mut self, row: &RowRef<'_>, line: &mut Vec<u8>) -> PgResult<&[u8]> {
        self.key.clear();
        self.key.extend_from_slice(&self.key_prefix);
        for &i in &self.key_columns {
            self.key.push(b'/');
            let Some(raw) = row.get(i) else {
                self.key.push(b'_');
                continue;
            };
            self.scratch.clear();
            self.columns[i].decoder.write_text(raw, &mut self.scratch)?;
            self.key.push(b'"');
            for &b in &self.scratch {
                if b == b'/' {
                    self.key.push(b'/');
                }
                self.key.push(b);
            }
            self.key.push(b'"');
        }
        line.extend_from_slice(b"{\"key\":");
        write_json_string(line, &self.key);
        line.extend_from_slice(b",\"value\":{");
        for (i, column) in self.columns.iter().enumerate() {
            line.extend_from_slice(&column.prefix);
            let Some(raw) = row.get(i) else {
                line.extend_from_slice(b"null");
                continue;
            };
            if column.decoder.may_need_json_escape() {
                self.scratch.clear();
                column.decoder.write_text(raw, &mut self.scratch)?;
                write_json_string(line, &self.scratch);
            } else {
                line.push(b'"');
                column.decoder.write_text(raw, line)?;
                line.push(b'"');
            }
        }
        line.extend_from_slice(&self.line_suffix);
        Ok(&self.key)
    }
}

/// Appends `text` as a JSON string, escaping as Postgres's `to_json` does.
pub fn write_json_string(out: &mut Vec<u8>, text: &[u8]) {
    out.reserve(text.len() + 2);
    out.push(b'"');
    let mut rest = text;
    while let Some(i) = first_to_escape(rest) {
        out.extend_from_slice(&rest[..i]);
        let b = rest[i];
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(b >> 4) as usize],
                HEX[(b & 15) as usize],
            ]),
        }
        rest = &rest[i + 1..];
    }
    out.extend_from_slice(rest);
    out.push(b'"');
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Index of the first byte JSON must escape (control, `"`, `\\`), eight bytes at a time.
fn first_to_escape(text: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let mut chunks = text.chunks_exact(8);
    for (n, chunk) in chunks.by_ref().enumerate() {
        let x = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        // Bytes below 0x20 (ignoring bytes >= 0x80, which are never escaped), quotes, backslashes.
        let control = x.wrapping_sub(ONES * 0x20) & !x & HIGHS;
        if control | has_zero(x ^ (ONES * b'"' as u64)) | has_zero(x ^ (ONES * b'\\' as u64)) != 0 {
            if let Some(i) = chunk.iter().position(|&b| needs_escape(b)) {
                return Some(n * 8 + i);
            }
        }
    }
    let tail = chunks.remainder();
    tail.iter()
        .position(|&b| needs_escape(b))
        .map(|i| text.len() - tail.len() + i)
}

fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(text: &[u8]) -> String {
        let mut out = Vec::new();
        write_json_string(&mut out, text);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn escapes_like_postgres_to_json() {
        assert_eq!(json(b""), r#""""#);
        assert_eq!(
            json(b"plain text, long enough for chunks"),
            r#""plain text, long enough for chunks""#
        );
        assert_eq!(
            json(b"a\"b\\c\nd\x01\x1f\x08\x0c\t\r"),
            r#""a\"b\\c\nd\u0001\u001f\b\f\t\r""#
        );
        assert_eq!(json("ünï \u{7f} ✓".as_bytes()), "\"ünï \u{7f} ✓\"");
    }

    #[test]
    fn escapes_agree_with_serde_json_at_every_position() {
        for len in 0..20 {
            for pos in 0..len {
                for special in [b'"', b'\\', b'\n', 0x01, 0x1f, 0x7f, 0x80, b' '] {
                    let mut text = vec![b'x'; len];
                    text[pos] = special;
                    let text = String::from_utf8_lossy(&text).into_owned();
                    let parsed: String = serde_json::from_str(&json(text.as_bytes())).unwrap();
                    assert_eq!(parsed, text);
                }
            }
        }
    }
}

//! Electric's JSON message lines for snapshot rows:
//! `{"key":"\"public\".\"items\"/\"1\"","value":{"id":"1",…},"headers":{"operation":"insert","relation":["public","items"]}}`.

use super::copy_binary::RowRef;
use super::query::SnapshotColumn;
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
    pub fn new(schema: &str, table: &str, columns: &[SnapshotColumn], key_columns: Vec<usize>) -> Self {
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
                EncodedColumn { decoder: c.decoder.clone(), prefix }
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
        RowEncoder { columns, key_columns, key_prefix, line_suffix, scratch: Vec::new(), key: Vec::new() }
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
    out.push(b'"');
    let mut start = 0;
    for (i, &b) in text.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&text[start..i]);
        if escape.is_empty() {
            out.extend_from_slice(format!("\\u{b:04x}").as_bytes());
        } else {
            out.extend_from_slice(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&text[start..]);
    out.push(b'"');
}

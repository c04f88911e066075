//! Electric's JSON message lines for snapshot rows:
//! `{"key":"\"public\".\"items\"/\"1\"","value":{"id":"1",…},"headers":{"operation":"insert","relation":["public","items"]}}`,
//! written through `syncline_core::wire`.

use syncline_core::wire::{self, Operation};

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
    /// `["schema","table"]`.
    relation_json: Vec<u8>,
    /// `},"headers":{…}}` closing every line.
    line_suffix: Vec<u8>,
    /// Whether each row ends with one more column, a fragment of headers (see
    /// [`SnapshotQuery::headers_sql`]) spliced in before the headers close.
    extra_headers: bool,
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
                prefix.extend_from_slice(&wire::field_prefix(&c.name));
                EncodedColumn {
                    decoder: c.decoder.clone(),
                    prefix,
                }
            })
            .collect();
        let relation_json = wire::relation_json(schema, table);
        RowEncoder {
            columns,
            key_columns,
            key_prefix: wire::key_prefix(schema, table),
            line_suffix: line_suffix(&relation_json, None),
            extra_headers: false,
            relation_json,
            scratch: Vec::new(),
            key: Vec::new(),
        }
    }

    /// Adds `"snapshot_mark":mark` to every line's headers (rows of a subset snapshot).
    pub fn with_snapshot_mark(mut self, mark: u32) -> Self {
        self.line_suffix = line_suffix(&self.relation_json, Some(mark));
        self
    }

    /// An encoder for the rows of `query`.
    pub fn for_query(query: &SnapshotQuery) -> Self {
        let mut encoder = Self::new(
            &query.schema,
            &query.table,
            &query.columns,
            query.key_columns.clone(),
        );
        encoder.extra_headers = query.headers_sql.is_some();
        encoder
    }

    /// Appends the message line for `row` to `line` (no newline) and returns the row's key.
    pub fn encode(&mut self, row: &RowRef<'_>, line: &mut Vec<u8>) -> PgResult<&[u8]> {
        self.key.clear();
        self.key.extend_from_slice(&self.key_prefix);
        for &i in &self.key_columns {
            let Some(raw) = row.get(i) else {
                wire::push_key_part(&mut self.key, None);
                continue;
            };
            self.scratch.clear();
            self.columns[i].decoder.write_text(raw, &mut self.scratch)?;
            wire::push_key_part(&mut self.key, Some(&self.scratch));
        }
        wire::write_message_start(line, &self.key);
        line.push(b'{');
        for (i, column) in self.columns.iter().enumerate() {
            line.extend_from_slice(&column.prefix);
            let Some(raw) = row.get(i) else {
                line.extend_from_slice(b"null");
                continue;
            };
            if column.decoder.may_need_json_escape() {
                self.scratch.clear();
                column.decoder.write_text(raw, &mut self.scratch)?;
                wire::write_json_string(line, &self.scratch);
            } else {
                line.push(b'"');
                column.decoder.write_text(raw, line)?;
                line.push(b'"');
            }
        }
        if self.extra_headers {
            // The suffix ends with the headers' `}}`: the fragment goes before them.
            let close = self.line_suffix.len() - 2;
            line.extend_from_slice(&self.line_suffix[..close]);
            if let Some(raw) = row.get(self.columns.len()) {
                line.extend_from_slice(raw);
            }
            line.extend_from_slice(&self.line_suffix[close..]);
        } else {
            line.extend_from_slice(&self.line_suffix);
        }
        Ok(&self.key)
    }
}

/// `}` closing a row's value, then the headers of a snapshot row, closed.
fn line_suffix(relation_json: &[u8], snapshot_mark: Option<u32>) -> Vec<u8> {
    let mut out = vec![b'}'];
    wire::write_headers_start(&mut out, Operation::Insert, relation_json);
    if let Some(mark) = snapshot_mark {
        wire::write_snapshot_mark(&mut out, mark);
    }
    wire::close_headers(&mut out, false);
    out
}

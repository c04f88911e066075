//! A replicated change as the Electric messages one shape stores: key, value, headers.
//!
//! Every stored message starts with `,` so that any run of messages is a valid continuation of
//! a JSON array: a response body is `[` + the stored bytes without their first comma + `]`.

use syncline_core::{LogOffset, RelationDesc, Value};
use syncline_pg::snapshot::write_json_string;
use syncline_storage::Operation;

use crate::shape::{Replica, ShapeDefinition};

/// A message of one shape whose headers are still open: [`PendingMessage::finish`] closes them,
/// with `"last":true` on the shape's last message of the transaction.
#[derive(Debug, Clone)]
pub struct PendingMessage {
    /// Offset in the shape log.
    pub offset: LogOffset,
    /// The row key.
    pub key: Vec<u8>,
    /// What happened to the row.
    pub op: Operation,
    /// JSON up to the open headers object.
    pub json: Vec<u8>,
}

impl PendingMessage {
    /// Closes the headers, marking the message as the transaction's last for this shape or not.
    pub fn finish(mut self, last: bool) -> PendingMessage {
        if last {
            self.json.extend_from_slice(b",\"last\":true");
        }
        self.json.extend_from_slice(b"}}");
        self
    }
}

/// Where a change sits in its transaction.
#[derive(Debug, Clone, Copy)]
pub struct ChangeContext {
    /// The transaction's 32-bit xid.
    pub xid: u32,
    /// Its commit LSN: the offset's TX part.
    pub lsn: u64,
    /// `2 × the change's index in the transaction`: the offset's OP part.
    pub op: u64,
}

/// A row change after where-clause evaluation for one shape.
#[derive(Debug, Clone, Copy)]
pub enum ShapeChange<'a> {
    /// The row is new to the shape (inserted, or updated into the where clause).
    Insert(&'a [Value]),
    /// The row stays in the shape.
    Update {
        /// Before.
        old: &'a [Value],
        /// After.
        new: &'a [Value],
    },
    /// The row leaves the shape (deleted, or updated out of the where clause).
    Delete(&'a [Value]),
}

/// Builds one shape's messages; rows are in the layout of the relation the shape was made on.
#[derive(Debug, Clone)]
pub struct ChangeEncoder {
    /// Positions of the selected columns, with their `"name":` prefix.
    selected: Vec<(usize, Vec<u8>)>,
    /// Positions of the key columns, in key order.
    key_columns: Vec<usize>,
    /// Whether the table has a primary key (else deletes carry the whole row).
    has_pk: bool,
    key_prefix: Vec<u8>,
    relation_json: Vec<u8>,
    replica: Replica,
}

impl ChangeEncoder {
    /// An encoder for `definition` on `relation`; `None` if a selected column is missing.
    pub fn new(definition: &ShapeDefinition, relation: &RelationDesc) -> Option<ChangeEncoder> {
        let positions = definition.column_positions(relation)?;
        let selected = positions
            .iter()
            .map(|&i| {
                let mut prefix = Vec::new();
                write_json_string(&mut prefix, relation.columns[i].name.as_bytes());
                prefix.push(b':');
                (i, prefix)
            })
            .collect();
        let pk = relation.primary_key();
        let has_pk = !pk.is_empty();
        let key_columns = if has_pk {
            pk.iter()
                .map(|c| relation.column(&c.name).map(|(i, _)| i))
                .collect::<Option<Vec<_>>>()?
        } else {
            let mut by_name = positions.clone();
            by_name.sort_by(|&a, &b| relation.columns[a].name.cmp(&relation.columns[b].name));
            by_name
        };
        let mut key_prefix = Vec::new();
        for (i, part) in [&relation.schema, &relation.name].into_iter().enumerate() {
            if i > 0 {
                key_prefix.push(b'.');
            }
            key_prefix.push(b'"');
            key_prefix.extend_from_slice(part.as_bytes());
            key_prefix.push(b'"');
        }
        let mut relation_json = b"[".to_vec();
        write_json_string(&mut relation_json, relation.schema.as_bytes());
        relation_json.push(b',');
        write_json_string(&mut relation_json, relation.name.as_bytes());
        relation_json.push(b']');
        Some(ChangeEncoder {
            selected,
            key_columns,
            has_pk,
            key_prefix,
            relation_json,
            replica: definition.replica,
        })
    }

    /// Whether an update from `old` to `new` changes any selected or key column.
    pub fn touches(&self, old: &[Value], new: &[Value]) -> bool {
        self.selected
            .iter()
            .map(|(i, _)| *i)
            .chain(self.key_columns.iter().copied())
            .any(|i| old[i] != new[i])
    }

    /// The messages for `change`: one, or two for an update that changes the key (a delete of
    /// the old key at `op`, an insert of the new one at `op + 1`). Headers are left open.
    pub fn encode(&self, change: ShapeChange<'_>, ctx: ChangeContext) -> Vec<PendingMessage> {
        match change {
            ShapeChange::Insert(new) => vec![self.message(
                Operation::Insert,
                new,
                &self.all_fields(),
                None,
                None,
                ctx,
                0,
            )],
            ShapeChange::Delete(old) => vec![self.delete(old, None, ctx, 0)],
            ShapeChange::Update { old, new } => {
                let old_key = self.key(old);
                let new_key = self.key(new);
                if old_key != new_key {
                    let delete = self.delete(old, Some(("key_change_to", &new_key)), ctx, 0);
                    let insert = self.message(
                        Operation::Insert,
                        new,
                        &self.all_fields(),
                        None,
                        Some(("key_change_from", &old_key)),
                        ctx,
                        1,
                    );
                    return vec![delete, insert];
                }
                let changed: Vec<usize> = self
                    .selected
                    .iter()
                    .enumerate()
                    .filter(|(_, (i, _))| old[*i] != new[*i])
                    .map(|(n, _)| n)
                    .collect();
                let fields = match self.replica {
                    Replica::Full => self.all_fields(),
                    Replica::Default => self.key_and(&changed),
                };
                let old_value = (self.replica == Replica::Full).then_some((old, &changed[..]));
                vec![self.message(Operation::Update, new, &fields, old_value, None, ctx, 0)]
            }
        }
    }

    fn delete(
        &self,
        old: &[Value],
        key_change: Option<(&str, &[u8])>,
        ctx: ChangeContext,
        op_delta: u64,
    ) -> PendingMessage {
        let fields = if self.replica == Replica::Full || !self.has_pk {
            self.all_fields()
        } else {
            self.key_and(&[])
        };
        self.message(
            Operation::Delete,
            old,
            &fields,
            None,
            key_change,
            ctx,
            op_delta,
        )
    }

    fn all_fields(&self) -> Vec<usize> {
        (0..self.selected.len()).collect()
    }

    /// Indexes into `selected` of the key columns that are selected, then of `extra`, in
    /// selection order.
    fn key_and(&self, extra: &[usize]) -> Vec<usize> {
        (0..self.selected.len())
            .filter(|n| self.key_columns.contains(&self.selected[*n].0) || extra.contains(n))
            .collect()
    }

    /// The row's key: `"schema"."table"/"v1"/"v2"` (`/` doubled inside values, `_` for NULL).
    pub fn key(&self, row: &[Value]) -> Vec<u8> {
        let mut key = self.key_prefix.clone();
        for &i in &self.key_columns {
            key.push(b'/');
            match row[i].as_text() {
                None => key.push(b'_'),
                Some(text) => {
                    key.push(b'"');
                    for &b in text {
                        if b == b'/' {
                            key.push(b'/');
                        }
                        key.push(b);
                    }
                    key.push(b'"');
                }
            }
        }
        key
    }

    #[allow(clippy::too_many_arguments)]
    fn message(
        &self,
        op: Operation,
        row: &[Value],
        fields: &[usize],
        old_value: Option<(&[Value], &[usize])>,
        key_change: Option<(&str, &[u8])>,
        ctx: ChangeContext,
        op_delta: u64,
    ) -> PendingMessage {
        let key = self.key(row);
        let mut json = Vec::with_capacity(256);
        json.extend_from_slice(b",{\"key\":");
        write_json_string(&mut json, &key);
        json.extend_from_slice(b",\"value\":");
        self.write_object(&mut json, row, fields);
        if let Some((old, changed)) = old_value {
            json.extend_from_slice(b",\"old_value\":");
            self.write_object(&mut json, old, changed);
        }
        json.extend_from_slice(b",\"headers\":{\"operation\":\"");
        json.extend_from_slice(match op {
            Operation::Insert => b"insert",
            Operation::Update => b"update",
            Operation::Delete => b"delete",
        });
        json.extend_from_slice(b"\",\"relation\":");
        json.extend_from_slice(&self.relation_json);
        if let Some((name, other_key)) = key_change {
            json.extend_from_slice(b",\"");
            json.extend_from_slice(name.as_bytes());
            json.extend_from_slice(b"\":");
            write_json_string(&mut json, other_key);
        }
        json.extend_from_slice(b",\"txids\":[");
        json.extend_from_slice(itoa::Buffer::new().format(ctx.xid).as_bytes());
        json.extend_from_slice(b"],\"lsn\":\"");
        json.extend_from_slice(itoa::Buffer::new().format(ctx.lsn).as_bytes());
        json.extend_from_slice(b"\",\"op_position\":");
        json.extend_from_slice(itoa::Buffer::new().format(ctx.op + op_delta).as_bytes());
        PendingMessage {
            offset: LogOffset::new(ctx.lsn, ctx.op + op_delta),
            key,
            op,
            json,
        }
    }

    fn write_object(&self, json: &mut Vec<u8>, row: &[Value], fields: &[usize]) {
        json.push(b'{');
        for (n, &f) in fields.iter().enumerate() {
            let (i, prefix) = &self.selected[f];
            if n > 0 {
                json.push(b',');
            }
            json.extend_from_slice(prefix);
            match row[*i].as_text() {
                Some(text) => write_json_string(json, text),
                None => json.extend_from_slice(b"null"),
            }
        }
        json.push(b'}');
    }
}

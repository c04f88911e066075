//! A replicated change as the Electric messages one shape stores: key, value, headers,
//! written through `syncline_core::wire`.
//!
//! Every stored message starts with `,` so that any run of messages is a valid continuation of
//! a JSON array: a response body is `[` + the stored bytes without their first comma + `]`.

use std::sync::Arc;

use syncline_core::wire::{self, KeyChange};
use syncline_core::{LogOffset, RelationDesc, Value};
use syncline_storage::Operation;

use crate::shapes::{Replica, ShapeDefinition};

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
        wire::close_headers(&mut self.json, last);
        self
    }
}

/// A message's bytes besides its key, row objects and relation: the separator, the field
/// names, the headers with their largest numbers, and the closing `,"last":true}}` (its buffer
/// is made this much larger than those, so that it is never grown).
const MESSAGE_FIXED_BYTES: usize = 224;

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
    /// What the shapes selecting the same columns of the table share.
    layout: Arc<EncoderLayout>,
    replica: Replica,
}

/// The part of a [`ChangeEncoder`] that depends only on the table and the selected columns:
/// one per column set of a table, shared by its shapes.
#[derive(Debug)]
pub struct EncoderLayout {
    /// Positions of the selected columns, with their `"name":` prefix.
    selected: Vec<(usize, Vec<u8>)>,
    /// Positions of the key columns, in key order.
    key_columns: Vec<usize>,
    /// Whether the table has a primary key (else deletes carry the whole row).
    has_pk: bool,
    /// `"schema"."table"`.
    key_prefix: Vec<u8>,
    /// `["schema","table"]`.
    relation_json: Vec<u8>,
}

impl EncoderLayout {
    /// The layout of the columns at `positions` of `relation`; `None` if a key column is
    /// missing.
    pub fn new(positions: &[usize], relation: &RelationDesc) -> Option<EncoderLayout> {
        let selected = positions
            .iter()
            .map(|&i| (i, wire::field_prefix(&relation.columns[i].name)))
            .collect();
        let pk = relation.primary_key();
        let has_pk = !pk.is_empty();
        let key_columns = if has_pk {
            pk.iter()
                .map(|c| relation.column(&c.name).map(|(i, _)| i))
                .collect::<Option<Vec<_>>>()?
        } else {
            let mut by_name = positions.to_vec();
            by_name.sort_by(|&a, &b| relation.columns[a].name.cmp(&relation.columns[b].name));
            by_name
        };
        Some(EncoderLayout {
            selected,
            key_columns,
            has_pk,
            key_prefix: wire::key_prefix(&relation.schema, &relation.name),
            relation_json: wire::relation_json(&relation.schema, &relation.name),
        })
    }
}

impl ChangeEncoder {
    /// An encoder for `definition` on `relation`, with a layout of its own; `None` if a
    /// selected column is missing.
    pub fn new(definition: &ShapeDefinition, relation: &RelationDesc) -> Option<ChangeEncoder> {
        let positions = definition.column_positions(relation)?;
        let layout = EncoderLayout::new(&positions, relation)?;
        Some(ChangeEncoder::with_layout(Arc::new(layout), definition))
    }

    /// An encoder for `definition` with the layout of its columns (see [`EncoderLayout::new`]).
    pub fn with_layout(layout: Arc<EncoderLayout>, definition: &ShapeDefinition) -> ChangeEncoder {
        ChangeEncoder {
            layout,
            replica: definition.replica,
        }
    }

    /// Its layout.
    pub fn layout(&self) -> &Arc<EncoderLayout> {
        &self.layout
    }

    /// Whether an update from `old` to `new` changes any selected or key column.
    pub fn touches(&self, old: &[Value], new: &[Value]) -> bool {
        self.layout
            .selected
            .iter()
            .map(|(i, _)| *i)
            .chain(self.layout.key_columns.iter().copied())
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
                    let delete = self.delete(old, Some((KeyChange::To, &new_key)), ctx, 0);
                    let insert = self.message(
                        Operation::Insert,
                        new,
                        &self.all_fields(),
                        None,
                        Some((KeyChange::From, &old_key)),
                        ctx,
                        1,
                    );
                    return vec![delete, insert];
                }
                let changed: Vec<usize> = self
                    .layout
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
        key_change: Option<(KeyChange, &[u8])>,
        ctx: ChangeContext,
        op_delta: u64,
    ) -> PendingMessage {
        let fields = if self.replica == Replica::Full || !self.layout.has_pk {
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
        (0..self.layout.selected.len()).collect()
    }

    /// Indexes into `selected` of the key columns that are selected, then of `extra`, in
    /// selection order.
    fn key_and(&self, extra: &[usize]) -> Vec<usize> {
        (0..self.layout.selected.len())
            .filter(|n| {
                self.layout
                    .key_columns
                    .contains(&self.layout.selected[*n].0)
                    || extra.contains(n)
            })
            .collect()
    }

    /// The row's key: `"schema"."table"/"v1"/"v2"` (`/` doubled inside values, `_` for NULL).
    pub fn key(&self, row: &[Value]) -> Vec<u8> {
        let mut key = self.layout.key_prefix.clone();
        for &i in &self.layout.key_columns {
            wire::push_key_part(&mut key, row[i].as_text());
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
        key_change: Option<(KeyChange, &[u8])>,
        ctx: ChangeContext,
        op_delta: u64,
    ) -> PendingMessage {
        let key = self.key(row);
        let mut json = Vec::with_capacity(
            MESSAGE_FIXED_BYTES
                + 2 * key.len()
                + self.layout.relation_json.len()
                + self.object_len(row, fields)
                + old_value.map_or(0, |(old, changed)| self.object_len(old, changed))
                + key_change.map_or(0, |(_, other)| 2 * other.len()),
        );
        json.push(wire::STORED_SEPARATOR);
        wire::write_message_start(&mut json, &key);
        self.write_object(&mut json, row, fields);
        if let Some((old, changed)) = old_value {
            json.extend_from_slice(wire::OLD_VALUE_FIELD);
            self.write_object(&mut json, old, changed);
        }
        wire::write_headers_start(&mut json, op, &self.layout.relation_json);
        if let Some((side, other_key)) = key_change {
            wire::write_key_change(&mut json, side, other_key);
        }
        wire::write_txn_headers(&mut json, ctx.xid, ctx.lsn, ctx.op + op_delta);
        PendingMessage {
            offset: LogOffset::new(ctx.lsn, ctx.op + op_delta),
            key,
            op,
            json,
        }
    }

    /// The bytes [`ChangeEncoder::write_object`] writes for `fields` of `row` when no value
    /// needs escaping.
    fn object_len(&self, row: &[Value], fields: &[usize]) -> usize {
        let values: usize = fields
            .iter()
            .map(|&f| {
                let (i, prefix) = &self.layout.selected[f];
                prefix.len() + row[*i].as_text().map_or(4, |t| t.len() + 2) + 1
            })
            .sum();
        values + 2
    }

    fn write_object(&self, json: &mut Vec<u8>, row: &[Value], fields: &[usize]) {
        json.push(b'{');
        for (n, &f) in fields.iter().enumerate() {
            let (i, prefix) = &self.layout.selected[f];
            if n > 0 {
                json.push(b',');
            }
            json.extend_from_slice(prefix);
            wire::write_value(json, row[*i].as_text());
        }
        json.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use syncline_core::{ColumnDesc, PgType, ReplicaIdentity, TypeKind};

    use super::*;
    use crate::shapes::LogMode;

    fn column(name: &str, pk_index: Option<usize>) -> ColumnDesc {
        ColumnDesc {
            name: name.into(),
            pg_type: PgType {
                oid: 25,
                name: "text".into(),
                kind: TypeKind::Base,
            },
            type_mod: -1,
            not_null: pk_index.is_some(),
            pk_index,
            array_dims: 0,
        }
    }

    fn encoder(replica: Replica, columns: &[&str]) -> ChangeEncoder {
        let relation = RelationDesc {
            oid: 16_384,
            schema: "public".into(),
            name: "items".into(),
            columns: vec![
                column("id", Some(0)),
                column("title", None),
                column("note", None),
            ],
            replica_identity: ReplicaIdentity::Full,
        };
        let definition = ShapeDefinition {
            relation_oid: relation.oid,
            schema: "public".into(),
            table: "items".into(),
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            explicit_columns: false,
            queryable: None,
            where_text: None,
            subquery_tables: Vec::new(),
            params: Vec::new(),
            where_sql: None,
            replica,
            compaction: false,
            log: LogMode::Full,
        };
        ChangeEncoder::new(&definition, &relation).unwrap()
    }

    fn row(values: [Option<&str>; 3]) -> Vec<Value> {
        values
            .iter()
            .map(|v| match v {
                Some(t) => Value::Text(bytes::Bytes::copy_from_slice(t.as_bytes())),
                None => Value::Null,
            })
            .collect()
    }

    const CTX: ChangeContext = ChangeContext {
        xid: 771,
        lsn: 24_011_432,
        op: 4,
    };

    /// The stored bytes of each message, headers closed (the last one marked last).
    fn stored(encoder: &ChangeEncoder, change: ShapeChange<'_>) -> Vec<String> {
        let messages = encoder.encode(change, CTX);
        let n = messages.len();
        messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| String::from_utf8(m.finish(i + 1 == n).json).unwrap())
            .collect()
    }

    #[test]
    fn inserts() {
        let new = row([Some("1"), Some("a \"b\""), None]);
        for replica in [Replica::Default, Replica::Full] {
            assert_eq!(
                stored(
                    &encoder(replica, &["id", "title", "note"]),
                    ShapeChange::Insert(&new)
                ),
                [
                    r#",{"key":"\"public\".\"items\"/\"1\"","value":{"id":"1","title":"a \"b\"","note":null},"headers":{"operation":"insert","relation":["public","items"],"txids":[771],"lsn":"24011432","op_position":4,"last":true}}"#
                ]
            );
        }
    }

    #[test]
    fn updates_carry_the_key_and_changed_columns_or_the_whole_row() {
        let old = row([Some("1"), Some("x"), Some("n")]);
        let new = row([Some("1"), Some("y"), Some("n")]);
        let change = ShapeChange::Update {
            old: &old,
            new: &new,
        };
        let columns = ["id", "title", "note"];
        assert_eq!(
            stored(&encoder(Replica::Default, &columns), change),
            [
                r#",{"key":"\"public\".\"items\"/\"1\"","value":{"id":"1","title":"y"},"headers":{"operation":"update","relation":["public","items"],"txids":[771],"lsn":"24011432","op_position":4,"last":true}}"#
            ]
        );
        assert_eq!(
            stored(&encoder(Replica::Full, &columns), change),
            [
                r#",{"key":"\"public\".\"items\"/\"1\"","value":{"id":"1","title":"y","note":"n"},"old_value":{"title":"x"},"headers":{"operation":"update","relation":["public","items"],"txids":[771],"lsn":"24011432","op_position":4,"last":true}}"#
            ]
        );
    }

    #[test]
    fn deletes_carry_the_key_or_the_whole_row() {
        let old = row([Some("1"), Some("x"), None]);
        let columns = ["id", "title", "note"];
        assert_eq!(
            stored(
                &encoder(Replica::Default, &columns),
                ShapeChange::Delete(&old)
            ),
            [
                r#",{"key":"\"public\".\"items\"/\"1\"","value":{"id":"1"},"headers":{"operation":"delete","relation":["public","items"],"txids":[771],"lsn":"24011432","op_position":4,"last":true}}"#
            ]
        );
        assert_eq!(
            stored(&encoder(Replica::Full, &columns), ShapeChange::Delete(&old)),
            [
                r#",{"key":"\"public\".\"items\"/\"1\"","value":{"id":"1","title":"x","note":null},"headers":{"operation":"delete","relation":["public","items"],"txids":[771],"lsn":"24011432","op_position":4,"last":true}}"#
            ]
        );
    }

    #[test]
    fn a_key_change_is_a_delete_and_an_insert() {
        let old = row([Some("1"), Some("x"), None]);
        let new = row([Some("2/b"), Some("x"), None]);
        let change = ShapeChange::Update {
            old: &old,
            new: &new,
        };
        assert_eq!(
            stored(&encoder(Replica::Default, &["id", "title"]), change),
            [
                r#",{"key":"\"public\".\"items\"/\"1\"","value":{"id":"1"},"headers":{"operation":"delete","relation":["public","items"],"key_change_to":"\"public\".\"items\"/\"2//b\"","txids":[771],"lsn":"24011432","op_position":4}}"#,
                r#",{"key":"\"public\".\"items\"/\"2//b\"","value":{"id":"2/b","title":"x"},"headers":{"operation":"insert","relation":["public","items"],"key_change_from":"\"public\".\"items\"/\"1\"","txids":[771],"lsn":"24011432","op_position":5,"last":true}}"#,
            ]
        );
    }

    #[test]
    fn an_update_of_unselected_columns_touches_nothing() {
        let old = row([Some("1"), Some("x"), Some("n")]);
        let new = row([Some("1"), Some("x"), Some("m")]);
        assert!(!encoder(Replica::Default, &["id", "title"]).touches(&old, &new));
        assert!(encoder(Replica::Default, &["id", "note"]).touches(&old, &new));
    }
}

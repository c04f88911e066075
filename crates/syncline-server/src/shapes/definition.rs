//! What a shape is: a table, a checked where clause, selected columns, replica mode and log mode.

use serde::{Deserialize, Serialize};
use syncline_core::RelationDesc;
use syncline_where::Where;

/// `replica`: what updates and deletes carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Replica {
    /// Updates carry the key and changed columns; deletes the key.
    #[default]
    Default,
    /// Updates carry the whole new row and the old values of changed columns; deletes the
    /// whole old row.
    Full,
}

/// `log`: whether the shape starts with a snapshot of the matching rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogMode {
    /// Initial snapshot, then changes.
    #[default]
    Full,
    /// Changes only: the snapshot holds no rows but still ends with `snapshot-end`.
    ChangesOnly,
}

/// A shape's definition as stored and compared; two requests with equal identities share a
/// shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShapeDefinition {
    /// `pg_class.oid` of the table when the shape was made.
    pub relation_oid: u32,
    /// Schema name, unquoted.
    pub schema: String,
    /// Table name, unquoted.
    pub table: String,
    /// Selected columns in table order (every column when the request named none).
    pub columns: Vec<String>,
    /// Whether the request listed columns explicitly (omitting `columns` is a different shape
    /// from listing them all); `queryable_columns` lists them too.
    pub explicit_columns: bool,
    /// `queryable_columns`: the only columns subset where clauses and ordering may use.
    #[serde(default)]
    pub queryable: Option<Vec<String>>,
    /// The where clause as the client wrote it, if any.
    pub where_text: Option<String>,
    /// Values of `$1`, `$2`, … in the where clause.
    pub params: Vec<String>,
    /// The where clause rendered canonically from the checked expression (params substituted as
    /// typed literals); what the snapshot runs and what identity compares.
    pub where_sql: Option<String>,
    /// Replica mode.
    pub replica: Replica,
    /// Successive updates of a key in the older chunks are merged (`experimental_compaction`).
    /// Not part of the identity: a compacted log gives every reader the same final state.
    #[serde(default)]
    pub compaction: bool,
    /// Log mode.
    pub log: LogMode,
    /// The tables the where clause's subqueries read, as they were when the shape was made
    /// (empty without subqueries).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subquery_tables: Vec<RelationDesc>,
}

impl ShapeDefinition {
    /// The identity two requests must share to share the shape: everything but the raw where
    /// text and params, which `where_sql` stands for.
    pub fn identity(&self) -> String {
        let mut columns = self.columns.clone();
        columns.sort();
        let mut identity = serde_json::json!([
            self.relation_oid,
            self.schema,
            self.table,
            columns,
            self.explicit_columns,
            self.queryable.as_ref().map(|q| {
                let mut q = q.clone();
                q.sort();
                q
            }),
            self.where_sql,
            self.replica,
            self.log,
        ]);
        if !self.subquery_tables.is_empty() {
            // A subquery table dropped and made again under its name is another shape.
            let oids: Vec<u32> = self.subquery_tables.iter().map(|r| r.oid).collect();
            if let Some(list) = identity.as_array_mut() {
                list.push(serde_json::json!(oids));
            }
        }
        identity.to_string()
    }

    /// The where clause checked against `relation` (and the subquery tables as they were when
    /// the shape was made); `None` without one.
    pub fn checked_where(
        &self,
        relation: &RelationDesc,
    ) -> Option<Result<Where, syncline_where::WhereError>> {
        let text = self.where_text.as_ref()?;
        Some(Where::with_tables(
            text,
            relation,
            &self.params,
            &|table: &syncline_where::TableRef| {
                self.subquery_tables
                    .iter()
                    .find(|r| r.schema == table.schema && r.name == table.name)
                    .cloned()
            },
        ))
    }

    /// Whether the shape, made on `made_on`, still fits the table as it is `now`: same name,
    /// same primary key, and its selected and where-clause columns unchanged in name, type and
    /// modifier. Other columns may come and go.
    pub fn fits(&self, made_on: &RelationDesc, now: &RelationDesc) -> bool {
        let key = |r: &RelationDesc| -> Vec<String> {
            r.primary_key().iter().map(|c| c.name.clone()).collect()
        };
        if (&made_on.schema, &made_on.name) != (&now.schema, &now.name) || key(made_on) != key(now)
        {
            return false;
        }
        let where_columns = match self.checked_where(made_on) {
            None => Vec::new(),
            Some(Ok(w)) => w.columns(),
            Some(Err(_)) => return false,
        };
        let same = |name: &str| match (made_on.column(name), now.column(name)) {
            (Some((_, a)), Some((_, b))) => {
                (a.pg_type.oid, &a.pg_type.name, a.type_mod)
                    == (b.pg_type.oid, &b.pg_type.name, b.type_mod)
            }
            _ => false,
        };
        self.columns.iter().all(|c| same(c))
            && where_columns
                .iter()
                .all(|&i| same(&made_on.columns[i].name))
    }

    /// The table as subset where clauses and ordering may see it: only the queryable columns,
    /// when the shape names them.
    pub fn queryable_relation(&self, relation: &RelationDesc) -> RelationDesc {
        let mut visible = relation.clone();
        if let Some(queryable) = &self.queryable {
            visible.columns.retain(|c| queryable.contains(&c.name));
        }
        visible
    }

    /// Positions in `relation.columns` of the selected columns, `None` if one is missing.
    pub fn column_positions(&self, relation: &RelationDesc) -> Option<Vec<usize>> {
        self.columns
            .iter()
            .map(|name| relation.column(name).map(|(i, _)| i))
            .collect()
    }
}

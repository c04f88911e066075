//! The snapshot query: which columns, how each is selected, rendered as SQL.

use syncline_core::RelationDesc;

use super::text::TextDecoder;
use crate::error::{PgError, PgResult};
use syncline_core::sql::{qualified, quote_ident};

/// One selected column and how its binary value is read.
#[derive(Debug, Clone)]
pub struct SnapshotColumn {
    /// Column name.
    pub name: String,
    /// Its decoder; [`TextDecoder::Text`] with `cast_to_text` for types without a binary decoder.
    pub decoder: TextDecoder,
    /// Selected as `col::text` because the type has no binary decoder here.
    pub cast_to_text: bool,
}

/// What a snapshot selects: a table, some of its columns, and an already-checked WHERE.
#[derive(Debug, Clone)]
pub struct SnapshotQuery {
    /// Schema name.
    pub schema: String,
    /// Table name.
    pub table: String,
    /// Selected columns in output order.
    pub columns: Vec<SnapshotColumn>,
    /// Positions in `columns` of the key columns, in key order: the primary key, or every
    /// selected column sorted by name for a table without one.
    pub key_columns: Vec<usize>,
    /// WHERE condition rendered by the where-clause checker (never raw user text), if any.
    pub where_sql: Option<String>,
    /// A condition applied before everything else (also rendered by the checker): rows it
    /// rejects never reach `where_sql`, `order_by_sql` or their errors. A subset snapshot's
    /// shape condition, so a client's subset clause cannot see, or fail on, rows outside its
    /// shape.
    pub within_sql: Option<String>,
    /// `ORDER BY` list rendered by the where-clause checker (never raw user text), if any.
    pub order_by_sql: Option<String>,
    /// `LIMIT`, if any.
    pub limit: Option<u64>,
    /// `OFFSET`, if any.
    pub offset: Option<u64>,
    /// A text expression (rendered by the server from checked expressions, never user text)
    /// selected after the columns: a fragment of JSON object members added to each row's
    /// headers (a subquery shape's `tags` and `active_conditions`).
    pub headers_sql: Option<String>,
    /// Conditions (rendered by the where-clause checker, never user text) selected as boolean
    /// columns after everything else, for a snapshot several shapes share: each row tells
    /// which shapes it is in ([`SnapshotQuery::shared_by`]).
    pub selectors: Vec<String>,
}

impl SnapshotQuery {
    /// Selects `columns` (all when `None`) of `relation`, filtered by `where_sql`.
    pub fn new(
        relation: &RelationDesc,
        columns: Option<&[String]>,
        where_sql: Option<String>,
    ) -> PgResult<Self> {
        let selected: Vec<&syncline_core::ColumnDesc> = match columns {
            None => relation.columns.iter().collect(),
            Some(names) => names
                .iter()
                .map(|n| {
                    relation.column(n).map(|(_, c)| c).ok_or_else(|| {
                        PgError::Config(format!("column {n:?} not found on the table"))
                    })
                })
                .collect::<PgResult<_>>()?,
        };
        let columns: Vec<SnapshotColumn> = selected
            .iter()
            .map(|c| match TextDecoder::for_type(&c.pg_type) {
                Some(decoder) => SnapshotColumn {
                    name: c.name.clone(),
                    decoder,
                    cast_to_text: false,
                },
                None => SnapshotColumn {
                    name: c.name.clone(),
                    decoder: TextDecoder::Text,
                    cast_to_text: true,
                },
            })
            .collect();
        let position = |name: &str| columns.iter().position(|c| c.name == name);
        let pk = relation.primary_key();
        let key_columns = if pk.is_empty() {
            let mut names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
            names.sort_unstable();
            names.into_iter().filter_map(position).collect()
        } else {
            pk.iter()
                .map(|c| {
                    position(&c.name).ok_or_else(|| {
                        PgError::Config(format!("primary key column {:?} is not selected", c.name))
                    })
                })
                .collect::<PgResult<_>>()?
        };
        Ok(SnapshotQuery {
            schema: relation.schema.clone(),
            table: relation.name.clone(),
            columns,
            key_columns,
            where_sql,
            within_sql: None,
            order_by_sql: None,
            limit: None,
            offset: None,
            headers_sql: None,
            selectors: Vec::new(),
        })
    }

    /// The same query with rows sorted by `order_by_sql` (rendered by the where-clause checker)
    /// and cut by `limit` and `offset`: a subset snapshot.
    pub fn ordered(
        mut self,
        order_by_sql: Option<String>,
        limit: Option<u64>,
        offset: Option<u64>,
    ) -> Self {
        self.order_by_sql = order_by_sql;
        self.limit = limit;
        self.offset = offset;
        self
    }

    /// The same query on only the rows `within_sql` (rendered by the where-clause checker)
    /// selects: `where_sql` is evaluated only on those (inside `CASE WHEN within THEN where`,
    /// whose branches Postgres evaluates only as needed), while `within_sql` alone still
    /// guides the plan (an index on it is used).
    pub fn within(mut self, within_sql: Option<String>) -> Self {
        self.within_sql = within_sql;
        self
    }

    /// The same query with `headers_sql` selected after the columns: each row's headers get its
    /// value (JSON object members, each starting with `,`).
    pub fn with_headers(mut self, headers_sql: Option<String>) -> Self {
        self.headers_sql = headers_sql;
        self
    }

    /// The same query for several shapes at once, one condition each (`None`: every row):
    /// it selects the rows any of them has, and after the other columns, each condition's
    /// value ([`SnapshotQuery::selects`] reads them). Replaces `where_sql`.
    pub fn shared_by(mut self, conditions: &[Option<&str>]) -> Self {
        assert!(
            self.where_sql.is_none() && self.within_sql.is_none(),
            "a shared snapshot's conditions are its shapes'"
        );
        self.selectors = conditions
            .iter()
            .map(|c| c.unwrap_or("true").to_owned())
            .collect();
        if conditions.iter().all(Option::is_some) {
            let any: Vec<String> = self.selectors.iter().map(|c| format!("({c})")).collect();
            self.where_sql = Some(any.join(" OR "));
        }
        self
    }

    /// Whether `row` is in the shape of condition `i` of [`SnapshotQuery::shared_by`] (its
    /// condition is true, not false or null).
    pub fn selects(&self, row: &super::RowRef<'_>, i: usize) -> bool {
        let first = self.columns.len() + usize::from(self.headers_sql.is_some());
        row.get(first + i) == Some(&[1][..])
    }

    /// `SELECT …` for the rows (the body of the COPY).
    pub fn select_sql(&self) -> String {
        let list: Vec<String> = self
            .columns
            .iter()
            .map(|c| {
                if c.cast_to_text {
                    format!("{}::text", quote_ident(&c.name))
                } else {
                    quote_ident(&c.name)
                }
            })
            .collect();
        let mut list = list;
        if let Some(headers) = &self.headers_sql {
            list.push(format!("({headers})::text"));
        }
        list.extend(self.selectors.iter().map(|c| format!("({c})")));
        let mut sql = format!(
            "SELECT {} FROM {}",
            list.join(", "),
            qualified(&self.schema, &self.table)
        );
        match (&self.within_sql, &self.where_sql) {
            (None, None) => {}
            (None, Some(cond)) | (Some(cond), None) => sql.push_str(&format!(" WHERE ({cond})")),
            (Some(within), Some(cond)) => sql.push_str(&format!(
                " WHERE ({within}) AND CASE WHEN ({within}) THEN ({cond}) ELSE false END"
            )),
        }
        if let Some(order_by) = &self.order_by_sql {
            sql.push_str(&format!(" ORDER BY {order_by}"));
        }
        if let Some(limit) = self.limit {
            sql.push_str(&format!(" LIMIT {limit}"));
        }
        if let Some(offset) = self.offset {
            sql.push_str(&format!(" OFFSET {offset}"));
        }
        sql
    }

    /// The full `COPY (SELECT …) TO STDOUT (FORMAT binary)` statement.
    pub fn copy_sql(&self) -> String {
        format!("COPY ({}) TO STDOUT (FORMAT binary)", self.select_sql())
    }
}

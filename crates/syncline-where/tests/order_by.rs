//! A subset's `order_by=1` against Electric's query as the oracle: Electric runs
//! `SELECT <message line> FROM t … ORDER BY 1`, a position in a select list of one column (each
//! row's JSON line, which begins with its key), so Syncline's rendering of `1` must put the rows
//! of its own query (`SELECT <columns> FROM t … ORDER BY …`) in the same order, in Postgres.

mod common;

use syncline_core::relation::{ColumnDesc, PgType, RelationDesc, ReplicaIdentity, TypeKind};
use syncline_where::OrderBy;
use tokio_postgres::{Client, SimpleQueryMessage};

/// Tables with a composite primary key and without one, keyed by values that sort differently
/// as numbers, as text and as JSON strings (`/`, `"`, `\`, spaces, non-ASCII, NULL).
const TABLES_SQL: &str = r#"
CREATE TABLE k (a int4, b text, c int4, PRIMARY KEY (a, b));
INSERT INTO k SELECT a, b, a FROM unnest(ARRAY[1, 2, 10, -1, 100]) a,
    unnest(ARRAY['a', 'a/b', 'a"b', 'A', 'é', 'a b', '', 'a\b', 'ab', 'a//']) b;
CREATE TABLE nopk (x int4, y text);
INSERT INTO nopk VALUES (1, 'a'), (10, NULL), (NULL, 'b'), (2, 'a/'), (1, 'a'), (NULL, NULL);
"#;

fn column(name: &str, ty: &str, pk_index: Option<usize>) -> ColumnDesc {
    ColumnDesc {
        name: name.into(),
        pg_type: PgType {
            oid: 0,
            name: ty.into(),
            kind: TypeKind::Base,
        },
        type_mod: -1,
        not_null: pk_index.is_some(),
        pk_index,
        array_dims: 0,
    }
}

fn relation(name: &str, columns: Vec<ColumnDesc>) -> RelationDesc {
    RelationDesc {
        oid: 1,
        schema: "public".into(),
        name: name.into(),
        columns,
        replica_identity: ReplicaIdentity::Full,
    }
}

/// Electric's message line for a row, as its snapshot query builds it: key, value of every
/// column, headers.
fn electric_line(table: &str, key_columns: &[&str], columns: &[&str]) -> String {
    let key: Vec<String> = key_columns
        .iter()
        .map(|c| format!(r#"coalesce('"' || replace("{c}"::text, '/', '//') || '"', '_')"#))
        .collect();
    let value: Vec<String> = columns
        .iter()
        .map(|c| format!(r#"'"{c}":' || coalesce(to_json("{c}"::text)::text, 'null')"#))
        .collect();
    format!(
        r#"'{{' || '"key":' || to_json('"public"."{table}"' || '/' || {}) || ',' || '"value":{{' || {} || '}}' || ',' || '"headers":{{"operation":"insert","relation":["public","{table}"]}}' || '}}'"#,
        key.join(" || '/' || "),
        value.join(" || ',' || ")
    )
}

async fn rows(client: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    let messages = client.simple_query(sql).await.expect(sql);
    messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_string))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

#[test]
fn position_one_orders_rows_as_electric_does() {
    common::with_server("where_order_by", async |client| {
        client.batch_execute(TABLES_SQL).await.expect("tables");
        let k = relation(
            "k",
            vec![
                column("a", "int4", Some(0)),
                column("b", "text", Some(1)),
                column("c", "int4", None),
            ],
        );
        let nopk = relation(
            "nopk",
            vec![column("x", "int4", None), column("y", "text", None)],
        );
        let cases = [
            (
                &k,
                "a, b",
                electric_line("k", &["a", "b"], &["a", "b", "c"]),
            ),
            (
                &nopk,
                "x, y",
                electric_line("nopk", &["x", "y"], &["x", "y"]),
            ),
        ];
        for (relation, columns, line) in cases {
            for direction in ["", " DESC"] {
                let order_by =
                    OrderBy::new(&format!("1{direction}"), relation, &[]).expect("order by 1");
                let table = &relation.name;
                // Position 1 is the line whatever follows it in the select list.
                let electric =
                    format!("SELECT {line}, {columns} FROM {table} ORDER BY 1{direction}");
                let electric: Vec<Vec<Option<String>>> = rows(client, &electric)
                    .await
                    .into_iter()
                    .map(|row| row[1..].to_vec())
                    .collect();
                let syncline = format!("SELECT {columns} FROM {table} ORDER BY {}", order_by.sql());
                assert_eq!(
                    rows(client, &syncline).await,
                    electric,
                    "{table} ORDER BY 1{direction}: {syncline}"
                );
            }
        }
    });
}

//! Publication and replica-identity management: which tables the replication stream carries.

use tokio_postgres::Client;

use crate::error::PgResult;
use syncline_core::sql::{qualified, quote_ident};

/// Creates the (initially empty) publication `name` if it does not exist. It publishes a
/// partitioned table's changes as the root table's (`publish_via_partition_root`), which an
/// existing publication is switched to as well.
pub async fn ensure_publication(client: &Client, name: &str) -> PgResult<()> {
    let via_root: Option<bool> = client
        .query_opt(
            "SELECT pubviaroot FROM pg_publication WHERE pubname = $1",
            &[&name],
        )
        .await?
        .map(|row| row.get(0));
    match via_root {
        None => {
            client
                .batch_execute(&format!(
                    "CREATE PUBLICATION {} WITH (publish_via_partition_root = true)",
                    quote_ident(name)
                ))
                .await?;
            tracing::info!(publication = name, "created publication");
        }
        Some(false) => {
            client
                .batch_execute(&format!(
                    "ALTER PUBLICATION {} SET (publish_via_partition_root = true)",
                    quote_ident(name)
                ))
                .await?;
        }
        Some(true) => {}
    }
    Ok(())
}

/// Adds `schema.table` to the publication unless it is there, and sets `REPLICA IDENTITY FULL`
/// when `replica_identity_full` is asked for and not yet set. Runs in one transaction.
pub async fn add_table(
    client: &Client,
    publication: &str,
    schema: &str,
    table: &str,
    replica_identity_full: bool,
) -> PgResult<()> {
    client.batch_execute("BEGIN").await?;
    let result = add_table_in_txn(client, publication, schema, table, replica_identity_full).await;
    client
        .batch_execute(if result.is_ok() { "COMMIT" } else { "ROLLBACK" })
        .await?;
    result
}

async fn add_table_in_txn(
    client: &Client,
    publication: &str,
    schema: &str,
    table: &str,
    full: bool,
) -> PgResult<()> {
    let name = qualified(schema, table);
    // The table itself, not the leaves pg_publication_tables lists for a partitioned one.
    let published = client
        .query_opt(
            "SELECT 1 FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid \
             WHERE p.pubname = $1 AND r.prrelid = $2::text::regclass",
            &[&publication, &name],
        )
        .await?
        .is_some();
    if !published {
        client
            .batch_execute(&format!(
                "ALTER PUBLICATION {} ADD TABLE {}",
                quote_ident(publication),
                qualified(schema, table)
            ))
            .await?;
    }
    if full {
        set_replica_identity_full(client, &name).await?;
    }
    Ok(())
}

/// Sets `REPLICA IDENTITY FULL` on the table `name` (quoted, qualified) and, for a partitioned
/// table, on every partition (Postgres does not pass the setting down), where not yet set.
pub async fn set_replica_identity_full(client: &Client, name: &str) -> PgResult<()> {
    let rows = client
        .query(
            "SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname) FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE (c.oid = $1::text::regclass \
                    OR c.oid IN (SELECT relid FROM pg_partition_tree($1::text::regclass))) \
               AND c.relreplident <> 'f' AND c.relkind IN ('r', 'p')",
            &[&name],
        )
        .await?;
    for row in rows {
        let member: String = row.get(0);
        client
            .batch_execute(&format!("ALTER TABLE {member} REPLICA IDENTITY FULL"))
            .await?;
    }
    Ok(())
}

/// The OIDs of the partitions of the table `oid`, at every level (none for a plain table).
pub async fn partitions(client: &Client, oid: u32) -> PgResult<Vec<u32>> {
    let rows = client
        .query(
            "SELECT relid::oid FROM pg_partition_tree($1::oid::regclass) WHERE relid <> $1::oid::regclass ORDER BY 1",
            &[&oid],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Removes `schema.table` from the publication if it is there.
pub async fn remove_table(
    client: &Client,
    publication: &str,
    schema: &str,
    table: &str,
) -> PgResult<()> {
    let published = published_tables(client, publication).await?;
    if published.iter().any(|(s, t)| s == schema && t == table) {
        client
            .batch_execute(&format!(
                "ALTER PUBLICATION {} DROP TABLE {}",
                quote_ident(publication),
                qualified(schema, table)
            ))
            .await?;
    }
    Ok(())
}

/// The `(schema, table)` pairs the publication carries.
pub async fn published_tables(
    client: &Client,
    publication: &str,
) -> PgResult<Vec<(String, String)>> {
    let rows = client
        .query("SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1, 2", &[&publication])
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

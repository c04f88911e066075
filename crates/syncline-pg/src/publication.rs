//! Publication and replica-identity management: which tables the replication stream carries.

use tokio_postgres::Client;

use crate::error::PgResult;
use crate::ident::{qualified, quote_ident};

/// Creates the (initially empty) publication `name` if it does not exist.
pub async fn ensure_publication(client: &Client, name: &str) -> PgResult<()> {
    let exists = client
        .query_opt("SELECT 1 FROM pg_publication WHERE pubname = $1", &[&name])
        .await?
        .is_some();
    if !exists {
        client
            .batch_execute(&format!("CREATE PUBLICATION {}", quote_ident(name)))
            .await?;
        tracing::info!(publication = name, "created publication");
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
    let published = client
        .query_opt(
            "SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3",
            &[&publication, &schema, &table],
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
        let identity: i8 = client
            .query_one(
                "SELECT c.relreplident::\"char\" FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = $2",
                &[&schema, &table],
            )
            .await?
            .get(0);
        if identity as u8 != b'f' {
            client
                .batch_execute(&format!(
                    "ALTER TABLE {} REPLICA IDENTITY FULL",
                    qualified(schema, table)
                ))
                .await?;
        }
    }
    Ok(())
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

//! Publication membership, replica identity and slots are managed idempotently.

use syncline_pg::publication::{add_table, ensure_publication, published_tables, remove_table};
use syncline_pg::replication::{drop_slot, ensure_slot};
use syncline_pg::ConnConfig;
use syncline_testkit::PgCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_join_and_leave_the_publication_once() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let config = ConnConfig::parse(&cluster.connection_string("postgres")).unwrap();
    let client = syncline_pg::connect(&config).await.unwrap();
    client.batch_execute(r#"CREATE SCHEMA "My Schema"; CREATE TABLE "My Schema"."Items" (id int PRIMARY KEY); CREATE TABLE plain (id int PRIMARY KEY)"#).await.unwrap();
    for _ in 0..2 {
        ensure_publication(&client, "pub").await.unwrap();
        add_table(&client, "pub", "My Schema", "Items", true)
            .await
            .unwrap();
        add_table(&client, "pub", "public", "plain", false)
            .await
            .unwrap();
    }
    let tables = published_tables(&client, "pub").await.unwrap();
    assert_eq!(
        tables,
        [
            ("My Schema".to_string(), "Items".to_string()),
            ("public".to_string(), "plain".to_string())
        ]
    );
    let identity = |table: &'static str| {
        let client = &client;
        async move {
            let row = client
                .query_one(
                    "SELECT relreplident::text FROM pg_class WHERE relname = $1",
                    &[&table],
                )
                .await
                .unwrap();
            row.get::<_, String>(0)
        }
    };
    assert_eq!(identity("Items").await, "f");
    assert_eq!(identity("plain").await, "d");
    remove_table(&client, "pub", "My Schema", "Items")
        .await
        .unwrap();
    remove_table(&client, "pub", "My Schema", "Items")
        .await
        .unwrap();
    assert_eq!(
        published_tables(&client, "pub").await.unwrap(),
        [("public".to_string(), "plain".to_string())]
    );
    let missing = add_table(&client, "pub", "public", "no_such_table", false).await;
    assert!(missing.is_err(), "adding a missing table fails");
    assert_eq!(
        published_tables(&client, "pub").await.unwrap().len(),
        1,
        "and changes nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_are_created_once_and_report_where_they_resume() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let config = ConnConfig::parse(&cluster.connection_string("postgres")).unwrap();
    let first = ensure_slot(&config, "s").await.unwrap();
    assert!(first.created);
    let second = ensure_slot(&config, "s").await.unwrap();
    assert!(!second.created);
    assert_eq!(second.resume_lsn, first.resume_lsn);
    drop_slot(&config, "s").await.unwrap();
    drop_slot(&config, "s").await.unwrap();
    assert!(ensure_slot(&config, "s").await.unwrap().created);
}

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
    // The tests name their tables unqualified; Syncline's sessions search pg_catalog first.
    client
        .batch_execute("SET search_path = public")
        .await
        .unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_table_is_published_through_its_root() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let config = ConnConfig::parse(&cluster.connection_string("postgres")).unwrap();
    let client = syncline_pg::connect(&config).await.unwrap();
    client
        .batch_execute("SET search_path = public")
        .await
        .unwrap();
    client
        .batch_execute(
            "CREATE TABLE m (id int, r text, PRIMARY KEY (id, r)) PARTITION BY LIST (r);
             CREATE TABLE m_a PARTITION OF m FOR VALUES IN ('a');
             CREATE TABLE m_b PARTITION OF m FOR VALUES IN ('b') PARTITION BY LIST (id);
             CREATE TABLE m_b1 PARTITION OF m_b FOR VALUES IN (1);
             CREATE PUBLICATION old_pub;",
        )
        .await
        .unwrap();
    for _ in 0..2 {
        ensure_publication(&client, "old_pub").await.unwrap();
        add_table(&client, "old_pub", "public", "m", true)
            .await
            .unwrap();
    }
    let via_root: bool = client
        .query_one(
            "SELECT pubviaroot FROM pg_publication WHERE pubname = 'old_pub'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(via_root, "an existing publication is switched over");
    let identities: Vec<(String, String)> = client
        .query(
            "SELECT relname::text, relreplident::text FROM pg_class WHERE relname LIKE 'm%' ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .filter(|(name, _): &(String, String)| !name.ends_with("_pkey"))
        .collect();
    assert!(identities.iter().all(|(_, i)| i == "f"), "{identities:?}");
    assert_eq!(identities.len(), 4);
}

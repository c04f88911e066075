use syncline_testkit::PgCluster;

#[tokio::test]
async fn starts_with_logical_wal_and_cleans_up() {
    let cluster = PgCluster::start();
    let data = cluster.data_dir();
    let client = cluster.connect("postgres").await;
    let row = client.query_one("SHOW wal_level", &[]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "logical");
    let db = cluster.create_database("t").await;
    let other = cluster.connect(&db).await;
    other
        .batch_execute("CREATE TABLE x (id int primary key)")
        .await
        .unwrap();
    drop(client);
    drop(other);
    drop(cluster);
    assert!(!data.exists(), "cluster directory removed on drop");
}

#[test]
fn clusters_run_side_by_side() {
    let a = PgCluster::start();
    let b = PgCluster::start();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.data_dir(), b.data_dir());
}

#[test]
fn stops_even_when_a_test_panics() {
    let data = std::sync::Mutex::new(None);
    let result = std::panic::catch_unwind(|| {
        let cluster = PgCluster::start();
        *data.lock().unwrap() = Some(cluster.data_dir());
        panic!("test failure inside a cluster's lifetime");
    });
    assert!(result.is_err());
    let data = data.lock().unwrap().take().unwrap();
    assert!(!data.exists(), "cluster directory removed after panic");
}

//! TLS to Postgres with libpq's `sslmode` semantics, for the three kinds of connection:
//! ordinary ones (tokio-postgres), query connections and the replication stream (our own wire
//! client), against private clusters with `ssl=on` and certificates made with `openssl`.

use std::time::Duration;

use syncline_pg::publication::{add_table, ensure_publication};
use syncline_pg::replication::{ensure_slot, PgOutput, ReplicationStream, StreamOptions};
use syncline_pg::wire::{Mode, WireConnection};
use syncline_pg::{ConnConfig, PgError};
use syncline_testkit::{ClusterOptions, PgCluster, TestCa};

/// Whether the session of each client is encrypted, as `pg_stat_ssl` says; errors as they come.
async fn encrypted(url: &str) -> [Result<bool, PgError>; 2] {
    let config = match ConnConfig::parse(url) {
        Ok(config) => config,
        Err(e) => panic!("{url}: {e}"),
    };
    let ssl = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()";
    let client = async {
        let client = syncline_pg::connect(&config).await?;
        Ok::<bool, PgError>(client.query_one(ssl, &[]).await?.get(0))
    }
    .await;
    let wire = async {
        let mut conn = WireConnection::connect(&config, "syncline-test", Mode::Query).await?;
        let rows = conn.simple_query(ssl).await?;
        Ok(rows[0][0].as_deref() == Some("t"))
    }
    .await;
    [client, wire]
}

/// Both clients connect, encrypted.
async fn assert_encrypted(url: &str) {
    for (client, result) in ["tokio-postgres", "wire"].iter().zip(encrypted(url).await) {
        match result {
            Ok(ssl) => assert!(ssl, "{client}: {url}: not encrypted"),
            Err(e) => panic!("{client}: {url}: {e}"),
        }
    }
}

/// Both clients fail; returns their errors.
async fn assert_refused(url: &str) -> [PgError; 2] {
    encrypted(url).await.map(|result| match result {
        Ok(ssl) => panic!("{url}: connected (ssl {ssl})"),
        Err(e) => e,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmodes_connect_encrypted_and_check_what_they_promise() {
    let cluster =
        tokio::task::spawn_blocking(|| PgCluster::start_with(&ClusterOptions::default().tls()))
            .await
            .unwrap();
    let port = cluster.port();
    let root = cluster.ca_cert().unwrap().to_str().unwrap().to_owned();
    let other_dir = tempfile::tempdir().unwrap();
    let other_root = TestCa::new(other_dir.path(), "other")
        .cert()
        .to_str()
        .unwrap()
        .to_owned();
    // The server's certificate names `localhost` only.
    let url =
        |host: &str, options: &str| format!("postgres://postgres@{host}:{port}/postgres?{options}");

    assert_encrypted(&url("127.0.0.1", "sslmode=require")).await;
    assert_encrypted(&url("127.0.0.1", "sslmode=prefer")).await;
    assert_encrypted(&url("127.0.0.1", "")).await;
    assert_encrypted(&url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={root}"),
    ))
    .await;
    // verify-ca checks the chain, not the name.
    assert_encrypted(&url(
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={root}"),
    ))
    .await;
    assert_encrypted(&url(
        "127.0.0.1",
        &format!("sslmode=require&sslrootcert={root}"),
    ))
    .await;
    // Key-value strings too.
    assert_encrypted(&format!(
        "host=localhost port={port} user=postgres sslmode=verify-full sslrootcert='{root}'"
    ))
    .await;

    for e in assert_refused(&url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={other_root}"),
    ))
    .await
    {
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("could not connect to localhost:{port}: TLS: handshake failed: invalid peer certificate: "))
                && text.ends_with("UnknownIssuer (no CA of sslrootcert signed it)"),
            "{text}"
        );
        assert!(!e.is_transient());
    }
    // With a root certificate, require checks the chain as verify-ca does.
    for e in assert_refused(&url(
        "127.0.0.1",
        &format!("sslmode=require&sslrootcert={other_root}"),
    ))
    .await
    {
        assert!(e.to_string().contains("UnknownIssuer"), "{e}");
    }
    for e in assert_refused(&url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={root}"),
    ))
    .await
    {
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("could not connect to 127.0.0.1:{port}: TLS: handshake failed: invalid peer certificate: "))
                && text.contains("not valid for name \"127.0.0.1\""),
            "{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_server_allows_decides_between_tls_and_not() {
    let options = ClusterOptions::default().tls().hba(
        "local all all trust\nlocal replication all trust\n\
         hostssl all scram 127.0.0.1/32 scram-sha-256\n\
         hostssl all all 127.0.0.1/32 trust\nhostssl replication all 127.0.0.1/32 trust\n",
    );
    let ssl_only = tokio::task::spawn_blocking(move || PgCluster::start_with(&options))
        .await
        .unwrap();
    let url = |cluster: &PgCluster, mode: &str| {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode={mode}",
            cluster.port()
        )
    };
    for e in assert_refused(&url(&ssl_only, "disable")).await {
        assert_eq!(
            e.to_string(),
            format!(
                "could not connect to 127.0.0.1:{}: no pg_hba.conf entry for host \"127.0.0.1\", user \"postgres\", database \"postgres\", no encryption (SQLSTATE 28000)",
                ssl_only.port()
            )
        );
    }
    assert_encrypted(&url(&ssl_only, "prefer")).await;
    // The error of the session over TLS, not the one of the attempt without.
    for e in assert_refused(&format!(
        "postgres://postgres@127.0.0.1:{}/no_such_db?sslmode=prefer",
        ssl_only.port()
    ))
    .await
    {
        assert_eq!(e.sqlstate(), Some("3D000"), "{e}");
    }
    // Password authentication over TLS (tokio-postgres binds SCRAM to the channel).
    ssl_only
        .connect("postgres")
        .await
        .batch_execute(
            "SET password_encryption = 'scram-sha-256'; CREATE ROLE scram LOGIN PASSWORD 'p w'",
        )
        .await
        .unwrap();
    assert_encrypted(&format!(
        "postgres://scram:p%20w@127.0.0.1:{}/postgres?sslmode=require",
        ssl_only.port()
    ))
    .await;

    // A server that takes TLS but refuses sessions over it: prefer tries again without.
    let options = ClusterOptions::default()
        .tls()
        .hba("local all all trust\nhostnossl all all 127.0.0.1/32 trust\n");
    let no_ssl_sessions = tokio::task::spawn_blocking(move || PgCluster::start_with(&options))
        .await
        .unwrap();
    for (client, result) in ["tokio-postgres", "wire"]
        .iter()
        .zip(encrypted(&url(&no_ssl_sessions, "prefer")).await)
    {
        assert!(
            !result.unwrap_or_else(|e| panic!("{client}: {e}")),
            "{client}"
        );
    }
    for e in assert_refused(&url(&no_ssl_sessions, "require")).await {
        assert!(
            e.to_string().contains("SSL encryption (SQLSTATE 28000)"),
            "{e}"
        );
    }

    // A server without TLS: prefer goes on without, require fails.
    let plain = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    for result in encrypted(&url(&plain, "prefer")).await {
        assert!(!result.unwrap());
    }
    for e in assert_refused(&url(&plain, "require")).await {
        assert!(e.to_string().contains("does not support TLS"), "{e}");
        assert!(!e.is_transient());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_streams_over_tls() {
    let cluster =
        tokio::task::spawn_blocking(|| PgCluster::start_with(&ClusterOptions::default().tls()))
            .await
            .unwrap();
    let config = ConnConfig::parse(&format!(
        "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
        cluster.port(),
        cluster.ca_cert().unwrap().display()
    ))
    .unwrap();
    let client = syncline_pg::connect(&config).await.unwrap();
    // The tests name their tables unqualified; Syncline's sessions search pg_catalog first.
    client
        .batch_execute("SET search_path = public")
        .await
        .unwrap();
    client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY)")
        .await
        .unwrap();
    ensure_publication(&client, "pub").await.unwrap();
    add_table(&client, "pub", "public", "t", false)
        .await
        .unwrap();
    ensure_slot(&config, "slot").await.unwrap();
    let mut stream = ReplicationStream::start(&config, &StreamOptions::new("slot", "pub"))
        .await
        .unwrap();
    client
        .batch_execute("INSERT INTO t VALUES (7)")
        .await
        .unwrap();
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .expect("replication timed out")
            .unwrap();
        if let PgOutput::Insert { new, .. } = msg.message {
            assert_eq!(new.0[0].as_text().unwrap(), b"7");
            break;
        }
    }
    let walsender_ssl: bool = client
        .query_one(
            "SELECT s.ssl FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) WHERE r.application_name = 'syncline'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(walsender_ssl);
}

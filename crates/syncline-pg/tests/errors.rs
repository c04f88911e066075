//! Errors keep what Postgres said (message, SQLSTATE) and where the connection went, through
//! both clients: tokio-postgres (`syncline_pg::connect`) and our own wire client.

use std::net::TcpListener;

use syncline_pg::error::ErrorKind;
use syncline_pg::wire::{Mode, WireConnection};
use syncline_pg::{ConnConfig, PgError};
use syncline_testkit::PgCluster;

/// Both clients' answers to connecting with `url`.
async fn connect_both(url: &str) -> [PgError; 2] {
    let config = ConnConfig::parse(url).unwrap();
    let Err(client) = syncline_pg::connect(&config).await else {
        panic!("tokio-postgres connected");
    };
    let Err(wire) = WireConnection::connect(&config, "syncline-test", Mode::Query).await else {
        panic!("the wire client connected");
    };
    [client, wire]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_database_or_port_says_so_and_where() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let port = cluster.port();
    for e in connect_both(&cluster.url("no_such_db")).await {
        assert_eq!(
            e.to_string(),
            format!(
                "could not connect to 127.0.0.1:{port}: database \"no_such_db\" does not exist (SQLSTATE 3D000)"
            )
        );
        assert_eq!(e.sqlstate(), Some("3D000"));
        assert_eq!(e.kind(), ErrorKind::UndefinedObject);
        assert!(!e.is_transient());
    }

    let closed_port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for e in connect_both(&format!(
        "postgres://postgres@127.0.0.1:{closed_port}/postgres"
    ))
    .await
    {
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("could not connect to 127.0.0.1:{closed_port}: "))
                && text.contains("refused"),
            "{text}"
        );
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.is_transient());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_table_without_permission_says_permission_denied() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let admin = cluster.connect("postgres").await;
    admin
        .batch_execute("CREATE ROLE reader LOGIN; CREATE TABLE secret (id int)")
        .await
        .unwrap();
    let config = ConnConfig::parse(&format!(
        "host={} port={} user=reader dbname=postgres",
        cluster.socket_dir().display(),
        cluster.port()
    ))
    .unwrap();
    let expected = "permission denied for table secret (SQLSTATE 42501)";

    let client = syncline_pg::connect(&config).await.unwrap();
    let e: PgError = client
        .query("SELECT * FROM public.secret", &[])
        .await
        .unwrap_err()
        .into();
    assert_eq!(e.to_string(), expected);
    assert_eq!(e.kind(), ErrorKind::Permission);

    let mut wire = WireConnection::connect(&config, "syncline-test", Mode::Query)
        .await
        .unwrap();
    let e = wire
        .simple_query("SELECT * FROM public.secret")
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), expected);
    assert_eq!(e.kind(), ErrorKind::Permission);

    // Detail and hint are kept too.
    let e: PgError = client
        .batch_execute("SELECT * FROM public.secret WHERE idd = 1")
        .await
        .unwrap_err()
        .into();
    let PgError::Server { code, hint, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(code, "42703");
    assert_eq!(
        hint.as_deref(),
        Some("Perhaps you meant to reference the column \"secret.id\".")
    );
    assert!(
        e.to_string()
            .ends_with("; hint: Perhaps you meant to reference the column \"secret.id\"."),
        "{e}"
    );
    let wire_e = wire
        .simple_query("SELECT * FROM public.secret WHERE idd = 1")
        .await
        .unwrap_err();
    assert_eq!(wire_e.to_string(), e.to_string());
}

//! `/status`: the operator's page and the numbers it is fed, and a running snapshot's progress
//! (rows read, the table's estimated rows) while it runs.

mod common;

use std::time::Duration;

use common::fixture_with;

/// The body of a GET of `url`.
async fn text(f: &common::Fixture, url: &str) -> String {
    f.http.get(url).send().await.unwrap().text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_needs_the_secret_and_shows_a_running_snapshot() {
    let f = fixture_with(
        "CREATE TABLE big (id int PRIMARY KEY, note text);
         INSERT INTO big SELECT g, repeat('x', 40) FROM generate_series(1, 500000) g;
         ANALYZE big;",
        |c| {
            c.secret = Some("s3cret".into());
            c.insecure = false;
        },
    )
    .await;
    let base = format!("http://{}", f.server.addr);
    for path in ["/status", "/status/metrics"] {
        let refused = f.http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(refused.status(), 401, "{path} without the secret");
    }
    let page = f
        .http
        .get(format!("{base}/status?secret=s3cret"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let html = page.text().await.unwrap();
    assert!(html.contains("<title>Syncline status</title>"));
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "nothing loaded from elsewhere"
    );

    let snapshot = tokio::spawn({
        let (http, url) = (
            f.http.clone(),
            format!("{base}/v1/shape?table=big&offset=-1&secret=s3cret"),
        );
        async move { http.get(url).send().await.unwrap().status() }
    });
    let mut seen = None;
    for _ in 0..500 {
        let metrics = text(&f, &format!("{base}/status/metrics?secret=s3cret")).await;
        let line = |name: &str| {
            metrics
                .lines()
                .find(|l| l.starts_with(name) && l.contains(r#"table="public.big""#))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        if let (Some(rows), Some(estimated)) = (
            line("syncline_snapshot_progress_rows{"),
            line("syncline_snapshot_table_rows_estimated{"),
        ) {
            seen = Some((rows, estimated));
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (rows, estimated) = seen.expect("the running snapshot is in the metrics");
    assert_eq!(estimated, 500_000, "pg_class.reltuples after ANALYZE");
    assert!(rows <= 500_000);
    assert_eq!(snapshot.await.unwrap(), 200);
    // Once the snapshot is written, its gauges are gone.
    let mut gone = false;
    // Up to a minute: a debug build writes the 500,000 rows in 15–20 s on a loaded machine.
    for _ in 0..1200 {
        let metrics = text(&f, &format!("{base}/status/metrics?secret=s3cret")).await;
        if !metrics.contains("syncline_snapshot_progress_rows{") {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "a finished snapshot leaves no progress gauge");
}

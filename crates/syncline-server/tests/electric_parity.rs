//! Cases where a side-by-side run against Electric 1.7.12 found Syncline answering
//! differently; each test pins Electric's answer.

mod common;

use std::time::Duration;

use common::{fixture, Fixture};

/// `electric-schema` of a response, parsed.
fn schema(reply: &common::Reply) -> serde_json::Value {
    serde_json::from_str(reply.header("electric-schema").unwrap()).unwrap()
}

/// Reads a shape from `-1` to up-to-date; returns its handle and offset.
async fn caught_up(f: &Fixture, query: &str) -> (String, String) {
    let (handle, offset, _) = f.sync(query).await;
    (handle, offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_header_follows_a_nullability_change() {
    let f = fixture(
        "CREATE TABLE t (id int PRIMARY KEY, a text NOT NULL); INSERT INTO t VALUES (1, 'x');",
    )
    .await;
    let first = f.get("table=t&offset=-1").await;
    assert_eq!(schema(&first)["a"]["not_null"], true);
    let (handle, offset) = caught_up(&f, "table=t").await;
    f.db.batch_execute(
        "ALTER TABLE t ALTER COLUMN a DROP NOT NULL; INSERT INTO t VALUES (2, NULL);",
    )
    .await
    .unwrap();
    let live = f
        .get(&format!("table=t&offset={offset}&handle={handle}&live"))
        .await;
    assert_eq!(live.changes().len(), 1, "{}", live.body);
    assert_eq!(
        live.header("electric-handle"),
        Some(handle.as_str()),
        "the shape survives"
    );
    let mut fresh = f.get("table=t&offset=-1").await;
    for _ in 0..50 {
        if schema(&fresh)["a"].get("not_null").is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        fresh = f.get("table=t&offset=-1").await;
    }
    assert_eq!(schema(&fresh)["a"], serde_json::json!({"type": "text"}));
    assert_eq!(fresh.header("electric-handle"), Some(handle.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renaming_the_table_under_a_long_poll_is_a_409() {
    let f = fixture("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1);").await;
    let (handle, offset) = caught_up(&f, "table=t").await;
    let url = format!("table=t&offset={offset}&handle={handle}&live");
    let (live, ()) = tokio::join!(f.get(&url), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        f.db.batch_execute("ALTER TABLE t RENAME TO u; INSERT INTO u VALUES (2);")
            .await
            .unwrap();
    });
    assert_eq!(live.status, 409, "{}", live.body);
    let refetch = f.get("table=t&offset=-1").await;
    assert_eq!(refetch.status, 400, "the refetch says the table is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_dropped_and_created_again_is_a_409() {
    let f = fixture("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1);").await;
    let (handle, offset) = caught_up(&f, "table=t").await;
    f.db.batch_execute(
        "DROP TABLE t; CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (7);",
    )
    .await
    .unwrap();
    let mut status = 0;
    for _ in 0..10 {
        let live = f
            .get(&format!("table=t&offset={offset}&handle={handle}&live"))
            .await;
        status = live.status;
        if status != 200 {
            break;
        }
    }
    assert_eq!(status, 409, "the old handle does not live on");
    let (_, _, rows) = f.sync("table=t").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["value"]["id"], "7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn columns_on_a_table_without_a_primary_key_must_name_every_column() {
    let f = fixture("CREATE TABLE log (a int, b text); INSERT INTO log VALUES (1, 'x');").await;
    let r = f.get("table=log&offset=-1&columns=a").await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body["errors"]["columns"][0],
        "The list of columns must include all primary key columns, missing: b"
    );
    assert_eq!(f.get("table=log&offset=-1&columns=a,b").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_columns_are_refused_as_electric_refuses_them() {
    let f = fixture(
        "CREATE TABLE g (id int PRIMARY KEY, n int, twice int GENERATED ALWAYS AS (n * 2) STORED);",
    )
    .await;
    let r = f.get("table=g&offset=-1").await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body["errors"]["columns"][0],
        "The following columns are generated and cannot be included in the shape: twice. You can exclude them from the shape by explicitly listing which columns to fetch in the 'columns' query param"
    );
    let r = f.get("table=g&offset=-1&columns=id,twice").await;
    assert_eq!(
        r.body["errors"]["columns"][0],
        "The following columns are generated and cannot be included in the shape: twice"
    );
    assert_eq!(f.get("table=g&offset=-1&columns=id,n").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_catch_up_still_has_data() {
    let f = fixture("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1);").await;
    let (handle, offset) = caught_up(&f, "table=t").await;
    let r = f
        .get(&format!("table=t&offset={offset}&handle={handle}"))
        .await;
    assert_eq!(r.changes().len(), 0);
    assert_eq!(r.header("electric-has-data"), Some("true"));
    let timed_out = f
        .get(&format!("table=t&offset={offset}&handle={handle}&live"))
        .await;
    assert_eq!(timed_out.header("electric-has-data"), Some("false"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_live_responses_are_gzipped_when_the_client_accepts_it() {
    use std::io::Read;
    let f = fixture(
        "CREATE TABLE big (id int PRIMARY KEY, pad text);
         INSERT INTO big SELECT g, repeat('x', 80) FROM generate_series(1, 500) g;",
    )
    .await;
    let url = format!("http://{}/v1/shape?table=big&offset=-1", f.server.addr);
    let plain = f.http.get(&url).send().await.unwrap();
    assert_eq!(plain.headers()["vary"], "accept-encoding");
    assert!(plain.headers().get("content-encoding").is_none());
    let plain = plain.bytes().await.unwrap();
    let mut sizes = Vec::new();
    for _ in 0..2 {
        let zipped = f
            .http
            .get(&url)
            .header("accept-encoding", "gzip, br")
            .send()
            .await
            .unwrap();
        assert_eq!(zipped.headers()["content-encoding"], "gzip");
        assert_eq!(zipped.headers()["vary"], "accept-encoding");
        let zipped = zipped.bytes().await.unwrap();
        sizes.push(zipped.len());
        let mut unzipped = Vec::new();
        flate2::read::GzDecoder::new(&zipped[..])
            .read_to_end(&mut unzipped)
            .unwrap();
        assert_eq!(unzipped, plain);
    }
    assert!(sizes[0] * 10 < plain.len(), "{sizes:?} of {}", plain.len());
    let metrics = f
        .http
        .get(format!("http://{}/metrics", f.server.addr))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("syncline_gzip_cache_hits_total 1"),
        "a closed chunk is compressed once: {metrics}"
    );
    let (handle, offset) = caught_up(&f, "table=big").await;
    let live = f
        .http
        .get(format!(
            "http://{}/v1/shape?table=big&offset={offset}&handle={handle}&live",
            f.server.addr
        ))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert!(
        live.headers().get("content-encoding").is_none(),
        "live responses go out as they are"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echoed_origin_varies_the_cached_response() {
    let f = fixture("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1);").await;
    let url = format!("http://{}/v1/shape?table=t&offset=-1", f.server.addr);
    for origin in ["http://a.example:1", "http://b.example:2"] {
        let r = f
            .http
            .get(&url)
            .header("origin", origin)
            .send()
            .await
            .unwrap();
        assert_eq!(r.headers()["access-control-allow-origin"], origin);
        let vary: Vec<&str> = r
            .headers()
            .get_all("vary")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert!(vary.contains(&"origin"), "{vary:?}");
        assert!(vary.contains(&"accept-encoding"), "{vary:?}");
    }
    let r = f.http.get(&url).send().await.unwrap();
    assert_eq!(r.headers()["access-control-allow-origin"], "*");
    assert!(r.headers().get_all("vary").iter().all(|v| v != "origin"));
}

//! Partitioned tables: published through their root, so changes to every partition reach the
//! root's shapes, rows moving between partitions included; attaching or detaching a partition
//! changes the table's rows behind the stream's back, so its shapes are refetched.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{fixture, Fixture};
use serde_json::Value;

const SETUP: &str = "CREATE TABLE m (id int, region text, v text, PRIMARY KEY (id, region))
       PARTITION BY LIST (region);
     CREATE TABLE m_eu PARTITION OF m FOR VALUES IN ('eu');
     CREATE TABLE m_us PARTITION OF m FOR VALUES IN ('us');
     INSERT INTO m VALUES (1, 'eu', 'a'), (2, 'us', 'b');";

/// The shape's rows by key after following it live until `done` says they are right.
async fn follow(
    f: &Fixture,
    query: &str,
    handle: &str,
    mut offset: String,
    rows: &mut BTreeMap<String, Value>,
    done: impl Fn(&BTreeMap<String, Value>) -> bool,
) -> Result<String, u16> {
    for _ in 0..30 {
        if done(rows) {
            return Ok(offset);
        }
        let r = f
            .get(&format!("{query}&offset={offset}&handle={handle}&live"))
            .await;
        if r.status != 200 {
            return Err(r.status);
        }
        offset = r.header("electric-offset").unwrap().to_owned();
        for m in r.changes() {
            let key = m["key"].as_str().unwrap().to_owned();
            match m["headers"]["operation"].as_str().unwrap() {
                "delete" => {
                    rows.remove(&key);
                }
                _ => {
                    let row = rows
                        .entry(key)
                        .or_insert_with(|| Value::Object(Default::default()));
                    for (k, v) in m["value"].as_object().unwrap() {
                        row[k] = v.clone();
                    }
                }
            }
        }
    }
    Ok(offset)
}

async fn table(f: &Fixture) -> BTreeMap<String, String> {
    f.db.query("SELECT id::text || '/' || region, v FROM m", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

fn values(rows: &BTreeMap<String, Value>) -> BTreeMap<String, String> {
    rows.values()
        .map(|r| {
            (
                format!(
                    "{}/{}",
                    r["id"].as_str().unwrap(),
                    r["region"].as_str().unwrap()
                ),
                r["v"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_to_every_partition_reach_the_roots_shapes() {
    let f = fixture(SETUP).await;
    let (handle, offset, snapshot) = f.sync("table=m").await;
    let mut rows: BTreeMap<String, Value> = snapshot
        .iter()
        .map(|m| (m["key"].as_str().unwrap().to_owned(), m["value"].clone()))
        .collect();
    assert_eq!(rows.len(), 2);
    // A second shape on the same root is made too.
    assert_eq!(
        f.get("table=m&offset=-1&where=v%20%3D%20'a'").await.status,
        200
    );
    f.db.batch_execute(
        "INSERT INTO m VALUES (3, 'eu', 'c'), (4, 'us', 'd');
         UPDATE m SET v = 'b2' WHERE id = 2;
         UPDATE m SET region = 'us' WHERE id = 1;
         DELETE FROM m WHERE id = 4;",
    )
    .await
    .unwrap();
    let expected = table(&f).await;
    follow(&f, "table=m", &handle, offset, &mut rows, |r| {
        values(r) == expected
    })
    .await
    .unwrap();
    assert_eq!(values(&rows), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attaching_or_detaching_a_partition_refetches_the_shape() {
    let f = fixture(SETUP).await;
    let (handle, offset, _) = f.sync("table=m").await;
    f.db.batch_execute(
        "CREATE TABLE m_asia (id int, region text, v text, PRIMARY KEY (id, region));
         INSERT INTO m_asia VALUES (9, 'asia', 'z');
         ALTER TABLE m ATTACH PARTITION m_asia FOR VALUES IN ('asia');",
    )
    .await
    .unwrap();
    let mut rows = BTreeMap::new();
    let outcome = follow(&f, "table=m", &handle, offset, &mut rows, |_| false).await;
    assert_eq!(outcome, Err(409), "the attached rows are not on the stream");
    let (handle, offset, snapshot) = f.sync("table=m").await;
    assert_eq!(snapshot.len(), 3);
    f.db.batch_execute("ALTER TABLE m DETACH PARTITION m_us")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let outcome = follow(&f, "table=m", &handle, offset, &mut rows, |_| false).await;
    assert_eq!(outcome, Err(409));
    let (_, _, snapshot) = f.sync("table=m").await;
    assert_eq!(snapshot.len(), 2);
}

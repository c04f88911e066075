//! Hostile role and database settings: whatever the role or the database sets for a session,
//! the SQL Syncline renders means what the where clause says, and user text never runs as SQL.

mod common;

use common::{fixture, Fixture};
use serde_json::json;

const ITEMS: &str = r"CREATE TABLE items (id int PRIMARY KEY, name text);
     INSERT INTO items VALUES (1, 'plain'), (2, 'ends\'), (3, 'it''s'), (4, 'a\b');";

/// A query string with every value percent-encoded.
fn query(pairs: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// Syncs `items` where `name = <value>` and returns the ids it holds.
async fn ids_named(f: &Fixture, value: &str) -> Vec<String> {
    let q = query(&[
        ("table", "items"),
        ("where", "name = $1"),
        ("params[1]", value),
    ]);
    let (_, _, rows) = f.sync(&q).await;
    rows.iter()
        .map(|m| m["value"]["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn table_exists(f: &Fixture, name: &str) -> bool {
    let row =
        f.db.query_one("SELECT to_regclass($1)::text", &[&name])
            .await
            .unwrap();
    row.get::<_, Option<String>>(0).is_some()
}

/// The injection the outside testing found, and literals with backslashes and quotes, under
/// `standard_conforming_strings = off` set on `scope` (`ROLE postgres` or `DATABASE postgres`).
async fn literals_are_data_under(scope: &str) {
    let f = fixture(&format!(
        "{ITEMS}; ALTER {scope} SET standard_conforming_strings = off; \
         ALTER {scope} SET backslash_quote = on; ALTER {scope} SET escape_string_warning = off;"
    ))
    .await;
    let payload = r"\'))) TO STDOUT (FORMAT binary); COMMIT; CREATE TABLE public.pwned(); --";
    let q = query(&[
        ("table", "items"),
        ("offset", "-1"),
        ("where", "name = $1"),
        ("params[1]", payload),
    ]);
    let reply = f.get(&q).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.changes().is_empty(), "{}", reply.body);
    assert!(
        !table_exists(&f, "public.pwned").await,
        "user text ran as SQL"
    );

    assert_eq!(ids_named(&f, r"ends\").await, vec!["2"]);
    assert_eq!(ids_named(&f, "it's").await, vec!["3"]);
    assert_eq!(ids_named(&f, r"a\b").await, vec!["4"]);
    let like = query(&[("table", "items"), ("where", r"name LIKE 'a\\b'")]);
    let (_, _, rows) = f.sync(&like).await;
    assert_eq!(rows.len(), 1, "LIKE 'a\\\\b' matches a\\b: {rows:?}");
    assert_eq!(rows[0]["value"], json!({"id": "4", "name": r"a\b"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_injection_without_standard_strings_on_the_role() {
    literals_are_data_under("ROLE postgres").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_injection_without_standard_strings_on_the_database() {
    literals_are_data_under("DATABASE postgres").await;
}

/// A search path that puts a schema before `pg_catalog` cannot swap the functions a where
/// clause calls: the snapshot runs with Syncline's own path (`pg_catalog, public`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_search_path_cannot_replace_a_function() {
    let f = fixture(&format!(
        "{ITEMS}; CREATE SCHEMA evil; \
         CREATE FUNCTION evil.lower(text) RETURNS text LANGUAGE sql AS $$ SELECT 'pwned' $$; \
         ALTER ROLE postgres SET search_path = evil, pg_catalog, public;"
    ))
    .await;
    let pwned = query(&[("table", "items"), ("where", "lower(name) = 'pwned'")]);
    let (_, _, rows) = f.sync(&pwned).await;
    assert!(rows.is_empty(), "the snapshot called evil.lower: {rows:?}");
    let plain = query(&[("table", "items"), ("where", "lower(name) = 'plain'")]);
    let (_, _, rows) = f.sync(&plain).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["value"]["id"], "1");
}

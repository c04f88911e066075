//! Compaction of shapes that asked for it (`experimental_compaction=true`): every period, each
//! such shape's older closed chunks have their runs of updates to one key merged into one
//! update (`syncline-storage` keeps inserts and deletes in place, so every offset keeps its
//! meaning and every reader reaches the same final state).
//!
//! A merged update carries the newer value of every column either update set, the older
//! `old_value` of each column, and only the `operation` and `relation` headers, as in Electric.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use serde_json::{Map, Value};
use syncline_core::wire;
use syncline_storage::COMPACTION_KEEP_CHUNKS_DEFAULT;

use crate::shapes::{Shape, Shapes};

/// Compacts every opted-in shape every `period` (± half of it, so shapes of servers started
/// together do not compact in step), for as long as the server runs.
pub async fn run(shapes: Arc<Shapes>, period: Duration) {
    loop {
        let jitter = rand::thread_rng().gen_range(0.5..1.5);
        tokio::time::sleep(period.mul_f64(jitter)).await;
        let opted_in: Vec<Arc<Shape>> = shapes
            .all()
            .into_iter()
            .filter(|s| s.definition.compaction && s.state().snapshot_done && !s.state().gone)
            .collect();
        for shape in opted_in {
            let compacted = tokio::task::spawn_blocking(move || compact(&shape)).await;
            if let Err(e) = compacted {
                tracing::warn!(error = %e, "compaction task failed");
            }
        }
    }
}

/// Compacts one shape's log (holding its writer while it does).
fn compact(shape: &Shape) {
    let mut writer = shape.writer.lock();
    let result = writer
        .get()
        .and_then(|w| w.compact(COMPACTION_KEEP_CHUNKS_DEFAULT, &mut merge_updates));
    match result {
        Ok(stats) if stats.chunks_rewritten > 0 => tracing::info!(
            handle = %shape.handle,
            chunks = stats.chunks_rewritten,
            removed = stats.messages_removed,
            bytes_before = stats.json_bytes_before,
            bytes_after = stats.json_bytes_after,
            "shape log compacted"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(handle = %shape.handle, error = %e, "compaction failed"),
    }
}

/// One update equivalent to the stored update `older` followed by `newer` (each stored with
/// its leading `,`), written through `syncline_core::wire`.
pub fn merge_updates(older: &[u8], newer: &[u8]) -> Vec<u8> {
    let parse = |stored: &[u8]| -> Map<String, Value> {
        let json = stored.strip_prefix(b",").unwrap_or(stored);
        match serde_json::from_slice(json) {
            Ok(Value::Object(map)) => map,
            _ => unreachable!("the pipeline stores JSON objects"),
        }
    };
    let (older, newer) = (parse(older), parse(newer));
    let mut value = field(&older, "value");
    value.extend(field(&newer, "value"));
    let mut old_value = field(&newer, "old_value");
    old_value.extend(field(&older, "old_value"));
    let headers = field(&newer, "headers");
    let key = newer.get("key").and_then(Value::as_str).unwrap_or_default();
    let relation: Vec<&str> = headers
        .get("relation")
        .and_then(Value::as_array)
        .map(|parts| parts.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert_eq!(relation.len(), 2, "a stored change names its relation");
    let mut out = vec![wire::STORED_SEPARATOR];
    wire::write_message_start(&mut out, key.as_bytes());
    write_row(&mut out, &value);
    if !old_value.is_empty() {
        out.extend_from_slice(wire::OLD_VALUE_FIELD);
        write_row(&mut out, &old_value);
    }
    let relation_json = wire::relation_json(relation[0], relation[1]);
    wire::write_headers_start(&mut out, wire::Operation::Update, &relation_json);
    wire::close_headers(&mut out, false);
    out
}

/// A row object of column texts (or nulls).
fn write_row(out: &mut Vec<u8>, row: &Map<String, Value>) {
    out.push(b'{');
    for (i, (name, value)) in row.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&wire::field_prefix(name));
        wire::write_value(out, value.as_str().map(str::as_bytes));
    }
    out.push(b'}');
}

fn field(message: &Map<String, Value>, name: &str) -> Map<String, Value> {
    match message.get(name) {
        Some(Value::Object(map)) => map.clone(),
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::merge_updates;
    use serde_json::{json, Value};

    #[test]
    fn newer_values_win_and_older_old_values_stay() {
        let older = br#",{"key":"k","value":{"id":"1","a":"x","b":"y"},"old_value":{"a":"w"},"headers":{"operation":"update","relation":["public","t"],"txids":[5],"lsn":"10","op_position":0,"last":true}}"#;
        let newer = br#",{"key":"k","value":{"id":"1","a":"z"},"old_value":{"a":"x","c":"q"},"headers":{"operation":"update","relation":["public","t"],"txids":[6],"lsn":"20","op_position":2}}"#;
        let merged = merge_updates(older, newer);
        assert_eq!(
            String::from_utf8(merged.clone()).unwrap(),
            r#",{"key":"k","value":{"a":"z","b":"y","id":"1"},"old_value":{"a":"w","c":"q"},"headers":{"operation":"update","relation":["public","t"]}}"#
        );
        let merged: Value = serde_json::from_slice(&merged[1..]).unwrap();
        assert_eq!(
            merged,
            json!({"key":"k","value":{"id":"1","a":"z","b":"y"},"old_value":{"a":"w","c":"q"},
                   "headers":{"operation":"update","relation":["public","t"]}})
        );
    }
}

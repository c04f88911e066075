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
use syncline_storage::COMPACTION_KEEP_CHUNKS_DEFAULT;

use crate::shape::Shape;
use crate::state::AppState;

/// Compacts every opted-in shape every `period` (± half of it, so shapes of servers started
/// together do not compact in step), for as long as the server runs.
pub async fn run(state: Arc<AppState>, period: Duration) {
    loop {
        let jitter = rand::thread_rng().gen_range(0.5..1.5);
        tokio::time::sleep(period.mul_f64(jitter)).await;
        let shapes: Vec<Arc<Shape>> = state
            .registry()
            .all()
            .into_iter()
            .filter(|s| s.definition.compaction && s.state().snapshot_done && !s.state().gone)
            .collect();
        for shape in shapes {
            let state = state.clone();
            let compacted = tokio::task::spawn_blocking(move || compact(&state, &shape)).await;
            if let Err(e) = compacted {
                tracing::warn!(error = %e, "compaction task failed");
            }
        }
    }
}

/// Compacts one shape's log (holding its writer while it does).
fn compact(state: &AppState, shape: &Shape) {
    let mut writer = shape.writer.lock();
    let result = writer
        .get(&state.store, &state.writer_options)
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
/// its leading `,`).
pub fn merge_updates(older: &[u8], newer: &[u8]) -> Vec<u8> {
    let parse = |stored: &[u8]| -> Map<String, Value> {
        let json = stored.strip_prefix(b",").unwrap_or(stored);
        match serde_json::from_slice(json) {
            Ok(Value::Object(map)) => map,
            _ => unreachable!("the pipeline stores JSON objects"),
        }
    };
    let (older, mut newer) = (parse(older), parse(newer));
    let mut value = field(&older, "value");
    value.extend(field(&newer, "value"));
    let mut old_value = field(&newer, "old_value");
    old_value.extend(field(&older, "old_value"));
    let headers = field(&newer, "headers");
    let mut merged = Map::new();
    merged.insert("key".into(), newer.remove("key").unwrap_or(Value::Null));
    merged.insert("value".into(), Value::Object(value));
    if !old_value.is_empty() {
        merged.insert("old_value".into(), Value::Object(old_value));
    }
    let mut kept = Map::new();
    for name in ["operation", "relation"] {
        if let Some(v) = headers.get(name) {
            kept.insert(name.into(), v.clone());
        }
    }
    merged.insert("headers".into(), Value::Object(kept));
    let mut out = b",".to_vec();
    serde_json::to_writer(&mut out, &Value::Object(merged)).expect("writing to a Vec");
    out
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
        assert_eq!(merged[0], b',');
        let merged: Value = serde_json::from_slice(&merged[1..]).unwrap();
        assert_eq!(
            merged,
            json!({"key":"k","value":{"id":"1","a":"z","b":"y"},"old_value":{"a":"w","c":"q"},
                   "headers":{"operation":"update","relation":["public","t"]}})
        );
    }
}

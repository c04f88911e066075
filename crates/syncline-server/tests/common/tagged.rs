//! A client of subquery shapes that applies messages as Electric's clients do (TanStack DB's
//! tag index, the Elixir client's tag tracker): rows keep their tags and active conditions; a
//! `move-out` clears the conditions its patterns match and drops rows no disjunct still holds;
//! a `move-in` sets them; rows that move in arrive as inserts. An insert of a row it holds, an
//! update of one it does not, or a delete of one it does not is a wrong log: it is recorded in
//! `problems`.

use std::collections::BTreeMap;

use serde_json::Value;

/// A row as the client holds it.
#[derive(Debug, Clone)]
pub struct TaggedRow {
    pub value: serde_json::Map<String, Value>,
    /// Per disjunct, its slots (`""`: the position is not in the disjunct).
    pub tags: Vec<Vec<String>>,
    pub active: Vec<bool>,
}

impl TaggedRow {
    /// Whether some disjunct has all its positions active.
    fn held(&self) -> bool {
        if self.tags.is_empty() {
            return true;
        }
        self.tags.iter().any(|slots| {
            slots
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.is_empty())
                .all(|(p, _)| self.active.get(p).copied().unwrap_or(true))
        })
    }

    fn matches(&self, pos: usize, value: &str) -> bool {
        self.tags
            .iter()
            .any(|slots| slots.get(pos).is_some_and(|s| s == value))
    }
}

/// The rows a client holds, by key.
#[derive(Debug, Default)]
pub struct TaggedClient {
    pub rows: BTreeMap<String, TaggedRow>,
    /// Every message applied, for failure reports.
    pub seen: Vec<Value>,
    /// What a right log would not have made it do, in order.
    pub problems: Vec<String>,
}

fn tags_of(headers: &Value) -> Option<Vec<Vec<String>>> {
    headers["tags"].as_array().map(|tags| {
        tags.iter()
            .map(|t| {
                t.as_str()
                    .unwrap_or_default()
                    .split('/')
                    .map(str::to_owned)
                    .collect()
            })
            .collect()
    })
}

fn active_of(headers: &Value) -> Option<Vec<bool>> {
    headers["active_conditions"]
        .as_array()
        .map(|a| a.iter().map(|b| b.as_bool().unwrap_or(false)).collect())
}

impl TaggedClient {
    /// Applies one message of a response.
    pub fn apply(&mut self, m: &Value) {
        self.seen.push(m.clone());
        let headers = &m["headers"];
        if let Some(event) = headers["event"].as_str() {
            let on = event == "move-in";
            for pattern in headers["patterns"].as_array().expect("patterns") {
                let pos = usize::try_from(pattern["pos"].as_u64().expect("pos")).unwrap();
                let value = pattern["value"].as_str().expect("value");
                for row in self.rows.values_mut() {
                    if row.matches(pos, value) {
                        if let Some(a) = row.active.get_mut(pos) {
                            *a = on;
                        }
                    }
                }
            }
            if !on {
                self.rows.retain(|_, row| row.held());
            }
            return;
        }
        let Some(key) = m["key"].as_str() else {
            return;
        };
        let key = key.to_owned();
        match headers["operation"].as_str().expect("operation") {
            "insert" => {
                let value = m["value"].as_object().expect("value").clone();
                if self.rows.contains_key(&key) {
                    self.problems
                        .push(format!("insert of present row {key}: {m}"));
                }
                self.rows.insert(
                    key,
                    TaggedRow {
                        value,
                        tags: tags_of(headers).unwrap_or_default(),
                        active: active_of(headers).unwrap_or_default(),
                    },
                );
            }
            "update" => {
                let Some(row) = self.rows.get_mut(&key) else {
                    self.problems
                        .push(format!("update of absent row {key}: {m}"));
                    return;
                };
                for (k, v) in m["value"].as_object().expect("value") {
                    row.value.insert(k.clone(), v.clone());
                }
                if let Some(tags) = tags_of(headers) {
                    row.tags = tags;
                }
                if let Some(active) = active_of(headers) {
                    row.active = active;
                }
            }
            "delete" => {
                if self.rows.remove(&key).is_none() {
                    self.problems
                        .push(format!("delete of absent row {key}: {m}"));
                }
            }
            other => panic!("operation {other}"),
        }
    }

    /// The rows' `id` values, sorted.
    pub fn ids(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = self
            .rows
            .values()
            .map(|r| {
                r.value["id"]
                    .as_str()
                    .expect("id")
                    .parse()
                    .expect("numeric id")
            })
            .collect();
        ids.sort_unstable();
        ids
    }
}

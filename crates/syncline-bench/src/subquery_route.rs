//! The routing part of `syncline-bench subquery`, in process: with 10,000 subquery shapes on
//! distinct parents (`parent_id IN (SELECT id FROM parent WHERE id = k)`, each shape's value set
//! holding its `k`, as the pipeline keeps it), the cost of routing one child change: the router
//! finds the candidates through its value-set index and each candidate's clause is evaluated
//! against its set (what the pipeline does before encoding). Baseline in the same run: 10,000
//! plain shapes `parent_id = k` through the same two steps. Every change is an insert decoded from
//! Postgres text form inside the timed loop; half name a parent with a shape.

use std::collections::HashSet;
use std::time::Instant;

use bytes::Bytes;
use serde_json::{json, Value as Json};
use syncline_core::relation::{ColumnDesc, PgType, RelationDesc, ReplicaIdentity, TypeKind};
use syncline_core::tuple::Value;
use syncline_where::{Change, Router, Row, RowTypes, TableRef, Views, Where};

/// Shapes of each kind.
const SHAPES: usize = 10_000;
/// Changes timed per kind.
const CHANGES: usize = 200_000;

/// Errors of this part.
pub type RouteError = Box<dyn std::error::Error + Send + Sync>;

fn relation(name: &str, oid: u32) -> RelationDesc {
    let column = |column: &str, pk: Option<usize>| ColumnDesc {
        name: column.into(),
        pg_type: PgType {
            oid: 23,
            name: "int4".into(),
            kind: TypeKind::Base,
        },
        type_mod: -1,
        not_null: pk.is_some(),
        pk_index: pk,
        array_dims: 0,
    };
    let columns = match name {
        "parent" => vec![column("id", Some(0))],
        _ => vec![column("id", Some(0)), column("parent_id", None)],
    };
    RelationDesc {
        oid,
        schema: "public".into(),
        name: name.into(),
        columns,
        replica_identity: ReplicaIdentity::Full,
    }
}

/// One shape's value set for its one subquery.
struct OneSet(HashSet<String>);

impl Views for OneSet {
    fn contains(&self, _subquery: usize, values: &[&str]) -> bool {
        self.0.contains(values[0])
    }

    fn contains_null(&self, _subquery: usize) -> bool {
        false
    }

    fn is_empty(&self, _subquery: usize) -> bool {
        self.0.is_empty()
    }
}

/// Child inserts: even ones name a parent with a shape, odd ones a parent without.
fn changes() -> Vec<Vec<Value>> {
    let mut state: u64 = 0x5EED_0014;
    (0..CHANGES)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let k = usize::try_from(state % SHAPES as u64).expect("fits") + 1;
            let parent = if i % 2 == 0 { k } else { SHAPES + k };
            [i.to_string(), parent.to_string()]
                .into_iter()
                .map(|t| Value::Text(Bytes::from(t)))
                .collect()
        })
        .collect()
}

/// Mean nanoseconds per change of routing and evaluating `changes` through `router`, and the
/// shapes they matched per change.
fn time(
    router: &Router,
    clauses: &[Where],
    sets: &[OneSet],
    types: &RowTypes,
    changes: &[Vec<Value>],
) -> (f64, f64) {
    let started = Instant::now();
    let mut matched = 0usize;
    for values in changes {
        let row = Row::new(types, values);
        for id in router.affected(&Change::Insert(values)) {
            let i = usize::try_from(id).expect("fits");
            let included = if clauses[i].has_subqueries() {
                clauses[i].includes_in(&row, &sets[i])
            } else {
                clauses[i].includes(&row)
            };
            matched += usize::from(included);
        }
    }
    let elapsed = started.elapsed().as_nanos() as f64;
    (
        elapsed / changes.len() as f64,
        matched as f64 / changes.len() as f64,
    )
}

/// Runs both kinds and returns their figures.
pub fn run() -> Result<Json, RouteError> {
    let child = relation("child", 2);
    let parent = relation("parent", 1);
    let types = RowTypes::of(&child);
    let tables = |t: &TableRef| (t.name == "parent").then(|| parent.clone());
    let changes = changes();
    let mut figures = Vec::new();
    for subquery in [true, false] {
        let started = Instant::now();
        let mut router = Router::new(&child);
        let mut clauses = Vec::with_capacity(SHAPES);
        let mut sets = Vec::with_capacity(SHAPES);
        for k in 1..=SHAPES {
            let id = u64::try_from(clauses.len()).expect("fits");
            let clause = if subquery {
                let text = format!("parent_id IN (SELECT id FROM parent WHERE id = {k})");
                Where::with_tables(&text, &child, &[], &tables)?
            } else {
                Where::new(&format!("parent_id = {k}"), &child, &[])?
            };
            router.add(id, Some(&clause));
            if subquery {
                router.view_insert(id, 0, &[&k.to_string()]);
            }
            clauses.push(clause);
            sets.push(OneSet(HashSet::from([k.to_string()])));
        }
        let build_s = started.elapsed().as_secs_f64();
        let (ns, matched) = time(&router, &clauses, &sets, &types, &changes);
        if (matched - 0.5).abs() > 0.01 {
            return Err(
                format!("every other change should match one shape; matched {matched}").into(),
            );
        }
        figures.push(json!({
            "kind": if subquery { "subquery" } else { "plain" },
            "shapes": SHAPES,
            "changes": CHANGES,
            "build_s": build_s,
            "ns_per_change": ns,
            "matches_per_change": matched,
        }));
    }
    Ok(json!({ "subquery": figures[0], "plain": figures[1] }))
}

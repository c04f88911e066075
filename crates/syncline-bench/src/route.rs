//! `syncline-bench route`: the cost of finding the shapes a change affects, through the shape
//! router's indexes and, as the baseline measured in the same run, by evaluating every shape's
//! where clause (what a router without indexes does). Written to `target/bench/route.json`.
//!
//! Table `items(id int4, owner int8, score int4, name text)`; every change is an insert of a
//! random row, decoded from Postgres text form inside the timed loop (as replication delivers
//! it). Shape families:
//! - `owner = i` for i in 0..n: each change matches one shape.
//! - `score BETWEEN 10i AND 10i + 9`: disjoint ranges, each change matches one shape.
//! - `name LIKE 'wi%'`: prefix patterns, each change matches one shape.
//! - `name ILIKE '%wi%'`: not indexable; evaluated per shape by both paths.

use std::error::Error;
use std::fs;
use std::path::Path;
use std::time::Instant;

use bytes::Bytes;
use serde_json::{json, Map, Value as Json};
use syncline_core::relation::{ColumnDesc, PgType, RelationDesc, ReplicaIdentity, TypeKind};
use syncline_core::tuple::Value;
use syncline_where::{Change, Router, Where};

/// Errors of this scenario.
pub type RouteError = Box<dyn Error + Send + Sync>;
type Result<T, E = RouteError> = std::result::Result<T, E>;

/// Shape counts of the indexed families.
const SHAPE_COUNTS: [usize; 3] = [1_000, 10_000, 100_000];
/// Shape counts of the ILIKE family (each change evaluates every shape).
const ILIKE_SHAPE_COUNTS: [usize; 2] = [1_000, 10_000];
/// Changes timed through the index per figure.
const INDEXED_CHANGES: usize = 50_000;
/// Shape evaluations the brute-force baseline performs per figure (changes = this / shapes).
const SCAN_EVALUATIONS: usize = 20_000_000;
/// Goal for `route_eq_100k_ns_per_change`.
const EQ_100K_NS_GOAL: f64 = 2_000.0;
/// Goal for `route_ilike_10k_ns_per_change`.
const ILIKE_10K_NS_GOAL: f64 = 2_000_000.0;

/// A deterministic xorshift generator: the run needs no randomness crate and is repeatable.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        usize::try_from(self.0 % u64::try_from(n).expect("usize fits u64"))
            .expect("below n, a usize")
    }
}

fn relation() -> RelationDesc {
    let column = |name: &str, ty: &str, pk: Option<usize>| ColumnDesc {
        name: name.into(),
        pg_type: PgType {
            oid: 0,
            name: ty.into(),
            kind: TypeKind::Base,
        },
        type_mod: -1,
        not_null: pk.is_some(),
        pk_index: pk,
        array_dims: 0,
    };
    RelationDesc {
        oid: 1,
        schema: "public".into(),
        name: "items".into(),
        columns: vec![
            column("id", "int4", Some(0)),
            column("owner", "int8", None),
            column("score", "int4", None),
            column("name", "text", None),
        ],
        replica_identity: ReplicaIdentity::Full,
    }
}

/// The word shape `i` looks for in `name`.
fn word(i: usize) -> String {
    format!("w{i:06}")
}

/// `count` insert rows whose owner, score and name each select one of `shapes` shapes.
fn rows(rng: &mut Rng, count: usize, shapes: usize) -> Vec<Vec<Value>> {
    (0..count)
        .map(|id| {
            let (owner, score, w) = (rng.below(shapes), rng.below(shapes * 10), rng.below(shapes));
            [
                id.to_string(),
                owner.to_string(),
                score.to_string(),
                format!("{}-item", word(w).to_uppercase()),
            ]
            .into_iter()
            .map(|v| Value::Text(Bytes::from(v)))
            .collect()
        })
        .collect()
}

fn router(relation: &RelationDesc, clauses: impl Iterator<Item = String>) -> Result<(Router, f64)> {
    let started = Instant::now();
    let mut router = Router::new(relation);
    for (i, clause) in clauses.enumerate() {
        router.add(i as u64, Some(&Where::new(&clause, relation, &[])?));
    }
    Ok((router, started.elapsed().as_secs_f64()))
}

/// Mean nanoseconds per change of `route`, and the total number of affected shapes.
fn time_changes(rows: &[Vec<Value>], route: impl Fn(&Change) -> Vec<u64>) -> (f64, usize) {
    let started = Instant::now();
    let mut matched = 0;
    for row in rows {
        matched += route(&Change::Insert(row)).len();
    }
    (
        started.elapsed().as_nanos() as f64 / rows.len() as f64,
        matched,
    )
}

/// Times one family at `n` shapes through the index (`indexed` changes) and by scanning.
fn family(
    relation: &RelationDesc,
    name: &str,
    n: usize,
    indexed: usize,
    clause: impl Fn(usize) -> String,
) -> Result<Json> {
    let (router, build_s) = router(relation, (0..n).map(clause))?;
    let mut rng = Rng(0x5EED_0006 ^ n as u64);
    let index_rows = rows(&mut rng, indexed, n);
    let scan_rows = rows(&mut rng, (SCAN_EVALUATIONS / n).max(10), n);
    let (index_ns, index_matched) = time_changes(&index_rows, |c| router.affected(c));
    let (scan_ns, scan_matched) = time_changes(&scan_rows, |c| router.affected_by_scan(c));
    for row in scan_rows.iter().take(50) {
        let change = Change::Insert(row);
        if router.affected(&change) != router.affected_by_scan(&change) {
            return Err(format!("{name} at {n} shapes: index and scan disagree on {row:?}").into());
        }
    }
    Ok(json!({
        "family": name,
        "shapes": n,
        "shapes_unindexed": router.unindexed(),
        "build_seconds": build_s,
        "index_changes": index_rows.len(),
        "index_ns_per_change": index_ns,
        "index_matches_per_change": index_matched as f64 / index_rows.len() as f64,
        "scan_changes": scan_rows.len(),
        "scan_ns_per_change": scan_ns,
        "scan_matches_per_change": scan_matched as f64 / scan_rows.len() as f64,
        "scan_over_index": scan_ns / index_ns,
    }))
}

/// Runs the scenario, writes `target/bench/route.json` and returns the same JSON.
pub fn run() -> Result<Json> {
    let relation = relation();
    let mut results = Vec::new();
    for n in SHAPE_COUNTS {
        results.push(family(&relation, "eq", n, INDEXED_CHANGES, |i| {
            format!("owner = {i}")
        })?);
        results.push(family(&relation, "range", n, INDEXED_CHANGES, |i| {
            format!("score BETWEEN {} AND {}", i * 10, i * 10 + 9)
        })?);
        results.push(family(&relation, "like_prefix", n, INDEXED_CHANGES, |i| {
            format!("name LIKE '{}%'", word(i).to_uppercase())
        })?);
    }
    for n in ILIKE_SHAPE_COUNTS {
        results.push(family(
            &relation,
            "ilike",
            n,
            (SCAN_EVALUATIONS / n).max(10),
            |i| format!("name ILIKE '%{}%'", word(i)),
        )?);
    }
    let (mut figures, mut baselines, mut ratios) = (Map::new(), Map::new(), Map::new());
    for r in &results {
        let label = format!(
            "{}_{}k",
            r["family"].as_str().unwrap_or("?"),
            r["shapes"].as_u64().unwrap_or(0) / 1000
        );
        figures.insert(
            format!("route_{label}_ns_per_change"),
            r["index_ns_per_change"].clone(),
        );
        baselines.insert(
            format!("scan_{label}_ns_per_change"),
            r["scan_ns_per_change"].clone(),
        );
        ratios.insert(
            format!("{label}_scan_over_index"),
            r["scan_over_index"].clone(),
        );
    }
    let ns = |key: &str| figures.get(key).and_then(Json::as_f64).unwrap_or(f64::NAN);
    let eq_flatness = ns("route_eq_100k_ns_per_change") / ns("route_eq_1k_ns_per_change");
    let range_flatness = ns("route_range_100k_ns_per_change") / ns("route_range_1k_ns_per_change");
    ratios.insert("eq_100k_over_1k".into(), json!(eq_flatness));
    ratios.insert("range_100k_over_1k".into(), json!(range_flatness));
    let result = json!({
        "scenario": "route",
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "parameters": {
            "shape_counts": SHAPE_COUNTS,
            "ilike_shape_counts": ILIKE_SHAPE_COUNTS,
            "indexed_changes": INDEXED_CHANGES,
            "scan_evaluations": SCAN_EVALUATIONS,
            "change": "insert of one row (id int4, owner int8, score int4, name text) in Postgres text form, decoded in the timed loop",
            "families": {
                "eq": "owner = i",
                "range": "score BETWEEN 10i AND 10i + 9",
                "like_prefix": "name LIKE 'Wi%'",
                "ilike": "name ILIKE '%wi%' (not indexable: evaluated per shape by both paths)",
            },
            "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "threads_used": 1,
        },
        "units": {"*_ns_per_change": "mean nanoseconds per change", "*_scan_over_index": "scan time / index time",
            "*_100k_over_1k": "index time at 100k shapes / at 1k shapes (1 = flat)"},
        "figures": figures,
        "baselines": baselines,
        "ratios": ratios,
        "goals": {
            "route_eq_100k_ns_per_change": format!("<= {EQ_100K_NS_GOAL}"),
            "eq_100k_over_1k": "about 1 (flat)",
            "route_ilike_10k_ns_per_change": format!("<= {ILIKE_10K_NS_GOAL}"),
        },
        "goals_met": {
            "route_eq_100k_ns_per_change": ns("route_eq_100k_ns_per_change") <= EQ_100K_NS_GOAL,
            "route_ilike_10k_ns_per_change": ns("route_ilike_10k_ns_per_change") <= ILIKE_10K_NS_GOAL,
        },
        "electric_for_scale": "seed 003: 0.17-0.27 ms per matching change for = shapes; ~100 ms per change at 10k ILIKE shapes",
        "details": results,
    });
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench");
    fs::create_dir_all(&dir)?;
    fs::write(dir.join("route.json"), serde_json::to_vec_pretty(&result)?)?;
    Ok(result)
}

//! The router against brute force: for random shapes (indexable forms, their AND/OR
//! combinations and arbitrary clauses) and random changes, `affected` must equal evaluating
//! every shape, also after shapes are removed and re-added.

mod common;

use bytes::Bytes;
use common::{Gen, COLS};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use syncline_core::tuple::Value;
use syncline_where::{Change, Router, Where};

/// The seed every run uses.
const SEED_FIXED: u64 = 0x5EED_0044;
/// Shapes per seed.
const SHAPES: u64 = 600;
/// Changes per seed.
const CHANGES: usize = 300;

fn lit(rng: &mut StdRng, col: &str) -> String {
    let c = COLS.iter().find(|c| c.name == col).expect("column");
    format!(
        "'{}'",
        c.pool.choose(rng).unwrap_or(&"0").replace('\'', "''")
    )
}

/// A where clause built mostly from the indexable forms.
fn indexable(rng: &mut StdRng, depth: u32) -> String {
    let col = *[
        "i2", "i4", "i8", "n", "t", "v", "c", "u", "d", "ts", "tz", "iv", "f8", "e", "b",
    ]
    .choose(rng)
    .unwrap_or(&"i4");
    let op = *["<", "<=", ">", ">="].choose(rng).unwrap_or(&"<");
    let clause = match rng.gen_range(0..10) {
        0 | 1 => format!("{col} = {}", lit(rng, col)),
        2 => format!("{} = {col}", lit(rng, col)),
        3 => format!("{col} IN ({}, {})", lit(rng, col), lit(rng, col)),
        4 => format!(
            "{} = ANY(ai)",
            ["1", "2", "3", "4"].choose(rng).unwrap_or(&"1")
        ),
        5 => format!(
            "ai @> {}",
            ["'{1}'", "'{1,2}'", "'{2,2}'", "'{3}'", "ARRAY[1, 3]"]
                .choose(rng)
                .unwrap_or(&"'{1}'")
        ),
        6 if col != "e" && col != "b" => format!("{col} {op} {}", lit(rng, col)),
        6 => format!("{col} = {}", lit(rng, col)),
        7 => format!(
            "i4 BETWEEN {} AND {}",
            rng.gen_range(-5..50),
            rng.gen_range(-5..50)
        ),
        8 => format!(
            "{} LIKE '{}%'",
            ["t", "c"].choose(rng).unwrap_or(&"t"),
            ["", "a", "ab", "h", "A", "a\\%", "a "]
                .choose(rng)
                .unwrap_or(&"a")
        ),
        _ => Gen { rng }.boolean(1),
    };
    if depth == 0 {
        return clause;
    }
    match rng.gen_range(0..4) {
        0 => format!("({clause}) AND ({})", indexable(rng, depth - 1)),
        1 => format!("({clause}) OR ({})", indexable(rng, depth - 1)),
        _ => clause,
    }
}

/// A row of pool values with NULLs, and now and then a value that does not decode (only the
/// router's safe over-inclusion can answer for it, and only where nothing else is false).
fn random_row(rng: &mut StdRng, id: usize) -> Vec<Value> {
    let mut row = vec![Value::Text(Bytes::from(id.to_string()))];
    for c in COLS {
        if rng.gen_ratio(1, 8) {
            row.push(Value::Null);
        } else if rng.gen_ratio(1, 30) {
            row.push(Value::Text(Bytes::from_static(b"{not a value")));
        } else {
            let v = c.pool.choose(rng).unwrap_or(&"0");
            let v = if c.name == "i4" && rng.gen() {
                rng.gen_range(-5..50).to_string()
            } else {
                v.to_string()
            };
            row.push(Value::Text(Bytes::from(v)));
        }
    }
    row
}

fn check_all(router: &Router, shapes: &[Where], rng: &mut StdRng, seed: u64) {
    for id in 0..CHANGES {
        let old = random_row(rng, id);
        let new = random_row(rng, id);
        let change = match rng.gen_range(0..3) {
            0 => Change::Insert(&new),
            1 => Change::Update {
                old: &old,
                new: &new,
            },
            _ => Change::Delete(&old),
        };
        let (got, want) = (router.affected(&change), router.affected_by_scan(&change));
        let differing: Vec<String> = got
            .iter()
            .filter(|id| !want.contains(id))
            .chain(want.iter().filter(|id| !got.contains(id)))
            .map(|&id| format!("shape {id}: {}", shapes[usize::try_from(id).unwrap()].sql()))
            .collect();
        assert!(
            differing.is_empty(),
            "seed {seed}, change {change:?}: index and scan differ on\n{}",
            differing.join("\n")
        );
    }
}

fn run_seed(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let relation = common::relation();
    let mut router = Router::new(&relation);
    let mut added = Vec::new();
    while (added.len() as u64) < SHAPES {
        let text = indexable(&mut rng, 2);
        let Ok(w) = Where::new(&text, &relation, &[]) else {
            continue;
        };
        let id = added.len() as u64;
        router.add(id, if rng.gen_ratio(1, 50) { None } else { Some(&w) });
        added.push(w);
    }
    check_all(&router, &added, &mut rng, seed);
    for id in 0..SHAPES {
        if rng.gen() {
            assert!(router.remove(id));
        }
    }
    check_all(&router, &added, &mut rng, seed);
    for (id, w) in added.iter().enumerate() {
        router.add(id as u64, Some(w));
    }
    assert_eq!(router.len() as u64, SHAPES);
    check_all(&router, &added, &mut rng, seed);
}

#[test]
fn affected_equals_brute_force() {
    run_seed(SEED_FIXED);
    run_seed(common::random_seed("router"));
}

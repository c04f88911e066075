//! The router against brute force: for random shapes (indexable forms, their AND/OR
//! combinations and arbitrary clauses) and random changes, `affected` must equal evaluating
//! every shape, also after shapes are removed and re-added. Shapes with subqueries too, their
//! value sets changing between rounds: `affected` must also hold every shape whose clause is
//! true (`includes_in`) on the old or new row; and routing them stays indexed. A match
//! `affected_certain` calls certain must have its clause true on the row.

mod common;

use bytes::Bytes;
use common::{Gen, COLS};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use syncline_core::tuple::Value;
use syncline_where::{Change, Router, Row, RowTypes, Where};

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

/// Checks `affected` against the scan, and `affected_certain` against `affected` and the
/// shapes' clauses (`filtered[id]`: shape `id` was added with its clause). Returns how many
/// matches were certain.
fn check_all(
    router: &Router,
    shapes: &[Where],
    filtered: &[bool],
    rng: &mut StdRng,
    seed: u64,
) -> usize {
    let types = RowTypes::of(&common::relation());
    let mut certain_matches = 0;
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
        let certain = router.affected_certain(&change);
        assert_eq!(
            certain.iter().map(|&(id, _)| id).collect::<Vec<_>>(),
            got,
            "seed {seed}: affected_certain finds the shapes affected finds"
        );
        for (id, _) in certain.into_iter().filter(|&(_, certain)| certain) {
            certain_matches += 1;
            let row = match change {
                Change::Insert(row) | Change::Delete(row) => row,
                Change::Update { .. } => panic!("seed {seed}: an update's match is never certain"),
            };
            let i = usize::try_from(id).unwrap();
            assert!(
                !filtered[i] || shapes[i].includes(&Row::new(&types, row)),
                "seed {seed}, change {change:?}: shape {id} ({}) is certain but its clause is not true",
                shapes[i].sql()
            );
        }
    }
    certain_matches
}

fn run_seed(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let relation = common::relation();
    let mut router = Router::new(&relation);
    let mut added = Vec::new();
    let mut filtered = Vec::new();
    while (added.len() as u64) < SHAPES {
        let text = indexable(&mut rng, 2);
        let Ok(w) = Where::new(&text, &relation, &[]) else {
            continue;
        };
        let id = added.len() as u64;
        let with_clause = !rng.gen_ratio(1, 50);
        router.add(id, with_clause.then_some(&w));
        added.push(w);
        filtered.push(with_clause);
    }
    let mut certain = check_all(&router, &added, &filtered, &mut rng, seed);
    for id in 0..SHAPES {
        if rng.gen() {
            assert!(router.remove(id));
        }
    }
    certain += check_all(&router, &added, &filtered, &mut rng, seed);
    for (id, w) in added.iter().enumerate() {
        router.add(id as u64, Some(w));
    }
    assert_eq!(router.len() as u64, SHAPES);
    certain += check_all(&router, &added, &vec![true; added.len()], &mut rng, seed);
    assert!(certain > 0, "seed {seed}: no match was certain");
}

#[test]
fn affected_equals_brute_force() {
    run_seed(SEED_FIXED);
    run_seed(common::random_seed("router"));
}

/// Shapes with subqueries per seed.
const SUBQUERY_SHAPES: usize = 200;
/// Changes per round of the subquery seeds.
const SUBQUERY_CHANGES: usize = 150;

/// Values a subquery's select-list column may take, by column name.
fn pool(column: &str) -> &'static [&'static str] {
    match column {
        "id" | "org" | "parent_id" => &["1", "2", "3", "4", "5", "6", "7"],
        "name" | "region" => &["a", "ab", "b", "x", "eu", "us"],
        "active" | "flag" | "big" => &["t", "f", "true"],
        "score" => &["1.5", "1.50", "2", "0", "3"],
        "code" => &["ab", "a", "x", "ab  "],
        "mood" => &["sad", "ok", "happy"],
        "ratio" => &["0", "-0", "1.5", "NaN"],
        "span" => &["1 day", "24:00:00", "1 mon", "30 days"],
        _ => &["1"],
    }
}

/// A child row from the pools, with NULLs and now and then a value that does not decode.
fn child_row(rng: &mut StdRng, id: usize) -> Vec<Value> {
    let relation = common::family::relation("child");
    let mut row = vec![Value::Text(Bytes::from(id.to_string()))];
    for c in &relation.columns[1..] {
        row.push(if rng.gen_ratio(1, 7) {
            Value::Null
        } else if rng.gen_ratio(1, 40) {
            Value::Text(Bytes::from_static(b"{not a value"))
        } else {
            Value::Text(Bytes::from(
                pool(&c.name).choose(rng).unwrap_or(&"1").to_string(),
            ))
        });
    }
    row
}

/// A shape with subqueries, its value sets as the router holds them and as `Views`.
struct SubShape {
    filter: Where,
    views: common::family::SetViews,
}

/// A random tuple for subquery `s`.
fn tuple(rng: &mut StdRng, s: &syncline_where::Subquery) -> Vec<&'static str> {
    s.columns
        .iter()
        .map(|&c| {
            *pool(&s.relation.columns[c].name)
                .choose(rng)
                .unwrap_or(&"1")
        })
        .collect()
}

fn sub_insert(router: &mut Router, id: u64, shape: &mut SubShape, i: usize, t: &[&str]) {
    router.view_insert(id, i, t);
    let opt: Vec<Option<&str>> = t.iter().map(|v| Some(*v)).collect();
    let n = shape.filter.subqueries()[i].normalize(&opt);
    if !shape.views.0[i].contains(&n) {
        shape.views.0[i].push(n);
    }
}

fn sub_remove(router: &mut Router, id: u64, shape: &mut SubShape, i: usize, t: &[&str]) {
    router.view_remove(id, i, t);
    let opt: Vec<Option<&str>> = t.iter().map(|v| Some(*v)).collect();
    let n = shape.filter.subqueries()[i].normalize(&opt);
    shape.views.0[i].retain(|x| *x != n);
}

/// `affected` equals the scan, and holds every shape whose clause is true on the old or new
/// row with its value sets.
fn check_subqueries(router: &Router, shapes: &[Option<SubShape>], rng: &mut StdRng, seed: u64) {
    let types = RowTypes::of(&common::family::relation("child"));
    for n in 0..SUBQUERY_CHANGES {
        let (old, new) = (child_row(rng, n), child_row(rng, n));
        let change = match rng.gen_range(0..3) {
            0 => Change::Insert(&new),
            1 => Change::Update {
                old: &old,
                new: &new,
            },
            _ => Change::Delete(&old),
        };
        let (got, scan) = (router.affected(&change), router.affected_by_scan(&change));
        let differing: Vec<String> = got
            .iter()
            .filter(|id| !scan.contains(id))
            .chain(scan.iter().filter(|id| !got.contains(id)))
            .map(|&id| match &shapes[usize::try_from(id).unwrap()] {
                Some(s) => format!("shape {id}: {} with sets {:?}", s.filter.sql(), s.views),
                None => format!("shape {id} (removed)"),
            })
            .collect();
        assert!(
            differing.is_empty(),
            "seed {seed}, change {change:?}: index and scan differ on\n{}",
            differing.join("\n")
        );
        let rows: Vec<&[Value]> = match change {
            Change::Insert(r) | Change::Delete(r) => vec![r],
            Change::Update { old, new } => vec![old, new],
        };
        for (id, shape) in shapes.iter().enumerate() {
            let Some(shape) = shape else { continue };
            let id = u64::try_from(id).unwrap();
            let holds = rows.iter().any(|values| {
                shape
                    .filter
                    .includes_in(&Row::new(&types, values), &shape.views)
            });
            assert!(
                !holds || got.contains(&id),
                "seed {seed}, change {change:?}: shape {id} ({}) with sets {:?} missed",
                shape.filter.sql(),
                shape.views
            );
        }
    }
}

fn run_subquery_seed(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let relation = common::family::relation("child");
    let params = ["1".to_string(), "1.5".to_string(), "eu".to_string()];
    let mut router = Router::new(&relation);
    let mut shapes: Vec<Option<SubShape>> = Vec::new();
    while shapes.len() < SUBQUERY_SHAPES {
        let text = common::family::Gen { rng: &mut rng }.clause(2);
        let Ok(filter) = Where::with_tables(&text, &relation, &params, &common::family::tables)
        else {
            continue;
        };
        let id = u64::try_from(shapes.len()).unwrap();
        router.add(id, Some(&filter));
        let mut shape = SubShape {
            views: common::family::SetViews(vec![Vec::new(); filter.subqueries().len()]),
            filter,
        };
        for i in 0..shape.filter.subqueries().len() {
            for _ in 0..rng.gen_range(0..4) {
                let t = tuple(&mut rng, &shape.filter.subqueries()[i].clone());
                sub_insert(&mut router, id, &mut shape, i, &t);
            }
        }
        shapes.push(Some(shape));
    }
    check_subqueries(&router, &shapes, &mut rng, seed);
    // Sets change; some shapes go and come back with fresh sets.
    for (id, slot) in shapes.iter_mut().enumerate() {
        let Some(shape) = slot.as_mut() else {
            continue;
        };
        let id64 = u64::try_from(id).unwrap();
        for i in 0..shape.filter.subqueries().len() {
            let s = shape.filter.subqueries()[i].clone();
            for _ in 0..3 {
                let t = tuple(&mut rng, &s);
                if rng.gen() {
                    sub_insert(&mut router, id64, shape, i, &t);
                } else {
                    sub_remove(&mut router, id64, shape, i, &t);
                }
            }
        }
        if rng.gen_ratio(1, 4) {
            assert!(router.remove(id64));
            *slot = None;
        }
    }
    check_subqueries(&router, &shapes, &mut rng, seed);
    for (id, slot) in shapes.iter_mut().enumerate() {
        if slot.is_none() && rng.gen() {
            let text = common::family::Gen { rng: &mut rng }.clause(1);
            if let Ok(filter) =
                Where::with_tables(&text, &relation, &params, &common::family::tables)
            {
                let id64 = u64::try_from(id).unwrap();
                router.add(id64, Some(&filter));
                *slot = Some(SubShape {
                    views: common::family::SetViews(vec![Vec::new(); filter.subqueries().len()]),
                    filter,
                });
            }
        }
    }
    check_subqueries(&router, &shapes, &mut rng, seed);
    // Removing every shape leaves nothing behind.
    for (id, slot) in shapes.iter_mut().enumerate() {
        if slot.take().is_some() {
            assert!(router.remove(u64::try_from(id).unwrap()));
        }
    }
    assert!(router.is_empty());
    assert_eq!(router.unindexed(), 0);
}

#[test]
fn subquery_routing_equals_brute_force() {
    run_subquery_seed(SEED_FIXED);
    run_subquery_seed(common::random_seed("router subqueries"));
}

/// 10,000 shapes `parent_id IN (SELECT id FROM parent WHERE id = k)`, each with the set
/// `{k}`: a child change finds its one shape through the index, not by evaluating 10k clauses.
#[test]
fn subquery_routing_is_indexed() {
    const SHAPES: u64 = 10_000;
    let relation = common::family::relation("child");
    let mut router = Router::new(&relation);
    for k in 0..SHAPES {
        let w = Where::with_tables(
            &format!("parent_id IN (SELECT id FROM parent WHERE id = {k})"),
            &relation,
            &[],
            &common::family::tables,
        )
        .unwrap();
        router.add(k, Some(&w));
        router.view_insert(k, 0, &[&k.to_string()]);
    }
    assert_eq!(router.unindexed(), 0);
    let row = |parent: u64| -> Vec<Value> {
        let mut v = vec![Value::Null; relation.columns.len()];
        v[0] = Value::Text(Bytes::from_static(b"1"));
        v[1] = Value::Text(Bytes::from(parent.to_string()));
        v
    };
    let started = std::time::Instant::now();
    for parent in 0..1_000 {
        let r = row(parent * 7 % SHAPES);
        assert_eq!(
            router.affected(&Change::Insert(&r)),
            vec![parent * 7 % SHAPES]
        );
    }
    let indexed = started.elapsed();
    let started = std::time::Instant::now();
    for parent in 0..10 {
        let r = row(parent);
        assert_eq!(router.affected_by_scan(&Change::Insert(&r)), vec![parent]);
    }
    let scanned = started.elapsed() * 100;
    println!("1000 changes: indexed {indexed:?}, by evaluating every shape {scanned:?}");
    assert!(
        indexed * 20 < scanned,
        "indexed routing ({indexed:?}) is not much faster than a scan ({scanned:?})"
    );
    // The set moves: the shape follows its value.
    router.view_remove(5, 0, &["5"]);
    router.view_insert(5, 0, &["123456"]);
    assert_eq!(router.affected(&Change::Insert(&row(5))), Vec::<u64>::new());
    assert_eq!(router.affected(&Change::Insert(&row(123_456))), vec![5]);
}

//! A parent/child/org schema for subquery tests: its DDL, its relation descriptions (built by
//! hand, as the catalog would give them), and the table callback of `Where::with_tables`.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use syncline_core::relation::{ColumnDesc, PgType, RelationDesc, ReplicaIdentity, TypeKind};
use syncline_where::TableRef;

/// The tables: name and columns (name, SQL type). The first column is the primary key.
pub const TABLES: &[(&str, &[(&str, &str)])] = &[
    (
        "child",
        &[
            ("id", "int4"),
            ("parent_id", "int4"),
            ("org", "int4"),
            ("name", "text"),
            ("flag", "bool"),
            ("score", "numeric"),
            ("code", "char(3)"),
            ("mood", "mood"),
            ("ratio", "float8"),
            ("span", "interval"),
        ],
    ),
    (
        "parent",
        &[
            ("id", "int4"),
            ("org", "int4"),
            ("name", "text"),
            ("active", "bool"),
            ("score", "numeric"),
            ("code", "char(5)"),
            ("mood", "mood"),
            ("ratio", "float8"),
            ("span", "interval"),
        ],
    ),
    (
        "org",
        &[("id", "int4"), ("region", "text"), ("big", "bool")],
    ),
];

/// DDL of the schema.
pub fn create_sql() -> String {
    let mut sql = String::from("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');");
    for (name, columns) in TABLES {
        let cols: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(i, (c, t))| format!("{c} {t}{}", if i == 0 { " PRIMARY KEY" } else { "" }))
            .collect();
        sql.push_str(&format!("CREATE TABLE {name} ({});", cols.join(", ")));
    }
    sql
}

fn pg_type(sql_type: &str) -> PgType {
    let base = |name: &str| PgType {
        oid: 0,
        name: name.into(),
        kind: TypeKind::Base,
    };
    match sql_type {
        t if t.starts_with("char(") => base("bpchar"),
        "mood" => PgType {
            oid: 0,
            name: "mood".into(),
            kind: TypeKind::Enum,
        },
        t => base(t),
    }
}

/// The relation of table `name` (schema `public`).
pub fn relation(name: &str) -> RelationDesc {
    let (_, columns) = TABLES
        .iter()
        .find(|(t, _)| *t == name)
        .expect("table of the schema");
    RelationDesc {
        oid: 1,
        schema: "public".into(),
        name: name.into(),
        columns: columns
            .iter()
            .enumerate()
            .map(|(i, (c, t))| ColumnDesc {
                name: c.to_string(),
                pg_type: pg_type(t),
                type_mod: -1,
                not_null: i == 0,
                pk_index: (i == 0).then_some(0),
                array_dims: 0,
            })
            .collect(),
        replica_identity: ReplicaIdentity::Full,
    }
}

/// The table callback: the schema's tables in `public`.
pub fn tables(table: &TableRef) -> Option<RelationDesc> {
    (table.schema == "public" && TABLES.iter().any(|(t, _)| *t == table.name))
        .then(|| relation(&table.name))
}

/// Value sets held as tuples of normal texts (`None` for NULL), answering every [`Views`]
/// question exactly (by scanning).
#[derive(Debug, Clone, Default)]
pub struct SetViews(pub Vec<Vec<Vec<Option<String>>>>);

impl syncline_where::Views for SetViews {
    fn contains(&self, subquery: usize, values: &[&str]) -> bool {
        self.0[subquery].iter().any(|t| {
            t.len() == values.len() && t.iter().zip(values).all(|(a, b)| a.as_deref() == Some(*b))
        })
    }

    fn contains_null(&self, subquery: usize) -> bool {
        self.0[subquery]
            .iter()
            .any(|t| t.iter().any(Option::is_none))
    }

    fn is_empty(&self, subquery: usize) -> bool {
        self.0[subquery].is_empty()
    }

    fn contains_partial(&self, subquery: usize, values: &[Option<&str>]) -> bool {
        self.0[subquery].iter().any(|t| {
            let pairs = t.iter().zip(values);
            let mut some_null = false;
            for (a, b) in pairs {
                match (a.as_deref(), b) {
                    (Some(a), Some(b)) if a != *b => return false,
                    (Some(_), Some(_)) => {}
                    _ => some_null = true,
                }
            }
            some_null
        })
    }
}

/// One of `items`.
pub fn pick<'a>(rng: &mut StdRng, items: &[&'a str]) -> &'a str {
    items.choose(rng).copied().unwrap_or("")
}

/// Random clauses over `child` with subqueries.
pub struct Gen<'a> {
    pub rng: &'a mut StdRng,
}

impl Gen<'_> {
    fn pick<'s>(&mut self, items: &[&'s str]) -> &'s str {
        pick(self.rng, items)
    }

    /// A clause of at most `depth` levels of AND/OR/NOT.
    pub fn clause(&mut self, depth: u32) -> String {
        if depth == 0 || self.rng.gen_ratio(1, 3) {
            return self.leaf();
        }
        let d = depth - 1;
        match self.rng.gen_range(0..4) {
            0 => format!("({} AND {})", self.clause(d), self.clause(d)),
            1 => format!("({} OR {})", self.clause(d), self.clause(d)),
            2 => format!("NOT ({})", self.clause(d)),
            _ => format!(
                "({} AND {} OR {})",
                self.clause(d),
                self.clause(d),
                self.clause(d)
            ),
        }
    }

    fn leaf(&mut self) -> String {
        if self.rng.gen_ratio(2, 5) {
            return self
                .pick(&[
                    "org = $1",
                    "flag",
                    "NOT flag",
                    "score > $2",
                    "name LIKE 'a%'",
                    "parent_id IS NULL",
                    "org IN (1, 2, NULL)",
                    "org NOT IN (3, 4)",
                    "code = 'ab'",
                    "mood <> 'sad'",
                    "score BETWEEN 1 AND 2",
                ])
                .to_string();
        }
        let (left, cols, table) = *[
            ("parent_id", "id", "parent"),
            ("org", "org", "parent"),
            ("org", "id", "org"),
            ("name", "name", "parent"),
            ("flag", "active", "parent"),
            ("score", "score", "parent"),
            ("code", "code", "parent"),
            ("mood", "mood", "parent"),
            ("ratio", "ratio", "parent"),
            ("span", "span", "parent"),
            ("parent_id", "parent_id", "child"),
            ("(parent_id, org)", "id, org", "parent"),
            ("(name, flag)", "name, active", "parent"),
            ("(org, code)", "org, code", "parent"),
            ("(org, mood)", "org, mood", "parent"),
            ("(ratio, span)", "ratio, span", "parent"),
        ]
        .choose(self.rng)
        .expect("pairs");
        let filter = match self.rng.gen_range(0..3) {
            0 => String::new(),
            _ => format!(" WHERE {}", self.filter(table, 1)),
        };
        let sub = format!("SELECT {cols} FROM {table}{filter}");
        match self.rng.gen_range(0..4) {
            0 => format!("{left} NOT IN ({sub})"),
            1 => format!("NOT ({left} IN ({sub}))"),
            _ => format!("{left} IN ({sub})"),
        }
    }

    /// A subquery's own clause over `table`, with a nested subquery above `level` 1 not.
    fn filter(&mut self, table: &str, level: u32) -> String {
        let mut plain: Vec<&str> = match table {
            "parent" => vec![
                "active",
                "NOT active",
                "org = $1",
                "score >= $2",
                "name <> 'x'",
                "mood = 'ok'",
                "code = 'ab'",
                "org IS NULL",
            ],
            "org" => vec!["big", "region = $3", "region IN ('eu', 'us')", "id > 1"],
            _ => vec!["flag", "org = $1", "score IS NOT NULL", "name = 'a'"],
        };
        if level < 2 {
            plain.extend(match table {
                "parent" => [
                    "org IN (SELECT id FROM org WHERE big)",
                    "id IN (SELECT parent_id FROM child WHERE flag)",
                    "org NOT IN (SELECT id FROM org WHERE region = $3)",
                ],
                "org" => [
                    "id IN (SELECT org FROM parent WHERE active)",
                    "id NOT IN (SELECT org FROM child WHERE flag)",
                    "(id, region) IN (SELECT org, name FROM parent)",
                ],
                _ => [
                    "parent_id IN (SELECT id FROM parent WHERE active)",
                    "org NOT IN (SELECT id FROM org)",
                    "(org, name) IN (SELECT id, region FROM org)",
                ],
            });
        }
        let one = self.pick(&plain).to_string();
        match self.rng.gen_range(0..4) {
            0 => format!("({one} AND {})", self.pick(&plain)),
            1 => format!("({one} OR {})", self.pick(&plain)),
            _ => one,
        }
    }
}

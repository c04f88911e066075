//! Shared by the integration tests: a table covering every type of the language, its relation
//! description, random rows with edge values, random where clauses from the grammar, and a
//! seed that is fixed or printed.

#![allow(dead_code)]

pub mod family;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use syncline_core::relation::{ColumnDesc, PgType, RelationDesc, ReplicaIdentity, TypeKind};

/// Columns of the test table: name, SQL type, catalog type name, kind, pool of literal values.
pub struct Col {
    pub name: &'static str,
    pub sql_type: &'static str,
    pub pool: &'static [&'static str],
}

pub const COLS: &[Col] = &[
    Col {
        name: "i2",
        sql_type: "int2",
        pool: &["0", "1", "-1", "7", "32767", "-32768", "300"],
    },
    Col {
        name: "i4",
        sql_type: "int4",
        pool: &[
            "0",
            "1",
            "-1",
            "3",
            "42",
            "2147483647",
            "-2147483648",
            "100000",
        ],
    },
    Col {
        name: "i8",
        sql_type: "int8",
        pool: &[
            "0",
            "1",
            "-5",
            "42",
            "9223372036854775807",
            "-9223372036854775808",
            "3000000000",
        ],
    },
    Col {
        name: "f4",
        sql_type: "float4",
        pool: &[
            "0",
            "-0",
            "1.5",
            "0.1",
            "NaN",
            "Infinity",
            "-Infinity",
            "3.4e38",
            "1e-5",
            "42",
        ],
    },
    Col {
        name: "f8",
        sql_type: "float8",
        pool: &[
            "0",
            "-0",
            "1.5",
            "0.1",
            "NaN",
            "Infinity",
            "-Infinity",
            "1e300",
            "1e-5",
            "42",
            "0.30000000000000004",
        ],
    },
    Col {
        name: "n",
        sql_type: "numeric",
        pool: &[
            "0",
            "1.50",
            "-2.25",
            "NaN",
            "Infinity",
            "-Infinity",
            "123456789012345678901234567890.123",
            "0.00000000000000000001",
            "42",
            "3",
        ],
    },
    Col {
        name: "t",
        sql_type: "text",
        pool: &[
            "", "a", "abc", "ABC", "a%b", "a_b", "héllo", " x ", "a\\b", "Abc", "b",
        ],
    },
    Col {
        name: "v",
        sql_type: "varchar(20)",
        pool: &[
            "", "a", "abc", "zz", "ab%", "a\\", "%\\", "a_\\", "a  ", " a",
        ],
    },
    Col {
        name: "c",
        sql_type: "char(4)",
        pool: &["a", "ab", "abcd", "", " a", "a b", "A", "a%"],
    },
    Col {
        name: "b",
        sql_type: "bool",
        pool: &["true", "false"],
    },
    Col {
        name: "u",
        sql_type: "uuid",
        pool: &[
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "00000000-0000-0000-0000-000000000000",
            "ffffffff-ffff-ffff-ffff-ffffffffffff",
        ],
    },
    Col {
        name: "d",
        sql_type: "date",
        pool: &[
            "2024-01-31",
            "2024-02-29",
            "1999-12-31",
            "infinity",
            "-infinity",
            "0044-03-15 BC",
            "2000-01-01",
        ],
    },
    Col {
        name: "ts",
        sql_type: "timestamp",
        pool: &[
            "2024-01-31 10:00:00",
            "2024-02-29 23:59:59.5",
            "1999-12-31 00:00:00",
            "infinity",
            "2000-01-01 00:00:00.000001",
            "2024-03-10 02:30:00",
            "2024-11-03 01:30:00",
            "2024-04-07 02:30:00",
            "2024-10-27 02:59:59.5",
            "1900-01-01 00:00:00",
            "2150-07-01 12:00:00",
        ],
    },
    Col {
        name: "tz",
        sql_type: "timestamptz",
        pool: &[
            "2024-01-31 10:00:00+00",
            "2024-02-29 23:59:59.5+02",
            "1999-12-31 00:00:00-05:30",
            "-infinity",
            "2000-01-01 00:00:00+00",
            "2024-03-10 07:00:00+00",
            "2024-11-03 05:59:59.5+00",
            "2024-04-06 16:00:00+00",
            "2024-10-05 16:00:00+00",
            "2012-07-01 00:00:00+00",
            "2150-01-15 12:00:00+00",
        ],
    },
    Col {
        name: "iv",
        sql_type: "interval",
        pool: &[
            "1 day",
            "-1 mons 2 days 03:00:00",
            "00:00:00",
            "1 year",
            "30 days",
            "1 mon",
            "36:00:00",
        ],
    },
    Col {
        name: "j",
        sql_type: "jsonb",
        pool: &[
            r#"{"a": 1, "b": [1, 2]}"#,
            r#"[1, "a", null]"#,
            r#""x""#,
            "null",
            "1.0",
            r#"{"a": {"c": "x"}}"#,
        ],
    },
    Col {
        name: "ai",
        sql_type: "int4[]",
        pool: &["{1,2,3}", "{}", "{NULL,1}", "{{1,2},{3,4}}", "{3}", "{2,2}"],
    },
    Col {
        name: "at",
        sql_type: "text[]",
        pool: &["{a,b}", "{\"\",NULL}", "{abc}", "{}"],
    },
    Col {
        name: "e",
        sql_type: "mood",
        pool: &["sad", "ok", "happy"],
    },
    Col {
        name: "tm",
        sql_type: "time",
        pool: &[
            "00:00:00",
            "12:30:00.5",
            "23:59:59.999999",
            "24:00:00",
            "07:05:00",
        ],
    },
];

/// Zones for `timezone()`: IANA names with northern and southern daylight saving, half- and
/// quarter-hour offsets, a skipped day, names in other cases, fixed and history-based
/// abbreviations, POSIX specs (offsets west), intervals (some with days), columns, a bad name,
/// NULL. (POSIX specs with daylight-saving rules are not supported: `docs/where-language.md`.)
pub const ZONES: &[&str] = &[
    "'UTC'",
    "'America/New_York'",
    "'america/new_york'",
    "'Europe/Berlin'",
    "'EUROPE/LONDON'",
    "'Australia/Sydney'",
    "'Australia/Lord_Howe'",
    "'America/Santiago'",
    "'Asia/Kolkata'",
    "'Asia/Kathmandu'",
    "'Pacific/Chatham'",
    "'Pacific/Apia'",
    "'Europe/Moscow'",
    "'Etc/GMT+5'",
    "'EST'",
    "'pst'",
    "'CEST'",
    "'MSK'",
    "'ART'",
    "'UTC+3'",
    "'+05:30'",
    "'<+0330>-3:30'",
    "'-14'",
    "'no/such_zone'",
    "NULL",
    "'1 hour'::interval",
    "'-05:30:00.5'::interval",
    "'1 day'::interval",
    "iv",
    "t",
];

/// DDL of the test table `t` (plus an `id` primary key first).
pub fn create_table_sql() -> String {
    let cols: Vec<String> = COLS
        .iter()
        .map(|c| format!("\"{}\" {}", c.name, c.sql_type))
        .collect();
    format!("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy'); CREATE TABLE t (id int4 PRIMARY KEY, {});", cols.join(", "))
}

/// Session settings Syncline uses (and the language assumes).
/// Runs `check` with a client of a new database, with [`SESSION_SQL`] applied, on a private
/// cluster.
pub fn with_server(database: &str, check: impl AsyncFnOnce(&tokio_postgres::Client)) {
    let cluster = syncline_testkit::PgCluster::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let db = cluster.create_database(database).await;
        let client = cluster.connect(&db).await;
        client
            .batch_execute(SESSION_SQL)
            .await
            .expect("session settings");
        check(&client).await;
    });
}

pub const SESSION_SQL: &str = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 1;";

fn pg_type(sql_type: &str) -> PgType {
    let base = |name: &str| PgType {
        oid: 0,
        name: name.into(),
        kind: TypeKind::Base,
    };
    match sql_type {
        "varchar(20)" => base("varchar"),
        "char(4)" => base("bpchar"),
        "mood" => PgType {
            oid: 0,
            name: "mood".into(),
            kind: TypeKind::Enum,
        },
        s if s.ends_with("[]") => {
            let elem = base(s.trim_end_matches("[]"));
            PgType {
                oid: 0,
                name: format!("_{}", elem.name),
                kind: TypeKind::Array(Box::new(elem)),
            }
        }
        s => base(s),
    }
}

/// The relation description of `t`, built by hand.
pub fn relation() -> RelationDesc {
    let mut columns = vec![ColumnDesc {
        name: "id".into(),
        pg_type: pg_type("int4"),
        type_mod: -1,
        not_null: true,
        pk_index: Some(0),
        array_dims: 0,
    }];
    columns.extend(COLS.iter().map(|c| ColumnDesc {
        name: c.name.into(),
        pg_type: pg_type(c.sql_type),
        type_mod: -1,
        not_null: false,
        pk_index: None,
        array_dims: 0,
    }));
    RelationDesc {
        oid: 1,
        schema: "public".into(),
        name: "t".into(),
        columns,
        replica_identity: ReplicaIdentity::Full,
    }
}

/// A seed: `SYNCLINE_WHERE_SEED` if set, else from the clock. Printed so a failure can be
/// replayed.
pub fn random_seed(label: &str) -> u64 {
    let seed = std::env::var("SYNCLINE_WHERE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
                .unwrap_or(1)
        });
    println!("{label}: random seed {seed} (replay with SYNCLINE_WHERE_SEED={seed})");
    seed
}

/// An INSERT of `rows` random rows with ids from 1; about one value in six is NULL.
pub fn insert_rows_sql(rng: &mut StdRng, rows: usize) -> String {
    let mut values = Vec::new();
    for id in 1..=rows {
        let mut row = vec![id.to_string()];
        for c in COLS {
            if rng.gen_ratio(1, 6) {
                row.push("NULL".into());
            } else {
                let v = c.pool.choose(rng).unwrap_or(&"0");
                row.push(format!("'{}'", v.replace('\'', "''")));
            }
        }
        values.push(format!("({})", row.join(", ")));
    }
    format!("INSERT INTO t VALUES {};", values.join(", "))
}

/// Random where clauses from the grammar the language supports.
pub struct Gen<'a> {
    pub rng: &'a mut StdRng,
}

impl Gen<'_> {
    fn pick<'s>(&mut self, items: &[&'s str]) -> &'s str {
        items.choose(self.rng).copied().unwrap_or("")
    }

    fn lit(&mut self, col: &str) -> String {
        let c = COLS.iter().find(|c| c.name == col).expect("column");
        let v = self.pick(c.pool);
        format!("'{}'", v.replace('\'', "''"))
    }

    /// A boolean expression of at most `depth` levels.
    pub fn boolean(&mut self, depth: u32) -> String {
        let leaf = depth == 0 || self.rng.gen_ratio(1, 3);
        if !leaf {
            let d = depth - 1;
            return match self.rng.gen_range(0..6) {
                0 => format!("({} AND {})", self.boolean(d), self.boolean(d)),
                1 => format!("({} OR {})", self.boolean(d), self.boolean(d)),
                2 => format!("NOT ({})", self.boolean(d)),
                3 => format!(
                    "({}) IS {}",
                    self.boolean(d),
                    self.pick(&[
                        "TRUE",
                        "NOT TRUE",
                        "FALSE",
                        "NOT FALSE",
                        "UNKNOWN",
                        "NOT UNKNOWN"
                    ])
                ),
                4 => format!(
                    "({} {} {})",
                    self.boolean(d),
                    self.pick(&["=", "<>", "<", ">="]),
                    self.boolean(d)
                ),
                _ => format!(
                    "({} AND {} OR {})",
                    self.boolean(d),
                    self.boolean(d),
                    self.boolean(d)
                ),
            };
        }
        self.predicate(depth)
    }

    fn predicate(&mut self, depth: u32) -> String {
        let cmp = self.pick(&["=", "<>", "<", "<=", ">", ">=", "!="]);
        match self.rng.gen_range(0..34) {
            0 => format!("{} {cmp} {}", self.int(depth), self.int(depth)),
            1 => format!("{} {cmp} {}", self.num(depth), self.num(depth)),
            2 => format!("{} {cmp} {}", self.float(depth), self.float(depth)),
            3 => format!("{} {cmp} {}", self.text(depth), self.text(depth)),
            4 => format!("{} IS {}NULL", self.any(depth), self.pick(&["", "NOT "])),
            5 => format!(
                "{} IS {}DISTINCT FROM {}",
                self.int(depth),
                self.pick(&["", "NOT "]),
                self.int(depth)
            ),
            6 => format!(
                "{} {}IN ({}, {}, {})",
                self.int(depth),
                self.pick(&["", "NOT "]),
                self.int(0),
                self.int(0),
                self.pick(&["NULL", "7", "1.5", "'3'"])
            ),
            7 => format!(
                "{} {}BETWEEN {}{} AND {}",
                self.num(depth),
                self.pick(&["", "NOT "]),
                self.pick(&["", "SYMMETRIC "]),
                self.num(0),
                self.num(0)
            ),
            8 => {
                let pattern = self.pick(&[
                    "'a%'", "'%b%'", "'a_c'", "'%'", "'A%'", "'a\\%b'", "'h_llo'", "''", "'%c'",
                ]);
                let op = self.pick(&["LIKE", "NOT LIKE", "ILIKE", "NOT ILIKE", "~~", "~~*", "!~~"]);
                format!("{} {op} {pattern}", self.text(depth))
            }
            9 if self.rng.gen() => format!("{} LIKE 'a#%%' ESCAPE '#'", self.text(depth)),
            9 => format!(
                "{} {} v",
                self.text(depth),
                self.pick(&["LIKE", "NOT ILIKE", "LIKE", "NOT LIKE"])
            ),
            10 => format!("{} {cmp} {}(ai)", self.int(0), self.pick(&["ANY", "ALL"])),
            11 => format!(
                "ai {} {}",
                self.pick(&["@>", "<@", "&&", "=", "<>", "<", ">"]),
                self.pick(&[
                    "'{1}'",
                    "'{1,2}'",
                    "ARRAY[3]",
                    "'{}'",
                    "ARRAY[1, NULL]",
                    "'{{1,2},{3,4}}'"
                ])
            ),
            12 => format!(
                "at {} {}",
                self.pick(&["@>", "<@", "&&", "="]),
                self.pick(&["'{a}'", "ARRAY['abc', 'b']", "'{\"\"}'", "'{}'"])
            ),
            13 => format!(
                "b {cmp} {}",
                self.pick(&["true", "false", "'t'", "NULL", "b"])
            ),
            14 => format!("u {cmp} {}", self.lit("u")),
            15 => format!("{} {cmp} {}", self.date(), self.date()),
            16 => format!(
                "{} {cmp} {}",
                self.pick(&["ts", "tz", "d", "ts + iv", "tz - iv", "d + iv"]),
                self.pick(&[
                    "'2024-02-01 00:00:00'::timestamp",
                    "tz",
                    "'2000-01-01'::date",
                    "ts"
                ])
            ),
            17 => format!("{} {cmp} {}", self.interval(), self.interval()),
            18 if self.rng.gen() => format!("e {} {}", self.pick(&["=", "<>"]), self.lit("e")),
            18 => format!(
                "tm {cmp} {}",
                self.pick(&["'12:30:00.5'", "tm", "'24:00'", "'07:05'::time"])
            ),
            19 => self.json(),
            20 => "b".into(),
            21 => format!(
                "{} {cmp} {}",
                self.pick(&["i4", "i8", "i2", "n", "f8", "f4", "f4 + 1", "f4 * i2"]),
                self.pick(&[
                    "i4",
                    "i8",
                    "n",
                    "f8",
                    "f4",
                    "1.5",
                    "42",
                    "3000000000",
                    "0.1",
                    "'0.1'"
                ])
            ),
            22 => format!(
                "{} {cmp} {}",
                self.pick(&[
                    "d - d",
                    "d - 1",
                    "d + 7",
                    "array_ndims(ai)",
                    "i4 & 3",
                    "i2 # i2",
                    "~ i4",
                    "@ i8"
                ]),
                self.int(0)
            ),
            23 | 24 => self.timezone(),
            26 | 27 => self.bpchar(),
            28..=30 => self.subscript(),
            31 => self.in_list(),
            _ => format!(
                "{} = {}",
                self.pick(&[
                    "lower(t)",
                    "upper(t)",
                    "t || v",
                    "concat(t, i4, b)",
                    "t || i4"
                ]),
                self.text(0)
            ),
        }
    }

    fn any(&mut self, depth: u32) -> String {
        match self.rng.gen_range(0..5) {
            0 => self.int(depth),
            1 => self.text(depth),
            2 => self.num(depth),
            3 => self.pick(&["j", "ai", "u", "tz", "iv", "e", "tm"]).into(),
            _ => format!("({})", self.boolean(depth.saturating_sub(1))),
        }
    }

    fn int(&mut self, depth: u32) -> String {
        if depth > 0 && self.rng.gen_ratio(1, 3) {
            let d = depth - 1;
            return match self.rng.gen_range(0..5) {
                0 => format!(
                    "({} {} {})",
                    self.int(d),
                    self.pick(&["+", "-", "*", "/", "%"]),
                    self.int(d)
                ),
                1 => format!("(- {})", self.int(d)),
                2 => format!("COALESCE({}, {})", self.int(d), self.int(d)),
                3 => format!(
                    "{}({}, {})",
                    self.pick(&["GREATEST", "LEAST"]),
                    self.int(d),
                    self.int(d)
                ),
                _ => format!("{}::int8", self.int(d)),
            };
        }
        match self.rng.gen_range(0..5) {
            0 => self
                .pick(&["0", "1", "-1", "42", "2147483647", "300", "'7'", "NULL"])
                .into(),
            _ => self.pick(&["i2", "i4", "i8"]).into(),
        }
    }

    fn num(&mut self, depth: u32) -> String {
        if depth > 0 && self.rng.gen_ratio(1, 3) {
            let d = depth - 1;
            return match self.rng.gen_range(0..3) {
                0 => format!(
                    "({} {} {})",
                    self.num(d),
                    self.pick(&["+", "-", "*", "/", "%"]),
                    self.num(d)
                ),
                1 => format!("{}::numeric", self.float(d)),
                _ => format!("(- {})", self.num(d)),
            };
        }
        match self.rng.gen_range(0..4) {
            0 => self
                .pick(&[
                    "1.5",
                    "0.1",
                    "-2.25",
                    "'NaN'::numeric",
                    "1e3",
                    "3",
                    "'1.500'::numeric",
                ])
                .into(),
            1 => self.pick(&["i4", "i8"]).into(),
            _ => "n".into(),
        }
    }

    fn float(&mut self, depth: u32) -> String {
        if depth > 0 && self.rng.gen_ratio(1, 3) {
            let d = depth - 1;
            return match self.rng.gen_range(0..3) {
                0 => format!(
                    "({} {} {})",
                    self.float(d),
                    self.pick(&["+", "-", "*", "/"]),
                    self.float(d)
                ),
                1 => format!("{}::float8", self.num(d)),
                _ => format!("({} ^ 2)", self.float(d)),
            };
        }
        self.pick(&[
            "f4",
            "f8",
            "f8",
            "f4",
            "'1.5'::float8",
            "'0.1'::float4",
            "'NaN'::float8",
            "0.1::float8",
        ])
        .into()
    }

    fn text(&mut self, depth: u32) -> String {
        if depth > 0 && self.rng.gen_ratio(1, 3) {
            let d = depth - 1;
            return match self.rng.gen_range(0..5) {
                0 => format!("lower({})", self.text(d)),
                1 => format!("upper({})", self.text(d)),
                2 => format!("({} || {})", self.text(d), self.text(d)),
                3 => format!("COALESCE({}, {})", self.text(d), self.text(d)),
                _ => format!(
                    "{}::text",
                    self.pick(&[
                        "i4", "n", "f8", "f4", "d", "ts", "tz", "iv", "u", "b", "ai", "j", "e",
                        "tm", "c"
                    ])
                ),
            };
        }
        match self.rng.gen_range(0..3) {
            0 => self.lit("t"),
            _ => self
                .pick(&["t", "v", "t", "c", "j ->> 'a'", "j ->> 0"])
                .into(),
        }
    }

    fn date(&mut self) -> String {
        self.pick(&[
            "d",
            "d + 1",
            "d - 30",
            "'2024-02-29'::date",
            "ts::date",
            "'2024-01-31'",
        ])
        .into()
    }

    fn interval(&mut self) -> String {
        self.pick(&[
            "iv",
            "'1 day'::interval",
            "justify_hours(iv)",
            "justify_days(iv)",
            "justify_interval(iv)",
            "(ts - '2024-01-01 00:00:00'::timestamp)",
            "(iv + iv)",
            "(- iv)",
            "'30 days'::interval",
        ])
        .into()
    }

    /// `timezone()` and `AT TIME ZONE` in both directions, compared through the offset they
    /// apply (so an hour off shows), against columns, and round trips.
    fn timezone(&mut self) -> String {
        let zone = self.pick(ZONES);
        let cmp = self.pick(&["=", "<>", "<", "<=", ">", ">="]);
        let offset = self.pick(&[
            "'00:00:00'::interval",
            "'-05:00:00'::interval",
            "'-04:00:00'::interval",
            "'01:00:00'::interval",
            "'02:00:00'::interval",
            "'05:30:00'::interval",
            "'11:00:00'::interval",
            "'-03:00:00'::interval",
        ]);
        match self.rng.gen_range(0..6) {
            0 => format!("(timezone({zone}, tz) - CAST(tz AS timestamp)) {cmp} {offset}"),
            1 => format!("(CAST(ts AS timestamptz) - (ts AT TIME ZONE {zone})) {cmp} {offset}"),
            2 => format!(
                "timezone({zone}, {}) {cmp} {}",
                self.pick(&["tz", "d", "'2024-03-10 07:00:00+00'", "NULL", "tz - iv"]),
                self.pick(&["ts", "'2024-03-10 02:30:00'::timestamp", "d"])
            ),
            3 => format!(
                "({} AT TIME ZONE {zone}) {cmp} {}",
                self.pick(&["ts", "ts + iv", "'2024-11-03 01:30:00'::timestamp"]),
                self.pick(&["tz", "'2024-11-03 06:00:00+00'::timestamptz"])
            ),
            4 => format!("timezone({zone}, timezone({zone}, tz)) {cmp} tz"),
            _ => format!(
                "timezone({zone}, timezone({}, ts)) {cmp} ts",
                self.pick(ZONES)
            ),
        }
    }

    /// `char(n)` beside every string type: comparisons (in bpchar or text, as Postgres
    /// resolves them), casts, concatenation, LIKE on the padded value, IN lists mixing
    /// constants and columns, common types.
    fn bpchar(&mut self) -> String {
        let cmp = self.pick(&["=", "<>", "<", "<=", ">", ">="]);
        match self.rng.gen_range(0..3) {
            0 => format!(
                "{} {cmp} {}",
                self.pick(&[
                    "c",
                    "c",
                    "c::text",
                    "lower(c)",
                    "c || 'x'",
                    "COALESCE(c, t)",
                    "COALESCE(t, c)",
                    "GREATEST(c, v)",
                    "LEAST(v, c)",
                    "concat(c, '|')",
                    "c::varchar",
                    "'ab  '::bpchar",
                    "(c || c)",
                ]),
                self.pick(&[
                    "'a'",
                    "'a  '",
                    "t",
                    "v",
                    "c",
                    "'ab'::text",
                    "'a '::varchar",
                    "''",
                    "' a'",
                    "'a b  '::bpchar",
                ])
            ),
            1 => self
                .pick(&[
                    "c LIKE 'a%'",
                    "c NOT LIKE '% '",
                    "c LIKE 'a_  '",
                    "c ILIKE 'A_%'",
                    "c LIKE t",
                    "t LIKE c",
                    "c LIKE v",
                    "like(c, 'a')",
                    "c ~~ 'a b%'",
                ])
                .into(),
            _ => self
                .pick(&[
                    "c IN ('a', 'ab  ', t)",
                    "c IN ('a', v)",
                    "c IN (t, v)",
                    "c NOT IN ('a', 'ab')",
                    "c NOT IN ('a', t, v)",
                    "c = ANY(at)",
                    "c = ANY(ARRAY['a', 'ab '])",
                    "c IS DISTINCT FROM v",
                    "c IS NOT DISTINCT FROM t",
                    "t IN (c, 'a ')",
                    "c BETWEEN 'a' AND t",
                ])
                .into(),
        }
    }

    /// Array subscripts and slices: in and out of range, NULL, numeric and column subscripts,
    /// several dimensions, slices with bounds left out.
    fn subscript(&mut self) -> String {
        let index = |g: &mut Self| {
            g.pick(&[
                "1",
                "2",
                "0",
                "3",
                "-1",
                "i2",
                "NULL",
                "1.5",
                "'2'",
                "2147483647",
                "i4",
                "2.5",
            ])
        };
        let bound = |g: &mut Self| g.pick(&["", "1", "2", "0", "i2", "NULL", "3", "-5"]);
        let cmp = self.pick(&["=", "<>", "<", ">="]);
        match self.rng.gen_range(0..6) {
            0 => format!("ai[{}] {cmp} {}", index(self), self.int(0)),
            1 => format!("ai[{}][{}] {cmp} {}", index(self), index(self), self.int(0)),
            2 => format!(
                "ai[{}:{}] {} {}",
                bound(self),
                bound(self),
                self.pick(&["=", "<>", "<", "@>"]),
                self.pick(&["'{1,2}'", "'{}'", "'{{1,2}}'", "'{{1},{3}}'", "ai"])
            ),
            3 => format!(
                "at[{}] {cmp} {}",
                index(self),
                self.pick(&["'a'", "t", "''"])
            ),
            4 => {
                let (array, int) = (
                    self.pick(&["ai[1:2][1]", "ai[:1][2:]", "ai[i2:i2 + 1]", "ai[2:][:1]"]),
                    self.pick(&["array_ndims(ai[1:1])", "(ARRAY[1, 2, 3])[i2]", "ai[i2][i2]"]),
                );
                match self.rng.gen_range(0..2) {
                    0 => format!(
                        "{array} {cmp} {}",
                        self.pick(&["'{{1},{3}}'", "'{{2}}'", "'{1}'", "'{}'", "ai"])
                    ),
                    _ => format!("{int} {cmp} {}", self.int(0)),
                }
            }
            _ => format!("ai[{}] IS {}NULL", index(self), self.pick(&["", "NOT "])),
        }
    }

    /// IN lists mixing columns and constants, which Postgres types item by item.
    fn in_list(&mut self) -> String {
        self.pick(&[
            "i4 IN (i2, 7, NULL)",
            "n IN (f4, 1)",
            "f4 IN (n, 0.1)",
            "t IN (v, 'a', 'b')",
            "i8 NOT IN (i4, 1, 2)",
            "f8 IN (1.5, f4, '0.1')",
            "i2 IN (1, 300, i4)",
            "f4 IN (0.1, 1.5)",
            "i4 IN (1.5, 2)",
        ])
        .into()
    }

    fn json(&mut self) -> String {
        match self.rng.gen_range(0..4) {
            0 => format!(
                "j @> {}",
                self.pick(&[
                    "'{\"a\": 1}'",
                    "'1'",
                    "'[1]'",
                    "'{\"a\": {}}'",
                    "'\"x\"'",
                    "'[\"a\"]'"
                ])
            ),
            1 => format!("j ? {}", self.pick(&["'a'", "'b'", "'x'"])),
            2 => format!(
                "j -> {} = {}",
                self.pick(&["'a'", "'b'", "0", "1", "-1"]),
                self.pick(&["'1'", "'1.0'", "'\"a\"'", "'[1, 2]'", "j"])
            ),
            _ => format!(
                "(j ->> {}) = {}",
                self.pick(&["'a'", "1", "0"]),
                self.pick(&["'1'", "'a'", "'[1, 2]'", "'{\"c\": \"x\"}'"])
            ),
        }
    }
}

//! The `electric-schema` header: one JSON object per selected column, as Electric's
//! `Electric.Schema` builds it.
//!
//! Per column: `type` (the `typname`; for arrays the element's, plus `dims`), `pk_index`
//! (0-based), `not_null: true` only when NOT NULL, and what the type modifier says:
//! `max_length` (varchar), `length` (bpchar, bit, varbit), `precision` (time and timestamp
//! types), `precision` + `scale` (numeric), `fields` and/or `precision` (interval), else the
//! raw `type_mod`. Modifiers are read against the element type for arrays (Postgres stores the
//! element's modifier on an array column). Keys come out sorted, columns sorted by name: that
//! is the order Electric's encoder gives small maps (≤ 32 keys; larger Erlang maps come out in
//! hash order, which a client cannot rely on anyway).

use serde_json::{Map, Value};
use syncline_core::{ColumnDesc, RelationDesc, TypeKind};

/// Dimensions reported for an array column whose dimensions were not declared (`attndims`
/// 0, e.g. made by `CREATE TABLE AS`): one, so the client still parses it as an array.
pub const ARRAY_DIMS_UNDECLARED: u32 = 1;

/// The header value for the columns of `relation` named in `selected` (all columns when
/// `None`); names not on the relation are skipped (the caller has validated them).
pub fn electric_schema(relation: &RelationDesc, selected: Option<&[String]>) -> String {
    let mut columns: Vec<&ColumnDesc> = relation
        .columns
        .iter()
        .filter(|c| selected.is_none_or(|names| names.contains(&c.name)))
        .collect();
    columns.sort_by(|a, b| a.name.cmp(&b.name));
    let mut object = Map::new();
    for column in columns {
        object.insert(column.name.clone(), Value::Object(column_schema(column)));
    }
    Value::Object(object).to_string()
}

fn column_schema(column: &ColumnDesc) -> Map<String, Value> {
    let (type_name, dims) = match &column.pg_type.kind {
        TypeKind::Array(element) => (
            element.name.as_str(),
            Some(column.array_dims.max(ARRAY_DIMS_UNDECLARED)),
        ),
        _ => (column.pg_type.name.as_str(), None),
    };
    let mut keys: Vec<(&str, Value)> = vec![("type", type_name.into())];
    if let Some(dims) = dims {
        keys.push(("dims", dims.into()));
    }
    if let Some(pk_index) = column.pk_index {
        keys.push(("pk_index", pk_index.into()));
    }
    if column.not_null {
        keys.push(("not_null", true.into()));
    }
    keys.extend(modifiers(type_name, column.type_mod));
    keys.sort_by_key(|(key, _)| *key);
    keys.into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect()
}

/// Types whose modifier is a fractional-seconds precision.
const TIME_TYPES: [&str; 5] = ["date", "time", "timetz", "timestamp", "timestamptz"];

/// The modifier keys, tried in Electric's clause order (first match wins).
fn modifiers(type_name: &str, type_mod: i32) -> Vec<(&'static str, Value)> {
    match type_name {
        "varchar" | "text" if type_mod > 0 => vec![("max_length", (type_mod - 4).into())],
        "bpchar" if type_mod > 0 => vec![("length", (type_mod - 4).into())],
        // No `> 0` guard here in Electric: an unbounded varbit reports `length: -1`.
        "bit" | "varbit" => vec![("length", type_mod.into())],
        "interval" if type_mod > -1 => interval_modifiers(type_mod),
        t if type_mod > 0 && TIME_TYPES.contains(&t) => vec![("precision", type_mod.into())],
        "numeric" if type_mod > -1 => {
            // typmod = ((precision << 16) | scale) + 4, both halves signed 16-bit.
            let packed = type_mod - 4;
            vec![
                ("precision", i32::from(high_half(packed)).into()),
                ("scale", i32::from(low_half(packed)).into()),
            ]
        }
        _ if type_mod > -1 => vec![("type_mod", type_mod.into())],
        _ => vec![],
    }
}

/// Interval typmod: field-range bits in the high 16 bits (all set = no fields), precision in
/// the low 16 (-1 = none). See Postgres's `INTERVAL_TYPMOD`.
fn interval_modifiers(type_mod: i32) -> Vec<(&'static str, Value)> {
    const ALL_FIELDS: i16 = 0x7FFF;
    // In Electric's order; Postgres's bit numbers (datetime.h: MONTH 1, YEAR 2, DAY 3, …).
    const UNITS: [(&str, i16); 6] = [
        ("YEAR", 1 << 2),
        ("MONTH", 1 << 1),
        ("DAY", 1 << 3),
        ("HOUR", 1 << 10),
        ("MINUTE", 1 << 11),
        ("SECOND", 1 << 12),
    ];
    let range = high_half(type_mod);
    let precision = low_half(type_mod);
    let mut out = Vec::new();
    if range != ALL_FIELDS {
        let units: Vec<&str> = UNITS
            .iter()
            .filter(|(_, mask)| range & mask != 0)
            .map(|(unit, _)| *unit)
            .collect();
        let fields = match units.as_slice() {
            [unit] => unit.to_string(),
            // An empty list prints as " TO ", as Elixir's interpolation of two nils does.
            _ => format!(
                "{} TO {}",
                units.first().unwrap_or(&""),
                units.last().unwrap_or(&"")
            ),
        };
        out.push(("fields", fields.into()));
    }
    if precision != -1 {
        out.push(("precision", i32::from(precision).into()));
    }
    out
}

/// The high signed 16 bits of a type modifier (Postgres packs two `int16` fields in it).
#[allow(
    clippy::cast_possible_truncation,
    reason = "the typmod packs two 16-bit halves"
)]
fn high_half(type_mod: i32) -> i16 {
    (type_mod >> 16) as i16
}

/// The low signed 16 bits of a type modifier.
#[allow(
    clippy::cast_possible_truncation,
    reason = "the typmod packs two 16-bit halves"
)]
fn low_half(type_mod: i32) -> i16 {
    type_mod as i16
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncline_core::{PgType, ReplicaIdentity};

    fn base(name: &str) -> PgType {
        PgType {
            oid: 1,
            name: name.into(),
            kind: TypeKind::Base,
        }
    }

    fn array_of(element: PgType) -> PgType {
        PgType {
            oid: 2,
            name: format!("_{}", element.name),
            kind: TypeKind::Array(Box::new(element)),
        }
    }

    fn col(name: &str, pg_type: PgType, type_mod: i32) -> ColumnDesc {
        ColumnDesc {
            name: name.into(),
            pg_type,
            type_mod,
            not_null: false,
            pk_index: None,
            array_dims: 0,
        }
    }

    fn relation(columns: Vec<ColumnDesc>) -> RelationDesc {
        RelationDesc {
            oid: 42,
            schema: "public".into(),
            name: "t".into(),
            columns,
            replica_identity: ReplicaIdentity::Default,
        }
    }

    fn one(column: ColumnDesc) -> String {
        let name = column.name.clone();
        let header = electric_schema(&relation(vec![column]), None);
        let value: Value = serde_json::from_str(&header).unwrap();
        value[&name].to_string()
    }

    /// Postgres's interval typmod: INTERVAL_TYPMOD(precision, range).
    fn interval_typmod(precision: i32, range: i32) -> i32 {
        ((range & 0x7FFF) << 16) | (precision & 0xFFFF)
    }

    #[test]
    fn doc_example_and_key_order() {
        let id = ColumnDesc {
            not_null: true,
            pk_index: Some(0),
            array_dims: 0,
            ..col("id", base("uuid"), -1)
        };
        let ints = col("ints", array_of(base("int8")), -1);
        let header = electric_schema(&relation(vec![id, ints]), None);
        assert_eq!(
            header,
            r#"{"id":{"not_null":true,"pk_index":0,"type":"uuid"},"ints":{"dims":1,"type":"int8"}}"#
        );
    }

    #[test]
    fn selection_and_column_order() {
        let rel = relation(vec![
            col("b", base("text"), -1),
            col("a", base("int4"), -1),
            col("C", base("bool"), -1),
            col("c", base("bool"), -1),
        ]);
        assert_eq!(
            electric_schema(&rel, None),
            r#"{"C":{"type":"bool"},"a":{"type":"int4"},"b":{"type":"text"},"c":{"type":"bool"}}"#
        );
        let selected = ["b".to_string(), "a".to_string(), "zz".to_string()];
        assert_eq!(
            electric_schema(&rel, Some(&selected)),
            r#"{"a":{"type":"int4"},"b":{"type":"text"}}"#
        );
        assert_eq!(electric_schema(&rel, Some(&[])), "{}");
    }

    #[test]
    fn enum_and_domain_keep_their_names() {
        let mood = PgType {
            oid: 9,
            name: "mood".into(),
            kind: TypeKind::Enum,
        };
        let domain = PgType {
            oid: 10,
            name: "positive_int".into(),
            kind: TypeKind::Domain(Box::new(base("int4"))),
        };
        assert_eq!(one(col("m", mood.clone(), -1)), r#"{"type":"mood"}"#);
        assert_eq!(one(col("d", domain, -1)), r#"{"type":"positive_int"}"#);
        assert_eq!(
            one(col("ms", array_of(mood), -1)),
            r#"{"dims":1,"type":"mood"}"#
        );
    }

    #[test]
    fn modifiers_per_type() {
        let cases: Vec<(&str, i32, &str)> = vec![
            // varchar(10), text, bpchar(3) / char(1) / bpchar without length
            ("varchar", 14, r#"{"max_length":10,"type":"varchar"}"#),
            ("varchar", -1, r#"{"type":"varchar"}"#),
            ("text", -1, r#"{"type":"text"}"#),
            ("bpchar", 7, r#"{"length":3,"type":"bpchar"}"#),
            ("bpchar", 5, r#"{"length":1,"type":"bpchar"}"#),
            ("bpchar", -1, r#"{"type":"bpchar"}"#),
            // bit(5), varbit(8), varbit without length
            ("bit", 5, r#"{"length":5,"type":"bit"}"#),
            ("varbit", 8, r#"{"length":8,"type":"varbit"}"#),
            ("varbit", -1, r#"{"length":-1,"type":"varbit"}"#),
            // time types; precision 0 is not > 0, so it falls through to the raw typmod
            ("timestamptz", 3, r#"{"precision":3,"type":"timestamptz"}"#),
            ("timestamp", 6, r#"{"precision":6,"type":"timestamp"}"#),
            ("time", 2, r#"{"precision":2,"type":"time"}"#),
            ("timetz", 4, r#"{"precision":4,"type":"timetz"}"#),
            ("timestamp", 0, r#"{"type":"timestamp","type_mod":0}"#),
            ("timestamptz", -1, r#"{"type":"timestamptz"}"#),
            // numeric(10,2), numeric(5), numeric(3,-2) (PG 15 negative scale), numeric
            (
                "numeric",
                (10 << 16 | 2) + 4,
                r#"{"precision":10,"scale":2,"type":"numeric"}"#,
            ),
            (
                "numeric",
                (5 << 16) + 4,
                r#"{"precision":5,"scale":0,"type":"numeric"}"#,
            ),
            (
                "numeric",
                ((3 << 16) | (-2i32 & 0xFFFF)) + 4,
                r#"{"precision":3,"scale":-2,"type":"numeric"}"#,
            ),
            ("numeric", -1, r#"{"type":"numeric"}"#),
            // other types: raw typmod when set
            (
                "geometry",
                1107460,
                r#"{"type":"geometry","type_mod":1107460}"#,
            ),
            ("int4", -1, r#"{"type":"int4"}"#),
        ];
        for (type_name, type_mod, want) in cases {
            assert_eq!(
                one(col("c", base(type_name), type_mod)),
                want,
                "{type_name}({type_mod})"
            );
        }
    }

    #[test]
    fn interval_modifiers() {
        const YEAR: i32 = 1 << 2;
        const MONTH: i32 = 1 << 1;
        const DAY: i32 = 1 << 3;
        const HOUR: i32 = 1 << 10;
        const MINUTE: i32 = 1 << 11;
        const SECOND: i32 = 1 << 12;
        let cases = [
            (-1, r#"{"type":"interval"}"#),
            (
                interval_typmod(3, 0x7FFF),
                r#"{"precision":3,"type":"interval"}"#,
            ),
            (
                interval_typmod(-1, YEAR),
                r#"{"fields":"YEAR","type":"interval"}"#,
            ),
            (
                interval_typmod(-1, YEAR | MONTH),
                r#"{"fields":"YEAR TO MONTH","type":"interval"}"#,
            ),
            (
                interval_typmod(-1, DAY | HOUR | MINUTE | SECOND),
                r#"{"fields":"DAY TO SECOND","type":"interval"}"#,
            ),
            (
                interval_typmod(-1, MINUTE | SECOND),
                r#"{"fields":"MINUTE TO SECOND","type":"interval"}"#,
            ),
            (
                interval_typmod(2, MINUTE | SECOND),
                r#"{"fields":"MINUTE TO SECOND","precision":2,"type":"interval"}"#,
            ),
            (
                interval_typmod(0, SECOND),
                r#"{"fields":"SECOND","precision":0,"type":"interval"}"#,
            ),
            (
                interval_typmod(-1, 0),
                r#"{"fields":" TO ","type":"interval"}"#,
            ),
        ];
        for (type_mod, want) in cases {
            assert_eq!(
                one(col("c", base("interval"), type_mod)),
                want,
                "{type_mod:#x}"
            );
        }
    }

    #[test]
    fn array_modifiers_are_the_elements() {
        assert_eq!(
            one(col("c", array_of(base("varchar")), 14)),
            r#"{"dims":1,"max_length":10,"type":"varchar"}"#
        );
        let pk_array = ColumnDesc {
            not_null: true,
            pk_index: Some(1),
            ..col("c", array_of(base("numeric")), (10 << 16 | 2) + 4)
        };
        assert_eq!(
            one(pk_array),
            r#"{"dims":1,"not_null":true,"pk_index":1,"precision":10,"scale":2,"type":"numeric"}"#
        );
        let matrix = ColumnDesc {
            array_dims: 2,
            ..col("m", array_of(base("int4")), -1)
        };
        assert_eq!(one(matrix), r#"{"dims":2,"type":"int4"}"#);
    }
}

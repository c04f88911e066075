//! The types of the where language and how they map from Postgres catalog types.

use std::fmt;
use std::sync::Arc;

use syncline_core::relation::{PgType, TypeKind};

/// A type the where language can compute with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Type {
    /// `bool`.
    Bool,
    /// `int2`.
    Int2,
    /// `int4`.
    Int4,
    /// `int8`.
    Int8,
    /// `float4`.
    Float4,
    /// `float8`.
    Float8,
    /// `numeric`, exact.
    Numeric,
    /// `text`.
    Text,
    /// `varchar` (a length limit is the column's business): text, except beside `bpchar`,
    /// where Postgres resolves operators in `bpchar`.
    Varchar,
    /// `bpchar` (`char(n)`): text padded with spaces to its length, which comparisons ignore
    /// and casts to text drop.
    Bpchar,
    /// `uuid`.
    Uuid,
    /// `date`.
    Date,
    /// `time` (without time zone).
    Time,
    /// `timestamp` (without time zone).
    Timestamp,
    /// `timestamptz`.
    Timestamptz,
    /// `interval`.
    Interval,
    /// `jsonb`.
    Jsonb,
    /// A user enum, by type name; only `=` and `<>` apply.
    Enum(Arc<str>),
    /// A one- or multi-dimensional array of the element type.
    Array(Box<Type>),
}

/// Groups of types that convert implicitly among themselves (Postgres `typcategory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Category {
    /// `B`.
    Boolean,
    /// `N`: int2, int4, int8, numeric, float4, float8.
    Numeric,
    /// `S`.
    String,
    /// `D`: date, timestamp, timestamptz.
    DateTime,
    /// `T`.
    Timespan,
    /// Anything that only converts to itself.
    Other,
}

impl Type {
    /// Maps a catalog type; `None` when the language has no such type.
    pub(crate) fn from_pg(pg_type: &PgType) -> Option<Type> {
        let base = pg_type.base();
        match &base.kind {
            TypeKind::Enum => Some(Type::Enum(Arc::from(base.name.as_str()))),
            TypeKind::Array(elem) => match Type::from_pg(elem)? {
                Type::Array(_) => None,
                elem => Some(Type::Array(Box::new(elem))),
            },
            TypeKind::Base => Type::from_name(&base.name),
            TypeKind::Domain(_) | TypeKind::Other => None,
        }
    }

    /// Maps a Postgres type name (`typname` or a common SQL spelling).
    pub(crate) fn from_name(name: &str) -> Option<Type> {
        Some(match name {
            "bool" | "boolean" => Type::Bool,
            "int2" | "smallint" => Type::Int2,
            "int4" | "int" | "integer" => Type::Int4,
            "int8" | "bigint" => Type::Int8,
            "float4" | "real" => Type::Float4,
            "float8" | "double precision" => Type::Float8,
            "numeric" | "decimal" => Type::Numeric,
            "text" => Type::Text,
            "varchar" | "character varying" => Type::Varchar,
            "bpchar" => Type::Bpchar,
            "uuid" => Type::Uuid,
            "date" => Type::Date,
            "time" | "time without time zone" => Type::Time,
            "timestamp" | "timestamp without time zone" => Type::Timestamp,
            "timestamptz" | "timestamp with time zone" => Type::Timestamptz,
            "interval" => Type::Interval,
            "jsonb" => Type::Jsonb,
            _ => return None,
        })
    }

    /// The type's category for implicit conversions.
    pub(crate) fn category(&self) -> Category {
        match self {
            Type::Bool => Category::Boolean,
            Type::Int2 | Type::Int4 | Type::Int8 | Type::Float4 | Type::Float8 | Type::Numeric => {
                Category::Numeric
            }
            Type::Text | Type::Varchar | Type::Bpchar => Category::String,
            Type::Date | Type::Timestamp | Type::Timestamptz => Category::DateTime,
            Type::Interval => Category::Timespan,
            _ => Category::Other,
        }
    }

    /// Rank within the numeric or date/time category: a lower rank converts implicitly to a
    /// higher one.
    fn rank(&self) -> u8 {
        match self {
            Type::Int2 | Type::Date => 0,
            Type::Int4 | Type::Timestamp => 1,
            Type::Int8 | Type::Timestamptz => 2,
            Type::Numeric => 3,
            Type::Float4 => 4,
            Type::Float8 => 5,
            _ => 0,
        }
    }

    /// The type both convert to implicitly, if any (same type, or the wider one of the same
    /// numeric or date/time category): Postgres's `select_common_type`, used for IN lists,
    /// COALESCE, GREATEST/LEAST and ARRAY[]. String types all convert implicitly to each other,
    /// so the first one stays.
    pub(crate) fn common(a: &Type, b: &Type) -> Option<Type> {
        if a == b {
            return Some(a.clone());
        }
        let (ca, cb) = (a.category(), b.category());
        if ca == Category::String && cb == Category::String {
            return Some(a.clone());
        }
        if ca != cb || !matches!(ca, Category::Numeric | Category::DateTime) {
            return None;
        }
        Some(if a.rank() >= b.rank() {
            a.clone()
        } else {
            b.clone()
        })
    }

    /// The type a binary operator on `a` and `b` computes in (Postgres's operator resolution):
    /// as [`Type::common`], except that float4 with any other numeric type resolves to the
    /// float4/float8 cross-type operators, so the comparison or arithmetic is done in float8.
    /// String operands resolve as Postgres resolves them: `bpchar` beside `bpchar` or `varchar`
    /// compares as `bpchar`, any other pair (`text` on either side, or two `varchar`) as
    /// `text`; an untyped literal counts as the other operand's type.
    pub(crate) fn operator_common(a: &Type, b: &Type) -> Option<Type> {
        if a.category() == Category::String && b.category() == Category::String {
            let bpchar = |t: &Type| matches!(t, Type::Bpchar | Type::Varchar);
            return Some(
                if (*a == Type::Bpchar || *b == Type::Bpchar) && bpchar(a) && bpchar(b) {
                    Type::Bpchar
                } else {
                    Type::Text
                },
            );
        }
        let mixed_float4 = (*a == Type::Float4) != (*b == Type::Float4);
        if mixed_float4 && a.category() == Category::Numeric && b.category() == Category::Numeric {
            return Some(Type::Float8);
        }
        Type::common(a, b)
    }

    /// Whether values of this type have a total order usable by `<`, `>`, BETWEEN.
    pub(crate) fn is_ordered(&self) -> bool {
        match self {
            Type::Enum(_) | Type::Jsonb => false,
            Type::Array(elem) => elem.is_ordered(),
            _ => true,
        }
    }

    /// Whether this is one of the integer types.
    pub(crate) fn is_integer(&self) -> bool {
        matches!(self, Type::Int2 | Type::Int4 | Type::Int8)
    }

    /// The element type when this is an array.
    pub(crate) fn element(&self) -> Option<&Type> {
        match self {
            Type::Array(elem) => Some(elem),
            _ => None,
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Type::Bool => "bool",
            Type::Int2 => "int2",
            Type::Int4 => "int4",
            Type::Int8 => "int8",
            Type::Float4 => "float4",
            Type::Float8 => "float8",
            Type::Numeric => "numeric",
            Type::Text => "text",
            Type::Varchar => "varchar",
            Type::Bpchar => "bpchar",
            Type::Uuid => "uuid",
            Type::Date => "date",
            Type::Time => "time",
            Type::Timestamp => "timestamp",
            Type::Timestamptz => "timestamptz",
            Type::Interval => "interval",
            Type::Jsonb => "jsonb",
            Type::Enum(name) => return write!(f, "\"{}\"", name.replace('"', "\"\"")),
            Type::Array(elem) => return write!(f, "{elem}[]"),
        };
        f.write_str(name)
    }
}

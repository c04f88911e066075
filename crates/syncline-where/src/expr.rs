//! The checked, typed expression tree: what parsing and checking produce, what evaluation,
//! rendering and the router consume.

use crate::types::Type;
use crate::value::Nullable;

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum CmpOp {
    /// `=`.
    Eq,
    /// `<>`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

impl CmpOp {
    /// The SQL spelling.
    pub(crate) fn sql(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Ne => "<>",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }

    /// Parses the SQL spelling (`!=` is `<>`).
    pub(crate) fn from_sql(op: &str) -> Option<CmpOp> {
        Some(match op {
            "=" => CmpOp::Eq,
            "<>" | "!=" => CmpOp::Ne,
            "<" => CmpOp::Lt,
            "<=" => CmpOp::Le,
            ">" => CmpOp::Gt,
            ">=" => CmpOp::Ge,
            _ => return None,
        })
    }

    /// The operator with its operands swapped (`a < b` is `b > a`).
    pub(crate) fn flipped(self) -> CmpOp {
        match self {
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Le => CmpOp::Ge,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Ge => CmpOp::Le,
            other => other,
        }
    }

    /// Whether the ordering of the left operand against the right satisfies the operator.
    pub(crate) fn holds(self, ord: std::cmp::Ordering) -> bool {
        match self {
            CmpOp::Eq => ord.is_eq(),
            CmpOp::Ne => ord.is_ne(),
            CmpOp::Lt => ord.is_lt(),
            CmpOp::Le => ord.is_le(),
            CmpOp::Gt => ord.is_gt(),
            CmpOp::Ge => ord.is_ge(),
        }
    }
}

/// A strict built-in operation: NULL in any argument gives NULL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    /// A comparison of two values of one type.
    Cmp(CmpOp),
    /// `+` (numbers, date + int, date/timestamp + interval, interval + interval).
    Add,
    /// `-`.
    Sub,
    /// `*`.
    Mul,
    /// `/` (integer division for integer types).
    Div,
    /// `%`.
    Mod,
    /// `^` on float8.
    Pow,
    /// `|/` on float8.
    Sqrt,
    /// `@`.
    Abs,
    /// Unary `-`.
    Neg,
    /// `&` on integers.
    BitAnd,
    /// `|` on integers.
    BitOr,
    /// `#` on integers.
    BitXor,
    /// `~` on integers.
    BitNot,
    /// `text || text`.
    TextConcat,
    /// `LIKE` / `ILIKE` with an optional escape as third argument.
    Like {
        /// ILIKE.
        insensitive: bool,
        /// NOT LIKE.
        negated: bool,
    },
    /// `LIKE` / `ILIKE` against a constant pattern, compiled once.
    LikeMatch {
        /// The pattern.
        pattern: std::sync::Arc<crate::like::Pattern>,
        /// NOT LIKE.
        negated: bool,
    },
    /// `lower(text)`, ASCII letters only (C collation).
    Lower,
    /// `upper(text)`, ASCII letters only (C collation).
    Upper,
    /// `anyarray @> anyarray`.
    ArrayContains,
    /// `anyarray <@ anyarray`.
    ArrayContainedBy,
    /// `anyarray && anyarray`.
    ArrayOverlaps,
    /// `array_ndims(anyarray)`.
    ArrayNdims,
    /// `justify_days(interval)`.
    JustifyDays,
    /// `justify_hours(interval)`.
    JustifyHours,
    /// `justify_interval(interval)`.
    JustifyInterval,
    /// `timezone(zone, ts)` / `ts AT TIME ZONE zone`, zone text or interval: timestamptz to the
    /// zone's local timestamp, or a local timestamp to timestamptz.
    Timezone,
    /// `jsonb -> text|int4`.
    JsonGet,
    /// `jsonb ->> text|int4`.
    JsonGetText,
    /// `jsonb @> jsonb`.
    JsonContains,
    /// `jsonb ? text`.
    JsonHasKey,
    /// A cast to the result type.
    Cast,
}

/// How an array is combined by the non-strict `array_cat` family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArrayBuild {
    /// `array_cat(a, b)` / `a || b`.
    Cat,
    /// `array_append(a, e)` / `a || e`.
    Append,
    /// `array_prepend(e, a)` / `e || a`.
    Prepend,
}

/// The result of an `IS [NOT] TRUE|FALSE|UNKNOWN` test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BoolTest {
    /// `IS TRUE`.
    True,
    /// `IS NOT TRUE`.
    NotTrue,
    /// `IS FALSE`.
    False,
    /// `IS NOT FALSE`.
    NotFalse,
    /// `IS UNKNOWN`.
    Unknown,
    /// `IS NOT UNKNOWN`.
    NotUnknown,
}

/// One subscript of an array access: an index (`[i]`), or a slice (`[lower:upper]`) with either
/// bound left out. In an access with any slice, an index `[i]` stands for `[1:i]`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Subscript {
    /// Written as a slice.
    pub(crate) slice: bool,
    /// The slice's lower bound, if given (`int4`).
    pub(crate) lower: Option<Expr>,
    /// The index, or the slice's upper bound if given (`int4`).
    pub(crate) upper: Option<Expr>,
}

/// A checked expression. Every node knows its result type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    /// A constant (literals and parameters after substitution).
    Const {
        /// The value; `None` is NULL.
        value: Nullable,
        /// Its type.
        ty: Type,
    },
    /// A column of the relation.
    Column {
        /// Position in the relation's columns.
        index: usize,
        /// Column name, for rendering.
        name: String,
        /// Column type.
        ty: Type,
    },
    /// A strict operation.
    Op {
        /// What to compute.
        op: Op,
        /// Arguments.
        args: Vec<Expr>,
        /// Result type.
        ty: Type,
    },
    /// `NOT`.
    Not(Box<Expr>),
    /// `AND` of two or more operands.
    And(Vec<Expr>),
    /// `OR` of two or more operands.
    Or(Vec<Expr>),
    /// `IS [NOT] NULL`.
    IsNull {
        /// Tested operand.
        arg: Box<Expr>,
        /// `IS NOT NULL`.
        negated: bool,
    },
    /// `IS [NOT] TRUE|FALSE|UNKNOWN`.
    BoolTest {
        /// Tested operand.
        arg: Box<Expr>,
        /// Which test.
        test: BoolTest,
    },
    /// `IS [NOT] DISTINCT FROM`.
    Distinct {
        /// Left operand.
        left: Box<Expr>,
        /// Right operand (same type).
        right: Box<Expr>,
        /// `IS NOT DISTINCT FROM`.
        negated: bool,
    },
    /// `[NOT] IN (list)`.
    InList {
        /// Tested operand.
        arg: Box<Expr>,
        /// Candidates (same type as `arg`).
        list: Vec<Expr>,
        /// `NOT IN`.
        negated: bool,
    },
    /// `left op ANY|ALL (array)`.
    Quantified {
        /// Comparison.
        op: CmpOp,
        /// Left operand.
        left: Box<Expr>,
        /// Array operand (array of the left operand's type).
        array: Box<Expr>,
        /// `ALL` rather than `ANY`.
        all: bool,
    },
    /// `COALESCE(...)`.
    Coalesce {
        /// Candidates, all of type `ty`.
        args: Vec<Expr>,
        /// Result type.
        ty: Type,
    },
    /// `GREATEST(...)` / `LEAST(...)`, ignoring NULLs.
    MinMax {
        /// GREATEST.
        greatest: bool,
        /// Candidates, all of type `ty`.
        args: Vec<Expr>,
        /// Result type.
        ty: Type,
    },
    /// `concat(...)`: text forms of the non-NULL arguments.
    Concat(Vec<Expr>),
    /// `ARRAY[...]`.
    ArrayCtor {
        /// Elements, of the element type.
        elems: Vec<Expr>,
        /// The array type.
        ty: Type,
    },
    /// `array[i][j]` (an element) or `array[a:b]` (an array).
    Subscript {
        /// The array.
        array: Box<Expr>,
        /// One per dimension, outermost first.
        subscripts: Vec<Subscript>,
        /// The element type, or the array type for a slice.
        ty: Type,
    },
    /// `array_cat` / `array_append` / `array_prepend` and array `||`.
    ArrayBuild {
        /// Which one.
        kind: ArrayBuild,
        /// The two operands.
        args: Vec<Expr>,
        /// The array type.
        ty: Type,
    },
    /// `col IN (SELECT ...)` or `(a, b) IN (SELECT ...)`: membership of the left-side columns
    /// in a subquery's value set (`NOT IN` is `NOT` over it).
    Sublink {
        /// Index of the subquery in the clause's distinct subqueries.
        subquery: usize,
        /// The left-side columns (`Expr::Column`), one per select-list column: a row
        /// `(a, b)` when there are several.
        left: Vec<Expr>,
    },
}

impl Expr {
    /// The result type.
    pub(crate) fn ty(&self) -> &Type {
        match self {
            Expr::Const { ty, .. }
            | Expr::Column { ty, .. }
            | Expr::Op { ty, .. }
            | Expr::Coalesce { ty, .. }
            | Expr::MinMax { ty, .. }
            | Expr::ArrayCtor { ty, .. }
            | Expr::Subscript { ty, .. }
            | Expr::ArrayBuild { ty, .. } => ty,
            Expr::Concat(_) => &Type::Text,
            _ => &Type::Bool,
        }
    }

    /// A constant of type `ty`.
    pub(crate) fn constant(value: Nullable, ty: Type) -> Expr {
        Expr::Const { value, ty }
    }

    /// Columns this expression reads, in first-use order, without repeats.
    pub(crate) fn columns(&self) -> Vec<usize> {
        let mut out = Vec::new();
        self.visit(&mut |e| {
            if let Expr::Column { index, .. } = e {
                if !out.contains(index) {
                    out.push(*index);
                }
            }
        });
        out
    }

    /// Levels of nesting (a constant or column is 1).
    pub(crate) fn depth(&self) -> usize {
        1 + self
            .children()
            .into_iter()
            .map(Expr::depth)
            .max()
            .unwrap_or(0)
    }

    /// Calls `f` on this expression and every sub-expression, parents first.
    pub(crate) fn visit(&self, f: &mut impl FnMut(&Expr)) {
        f(self);
        for child in self.children() {
            child.visit(f);
        }
    }

    fn children(&self) -> Vec<&Expr> {
        match self {
            Expr::Const { .. } | Expr::Column { .. } => Vec::new(),
            Expr::Op { args, .. }
            | Expr::And(args)
            | Expr::Or(args)
            | Expr::Coalesce { args, .. }
            | Expr::MinMax { args, .. }
            | Expr::Concat(args)
            | Expr::ArrayBuild { args, .. }
            | Expr::ArrayCtor { elems: args, .. } => args.iter().collect(),
            Expr::Not(arg) | Expr::IsNull { arg, .. } | Expr::BoolTest { arg, .. } => vec![arg],
            Expr::Sublink { left, .. } => left.iter().collect(),
            Expr::Distinct { left, right, .. } => vec![left, right],
            Expr::InList { arg, list, .. } => std::iter::once(&**arg).chain(list).collect(),
            Expr::Quantified { left, array, .. } => vec![left, array],
            Expr::Subscript {
                array, subscripts, ..
            } => std::iter::once(&**array)
                .chain(
                    subscripts
                        .iter()
                        .flat_map(|s| s.upper.iter().chain(s.lower.iter())),
                )
                .collect(),
        }
    }
}

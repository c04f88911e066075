//! Operator resolution and casts: which operand types an operator takes and what it returns,
//! mirroring the Postgres operators the language supports.

use crate::eval::cast_value;
use crate::expr::{ArrayBuild, CmpOp, Expr, Op};
use crate::types::{Category, Type};

/// Whether `from` converts to `to` implicitly (numeric widening, date to timestamp(tz),
/// timestamp to timestamptz, any string type to any other).
fn implicit(from: &Type, to: &Type) -> bool {
    match (from, to) {
        (Type::Array(f), Type::Array(t)) => implicit(f, t),
        _ if is_string(from) && is_string(to) => true,
        _ => from == to || Type::common(from, to).as_ref() == Some(to),
    }
}

fn is_string(ty: &Type) -> bool {
    ty.category() == Category::String
}

/// Whether a value of `from` is already one of `to` (`text` and `varchar`, or arrays of them):
/// Postgres relabels it, with no cast to evaluate or render.
fn relabels(from: &Type, to: &Type) -> bool {
    match (from, to) {
        (Type::Array(f), Type::Array(t)) => relabels(f, t),
        _ => matches!(
            (from, to),
            (Type::Text | Type::Varchar, Type::Text | Type::Varchar)
        ),
    }
}

/// Whether `from` converts to `to` with an explicit cast.
fn explicit(from: &Type, to: &Type) -> bool {
    let (cf, ct) = (from.category(), to.category());
    implicit(from, to)
        || (cf == Category::Numeric && ct == Category::Numeric)
        || is_string(from)
        || is_string(to)
        || matches!(
            (from, to),
            (Type::Int4, Type::Bool) | (Type::Bool, Type::Int4)
        )
        || matches!(
            (from, to),
            (Type::Timestamp | Type::Timestamptz, Type::Date)
                | (Type::Timestamptz, Type::Timestamp)
        )
}

/// Wraps `e` in a cast to `to`, folding constants. With `relabel` (an implicit conversion), a
/// column or constant that only needs relabelling (`varchar` as `text`) just takes the type:
/// Postgres, reading the rendered SQL, applies the same conversion where it is needed. An
/// explicit cast is kept, since it can change how Postgres resolves what surrounds it.
fn cast(e: Expr, to: &Type, relabel: bool) -> Expr {
    if e.ty() == to {
        return e;
    }
    let e = match e {
        Expr::Column { index, name, ty } if relabel && relabels(&ty, to) => {
            return Expr::Column {
                index,
                name,
                ty: to.clone(),
            }
        }
        Expr::Const { value, ty } if relabel && relabels(&ty, to) => {
            return Expr::constant(value, to.clone())
        }
        other => other,
    };
    if let Expr::Const { value, ty } = &e {
        if let Ok(folded) = cast_value(value.clone(), ty, to) {
            return Expr::constant(folded, to.clone());
        }
    }
    Expr::Op {
        op: Op::Cast,
        args: vec![e],
        ty: to.clone(),
    }
}

/// An implicit conversion, or the error Postgres would give.
pub(crate) fn implicit_cast(e: Expr, to: &Type) -> Result<Expr, String> {
    if !implicit(e.ty(), to) {
        return Err(format!("cannot use type {} where {to} is expected", e.ty()));
    }
    Ok(cast(e, to, true))
}

/// An explicit `::type` / `CAST`.
pub(crate) fn explicit_cast(e: Expr, to: &Type) -> Result<Expr, String> {
    if !explicit(e.ty(), to) {
        return Err(format!("cannot cast type {} to {to}", e.ty()));
    }
    Ok(cast(e, to, false))
}

/// Checks `op` exists for operands of type `ty`.
pub(crate) fn check_comparable(op: CmpOp, ty: &Type) -> Result<(), String> {
    let equality = matches!(op, CmpOp::Eq | CmpOp::Ne);
    if equality || ty.is_ordered() {
        Ok(())
    } else {
        Err(format!("operator does not exist: {ty} {} {ty}", op.sql()))
    }
}

/// `l op r` for operands already of one type.
pub(crate) fn comparison(op: CmpOp, l: Expr, r: Expr) -> Result<Expr, String> {
    check_comparable(op, l.ty())?;
    Ok(Expr::Op {
        op: Op::Cmp(op),
        args: vec![l, r],
        ty: Type::Bool,
    })
}

fn no_operator(op: &str, l: Option<&Type>, r: Option<&Type>) -> String {
    let name = |t: Option<&Type>| t.map_or("unknown".to_string(), |t| t.to_string());
    format!("operator does not exist: {} {op} {}", name(l), name(r))
}

/// The operand types `l op r` resolves to; `None` is an untyped literal.
pub(crate) fn binary_operand_types(
    op: &str,
    l: Option<&Type>,
    r: Option<&Type>,
) -> Result<(Type, Type), String> {
    let fail = || no_operator(op, l, r);
    let (lt, rt) = match (l, r) {
        (Some(a), Some(b)) => (a.clone(), b.clone()),
        (Some(a), None) => (a.clone(), default_other(op, a)),
        (None, Some(b)) => (default_other(op, b), b.clone()),
        (None, None) if matches!(op, "||" | "~~" | "!~~" | "~~*" | "!~~*") => {
            (Type::Text, Type::Text)
        }
        (None, None) => return Err(fail()),
    };
    use Type::*;
    let numeric = |t: &Type| t.category() == Category::Numeric;
    let pair = match (op, &lt, &rt) {
        ("+" | "-" | "*" | "/", a, b) if numeric(a) && numeric(b) => {
            let c = Type::operator_common(a, b).ok_or_else(fail)?;
            (c.clone(), c)
        }
        ("%" | "&" | "|" | "#", a, b) if numeric(a) && numeric(b) => {
            let c = Type::operator_common(a, b).ok_or_else(fail)?;
            if !(c.is_integer() || (op == "%" && c == Numeric)) {
                return Err(fail());
            }
            (c.clone(), c)
        }
        ("^", a, b) if numeric(a) && numeric(b) => {
            if *a == Numeric || *b == Numeric {
                return Err("numeric ^ numeric is not supported; cast to float8".into());
            }
            (Float8, Float8)
        }
        ("+" | "-", Date, Int2 | Int4) => (Date, Int4),
        ("+", Int2 | Int4, Date) => (Int4, Date),
        ("-", Date, Date) => (Date, Date),
        ("+" | "-", Date | Timestamp | Timestamptz, Interval) => (lt.clone(), Interval),
        ("+", Interval, Date | Timestamp | Timestamptz) => (Interval, rt.clone()),
        ("-", Timestamp | Timestamptz, Timestamp | Timestamptz)
        | ("-", Date, Timestamp | Timestamptz)
        | ("-", Timestamp | Timestamptz, Date) => {
            let c = Type::operator_common(&lt, &rt).ok_or_else(fail)?;
            (c.clone(), c)
        }
        ("+" | "-", Interval, Interval) => (Interval, Interval),
        ("||", Array(_), Array(_)) if lt == rt => (lt.clone(), rt.clone()),
        ("||", Array(e), b) if **e == *b => (lt.clone(), rt.clone()),
        ("||", a, Array(e)) if **e == *a => (lt.clone(), rt.clone()),
        ("||", s, b) | ("||", b, s) if is_string(s) && !matches!(b, Array(_)) => {
            (lt.clone(), rt.clone())
        }
        // bpchar's own LIKE operators match its padded value; any other text matches as text.
        ("~~" | "!~~" | "~~*" | "!~~*", Bpchar, b) if is_string(b) => (Bpchar, Text),
        ("~~" | "!~~" | "~~*" | "!~~*", a, b) if is_string(a) && is_string(b) => (Text, Text),
        ("@>" | "<@" | "&&", Array(_), Array(_)) if lt == rt => (lt.clone(), rt.clone()),
        ("@>", Jsonb, Jsonb) => (Jsonb, Jsonb),
        ("->" | "->>", Jsonb, s) if is_string(s) => (Jsonb, Text),
        ("->" | "->>", Jsonb, Int2 | Int4) => (Jsonb, Int4),
        ("?", Jsonb, s) if is_string(s) => (Jsonb, Text),
        _ => return Err(fail()),
    };
    Ok(pair)
}

/// The type an untyped literal takes next to an operand of type `other`.
fn default_other(op: &str, other: &Type) -> Type {
    match (op, other) {
        ("->" | "->>" | "?", Type::Jsonb) => Type::Text,
        ("||", Type::Array(_)) => other.clone(),
        ("||" | "~~" | "!~~" | "~~*" | "!~~*", _) => Type::Text,
        _ => other.clone(),
    }
}

/// Builds `l op r` for operands of the types `binary_operand_types` chose.
pub(crate) fn binary(op: &str, l: Expr, r: Expr) -> Result<Expr, String> {
    use Type::*;
    let (lt, rt) = (l.ty().clone(), r.ty().clone());
    let strict = |op: Op, ty: Type, l: Expr, r: Expr| {
        Ok(Expr::Op {
            op,
            args: vec![l, r],
            ty,
        })
    };
    match op {
        "+" | "-" | "*" | "/" | "%" => {
            let which = match op {
                "+" => Op::Add,
                "-" => Op::Sub,
                "*" => Op::Mul,
                "/" => Op::Div,
                _ => Op::Mod,
            };
            let ty = match (&lt, &rt) {
                (Date, Date) => Int4,
                (Date, Int4) | (Int4, Date) => Date,
                (Date, Interval) | (Interval, Date) => Timestamp,
                (Timestamp, Timestamp) | (Timestamptz, Timestamptz) => Interval,
                (Interval, t) | (t, Interval) => t.clone(),
                _ => lt.clone(),
            };
            strict(which, ty, l, r)
        }
        "^" => strict(Op::Pow, Float8, l, r),
        "&" => strict(Op::BitAnd, lt, l, r),
        "|" => strict(Op::BitOr, lt, l, r),
        "#" => strict(Op::BitXor, lt, l, r),
        "||" => Ok(match (&lt, &rt) {
            (Array(_), Array(_)) => Expr::ArrayBuild {
                kind: ArrayBuild::Cat,
                args: vec![l, r],
                ty: lt,
            },
            (Array(_), _) => Expr::ArrayBuild {
                kind: ArrayBuild::Append,
                args: vec![l, r],
                ty: lt,
            },
            (_, Array(_)) => Expr::ArrayBuild {
                kind: ArrayBuild::Prepend,
                args: vec![l, r],
                ty: rt,
            },
            _ => Expr::Op {
                op: Op::TextConcat,
                args: vec![cast(l, &Text, true), cast(r, &Text, true)],
                ty: Text,
            },
        }),
        "~~" | "!~~" | "~~*" | "!~~*" => {
            let like = Op::Like {
                insensitive: op.ends_with('*'),
                negated: op.starts_with('!'),
            };
            strict(like, Bool, l, r)
        }
        "@>" if lt == Jsonb => strict(Op::JsonContains, Bool, l, r),
        "@>" => strict(Op::ArrayContains, Bool, l, r),
        "<@" => strict(Op::ArrayContainedBy, Bool, l, r),
        "&&" => strict(Op::ArrayOverlaps, Bool, l, r),
        "->" => strict(Op::JsonGet, Jsonb, l, r),
        "->>" => strict(Op::JsonGetText, Text, l, r),
        "?" => strict(Op::JsonHasKey, Bool, l, r),
        _ => Err(format!("unsupported operator {op}")),
    }
}

/// Builds a prefix operator application.
pub(crate) fn unary(op: &str, e: Expr) -> Result<Expr, String> {
    let ty = e.ty().clone();
    let numeric = ty.category() == Category::Numeric;
    let (which, e, ty) = match op {
        "+" if numeric || ty == Type::Interval => return Ok(e),
        "-" if numeric || ty == Type::Interval => (Op::Neg, e, ty),
        "@" if numeric => (Op::Abs, e, ty),
        "~" if ty.is_integer() => (Op::BitNot, e, ty),
        "|/" if numeric && ty != Type::Numeric => {
            (Op::Sqrt, cast(e, &Type::Float8, true), Type::Float8)
        }
        _ => return Err(format!("operator does not exist: {op} {ty}")),
    };
    if let Expr::Const { value: Some(_), .. } = &e {
        let folded = Expr::Op {
            op: which,
            args: vec![e],
            ty,
        };
        return Ok(fold(folded));
    }
    Ok(Expr::Op {
        op: which,
        args: vec![e],
        ty,
    })
}

/// Evaluates a constant-only operation at check time when it cannot fail (`-5` becomes the
/// constant `-5`).
fn fold(e: Expr) -> Expr {
    match crate::eval::eval_constant(&e) {
        Some(value) => Expr::constant(value, e.ty().clone()),
        None => e,
    }
}

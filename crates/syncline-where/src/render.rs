//! Rendering a checked expression back to canonical SQL: fully parenthesised, identifiers
//! quoted, constants as typed literals (`'5'::int4`). This is what the snapshot query runs and
//! what shape identity compares.

use crate::expr::{ArrayBuild, BoolTest, Expr, Op};
use crate::types::Type;

/// Canonical SQL for `expr`.
pub(crate) fn render(expr: &Expr) -> String {
    let mut out = String::new();
    write(expr, &mut out);
    out
}

use syncline_core::sql::{quote_ident, quote_literal};

fn list(args: &[Expr], out: &mut String) {
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write(a, out);
    }
}

fn infix(args: &[Expr], op: &str, out: &mut String) {
    out.push('(');
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            out.push(' ');
            out.push_str(op);
            out.push(' ');
        }
        write(a, out);
    }
    out.push(')');
}

fn call(name: &str, args: &[Expr], out: &mut String) {
    out.push_str(name);
    out.push('(');
    list(args, out);
    out.push(')');
}

fn write(expr: &Expr, out: &mut String) {
    match expr {
        // An enum's name is not qualified, and the search path is pinned (pg_catalog, public):
        // its NULL stays untyped (only `=` and `<>` apply to enums, and they take the other side's type).
        Expr::Const {
            value: None,
            ty: Type::Enum(_),
        } => out.push_str("NULL"),
        Expr::Const { value: None, ty } => out.push_str(&format!("NULL::{ty}")),
        Expr::Const {
            value: Some(v),
            ty: Type::Bool,
        } => out.push_str(&v.to_text(&Type::Bool)),
        Expr::Const {
            value: Some(v),
            ty: ty @ Type::Enum(_),
        } => out.push_str(&quote_literal(&v.to_text(ty))),
        Expr::Const { value: Some(v), ty } => {
            out.push_str(&format!("{}::{ty}", quote_literal(&v.to_text(ty))))
        }
        Expr::Column { name, .. } => out.push_str(&quote_ident(name)),
        Expr::Op { op, args, ty } => write_op(op, args, ty, out),
        Expr::Not(arg) => {
            out.push_str("(NOT ");
            write(arg, out);
            out.push(')');
        }
        Expr::And(args) => infix(args, "AND", out),
        Expr::Or(args) => infix(args, "OR", out),
        Expr::IsNull { arg, negated } => {
            postfix(arg, if *negated { "IS NOT NULL" } else { "IS NULL" }, out)
        }
        Expr::BoolTest { arg, test } => {
            let test = match test {
                BoolTest::True => "IS TRUE",
                BoolTest::NotTrue => "IS NOT TRUE",
                BoolTest::False => "IS FALSE",
                BoolTest::NotFalse => "IS NOT FALSE",
                BoolTest::Unknown => "IS UNKNOWN",
                BoolTest::NotUnknown => "IS NOT UNKNOWN",
            };
            postfix(arg, test, out)
        }
        Expr::Distinct {
            left,
            right,
            negated,
        } => {
            let op = if *negated {
                "IS NOT DISTINCT FROM"
            } else {
                "IS DISTINCT FROM"
            };
            infix(&[(**left).clone(), (**right).clone()], op, out)
        }
        Expr::InList {
            arg,
            list: items,
            negated,
        } => {
            out.push('(');
            write(arg, out);
            out.push_str(if *negated { " NOT IN (" } else { " IN (" });
            list(items, out);
            out.push_str("))");
        }
        Expr::Quantified {
            op,
            left,
            array,
            all,
        } => {
            out.push('(');
            write(left, out);
            out.push_str(&format!(
                " {} {} (",
                op.sql(),
                if *all { "ALL" } else { "ANY" }
            ));
            write(array, out);
            out.push_str("))");
        }
        Expr::Coalesce { args, .. } => call("COALESCE", args, out),
        Expr::MinMax { greatest, args, .. } => {
            call(if *greatest { "GREATEST" } else { "LEAST" }, args, out)
        }
        Expr::Concat(args) => call("concat", args, out),
        Expr::ArrayCtor { elems, ty } => {
            out.push_str("ARRAY[");
            list(elems, out);
            out.push_str(&format!("]::{ty}"));
        }
        Expr::Subscript {
            array, subscripts, ..
        } => {
            out.push('(');
            write(array, out);
            out.push(')');
            for s in subscripts {
                out.push('[');
                if let Some(lower) = &s.lower {
                    write(lower, out);
                }
                if s.slice {
                    out.push(':');
                }
                if let Some(upper) = &s.upper {
                    write(upper, out);
                }
                out.push(']');
            }
        }
        Expr::ArrayBuild { kind, args, .. } => {
            let name = match kind {
                ArrayBuild::Cat => "array_cat",
                ArrayBuild::Append => "array_append",
                ArrayBuild::Prepend => "array_prepend",
            };
            call(name, args, out)
        }
    }
}

fn postfix(arg: &Expr, suffix: &str, out: &mut String) {
    out.push('(');
    write(arg, out);
    out.push(' ');
    out.push_str(suffix);
    out.push(')');
}

fn prefix(op: &str, arg: &Expr, out: &mut String) {
    out.push('(');
    out.push_str(op);
    out.push(' ');
    write(arg, out);
    out.push(')');
}

fn write_op(op: &Op, args: &[Expr], ty: &Type, out: &mut String) {
    match op {
        Op::Cmp(c) => infix(args, c.sql(), out),
        Op::Add => infix(args, "+", out),
        Op::Sub => infix(args, "-", out),
        Op::Mul => infix(args, "*", out),
        Op::Div => infix(args, "/", out),
        Op::Mod => infix(args, "%", out),
        Op::Pow => infix(args, "^", out),
        Op::BitAnd => infix(args, "&", out),
        Op::BitOr => infix(args, "|", out),
        Op::BitXor => infix(args, "#", out),
        Op::TextConcat => infix(args, "||", out),
        Op::ArrayContains | Op::JsonContains => infix(args, "@>", out),
        Op::ArrayContainedBy => infix(args, "<@", out),
        Op::ArrayOverlaps => infix(args, "&&", out),
        Op::JsonGet => infix(args, "->", out),
        Op::JsonGetText => infix(args, "->>", out),
        Op::JsonHasKey => infix(args, "?", out),
        Op::Neg => prefix("-", &args[0], out),
        Op::Abs => prefix("@", &args[0], out),
        Op::BitNot => prefix("~", &args[0], out),
        Op::Sqrt => prefix("|/", &args[0], out),
        Op::Lower => call("lower", args, out),
        Op::Upper => call("upper", args, out),
        Op::ArrayNdims => call("array_ndims", args, out),
        Op::JustifyDays => call("justify_days", args, out),
        Op::JustifyHours => call("justify_hours", args, out),
        Op::JustifyInterval => call("justify_interval", args, out),
        Op::Timezone => call("timezone", args, out),
        Op::Cast => {
            out.push_str("CAST(");
            write(&args[0], out);
            out.push_str(&format!(" AS {ty})"));
        }
        Op::LikeMatch { pattern, negated } => {
            out.push('(');
            write(&args[0], out);
            out.push_str(&format!(
                " {} {}::text",
                like_word(pattern.insensitive, *negated),
                quote_literal(&pattern.source)
            ));
            if let Some(escape) = &pattern.escape {
                out.push_str(&format!(" ESCAPE {}::text", quote_literal(escape)));
            }
            out.push(')');
        }
        Op::Like {
            insensitive,
            negated,
        } => {
            out.push('(');
            write(&args[0], out);
            out.push_str(&format!(" {} ", like_word(*insensitive, *negated)));
            write(&args[1], out);
            if let Some(escape) = args.get(2) {
                out.push_str(" ESCAPE ");
                write(escape, out);
            }
            out.push(')');
        }
    }
}

fn like_word(insensitive: bool, negated: bool) -> &'static str {
    match (insensitive, negated) {
        (false, false) => "LIKE",
        (false, true) => "NOT LIKE",
        (true, false) => "ILIKE",
        (true, true) => "NOT ILIKE",
    }
}

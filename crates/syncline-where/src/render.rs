//! Rendering a checked expression back to canonical SQL: fully parenthesised, identifiers
//! quoted, constants as typed literals (`'5'::int4`). This is what the snapshot query runs and
//! what shape identity compares.

use crate::expr::{ArrayBuild, BoolTest, Expr, Op};
use crate::types::Type;

/// Writes a subquery occurrence (`subquery`, its left-side columns) to the output.
pub(crate) type Sub<'a> = &'a dyn Fn(usize, &[Expr], &mut String);

/// Canonical SQL for `expr`, which has no subquery.
pub(crate) fn render(expr: &Expr) -> String {
    render_with(expr, &|_, _, out| {
        debug_assert!(false, "a subquery where none may be");
        out.push_str("NULL::bool")
    })
}

/// Canonical SQL for `expr`, its subquery occurrences written by `sub`.
pub(crate) fn render_with(expr: &Expr, sub: Sub) -> String {
    let mut out = String::new();
    write(expr, &mut out, sub);
    out
}

/// The left side of a subquery occurrence: `"a"`, or `("a", "b")` for several columns.
pub(crate) fn write_left(left: &[Expr], out: &mut String) {
    if let [one] = left {
        write(one, out, &|_, _, _| {});
        return;
    }
    out.push('(');
    list(left, out, &|_, _, _| {});
    out.push(')');
}

use syncline_core::sql::{quote_ident, quote_literal};

fn list(args: &[Expr], out: &mut String, sub: Sub) {
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write(a, out, sub);
    }
}

fn infix(args: &[Expr], op: &str, out: &mut String, sub: Sub) {
    out.push('(');
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            out.push(' ');
            out.push_str(op);
            out.push(' ');
        }
        write(a, out, sub);
    }
    out.push(')');
}

fn call(name: &str, args: &[Expr], out: &mut String, sub: Sub) {
    out.push_str(name);
    out.push('(');
    list(args, out, sub);
    out.push(')');
}

fn write(expr: &Expr, out: &mut String, sub: Sub) {
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
        Expr::Op { op, args, ty } => write_op(op, args, ty, out, sub),
        Expr::Not(arg) => {
            out.push_str("(NOT ");
            write(arg, out, sub);
            out.push(')');
        }
        Expr::And(args) => infix(args, "AND", out, sub),
        Expr::Or(args) => infix(args, "OR", out, sub),
        Expr::IsNull { arg, negated } => postfix(
            arg,
            if *negated { "IS NOT NULL" } else { "IS NULL" },
            out,
            sub,
        ),
        Expr::BoolTest { arg, test } => {
            let test = match test {
                BoolTest::True => "IS TRUE",
                BoolTest::NotTrue => "IS NOT TRUE",
                BoolTest::False => "IS FALSE",
                BoolTest::NotFalse => "IS NOT FALSE",
                BoolTest::Unknown => "IS UNKNOWN",
                BoolTest::NotUnknown => "IS NOT UNKNOWN",
            };
            postfix(arg, test, out, sub)
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
            infix(&[(**left).clone(), (**right).clone()], op, out, sub)
        }
        Expr::InList {
            arg,
            list: items,
            negated,
        } => {
            out.push('(');
            write(arg, out, sub);
            out.push_str(if *negated { " NOT IN (" } else { " IN (" });
            list(items, out, sub);
            out.push_str("))");
        }
        Expr::Quantified {
            op,
            left,
            array,
            all,
        } => {
            out.push('(');
            write(left, out, sub);
            out.push_str(&format!(
                " {} {} (",
                op.sql(),
                if *all { "ALL" } else { "ANY" }
            ));
            write(array, out, sub);
            out.push_str("))");
        }
        Expr::Coalesce { args, .. } => call("COALESCE", args, out, sub),
        Expr::MinMax { greatest, args, .. } => {
            call(if *greatest { "GREATEST" } else { "LEAST" }, args, out, sub)
        }
        Expr::Concat(args) => call("concat", args, out, sub),
        Expr::ArrayCtor { elems, ty } => {
            out.push_str("ARRAY[");
            list(elems, out, sub);
            out.push_str(&format!("]::{ty}"));
        }
        Expr::Subscript {
            array, subscripts, ..
        } => {
            out.push('(');
            write(array, out, sub);
            out.push(')');
            for s in subscripts {
                out.push('[');
                if let Some(lower) = &s.lower {
                    write(lower, out, sub);
                }
                if s.slice {
                    out.push(':');
                }
                if let Some(upper) = &s.upper {
                    write(upper, out, sub);
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
            call(name, args, out, sub)
        }
        Expr::Sublink { subquery, left } => sub(*subquery, left, out),
    }
}

fn postfix(arg: &Expr, suffix: &str, out: &mut String, sub: Sub) {
    out.push('(');
    write(arg, out, sub);
    out.push(' ');
    out.push_str(suffix);
    out.push(')');
}

fn prefix(op: &str, arg: &Expr, out: &mut String, sub: Sub) {
    out.push('(');
    out.push_str(op);
    out.push(' ');
    write(arg, out, sub);
    out.push(')');
}

fn write_op(op: &Op, args: &[Expr], ty: &Type, out: &mut String, sub: Sub) {
    match op {
        Op::Cmp(c) => infix(args, c.sql(), out, sub),
        Op::Add => infix(args, "+", out, sub),
        Op::Sub => infix(args, "-", out, sub),
        Op::Mul => infix(args, "*", out, sub),
        Op::Div => infix(args, "/", out, sub),
        Op::Mod => infix(args, "%", out, sub),
        Op::Pow => infix(args, "^", out, sub),
        Op::BitAnd => infix(args, "&", out, sub),
        Op::BitOr => infix(args, "|", out, sub),
        Op::BitXor => infix(args, "#", out, sub),
        Op::TextConcat => infix(args, "||", out, sub),
        Op::ArrayContains | Op::JsonContains => infix(args, "@>", out, sub),
        Op::ArrayContainedBy => infix(args, "<@", out, sub),
        Op::ArrayOverlaps => infix(args, "&&", out, sub),
        Op::JsonGet => infix(args, "->", out, sub),
        Op::JsonGetText => infix(args, "->>", out, sub),
        Op::JsonHasKey => infix(args, "?", out, sub),
        Op::Neg => prefix("-", &args[0], out, sub),
        Op::Abs => prefix("@", &args[0], out, sub),
        Op::BitNot => prefix("~", &args[0], out, sub),
        Op::Sqrt => prefix("|/", &args[0], out, sub),
        Op::Lower => call("lower", args, out, sub),
        Op::Upper => call("upper", args, out, sub),
        Op::ArrayNdims => call("array_ndims", args, out, sub),
        Op::JustifyDays => call("justify_days", args, out, sub),
        Op::JustifyHours => call("justify_hours", args, out, sub),
        Op::JustifyInterval => call("justify_interval", args, out, sub),
        Op::Timezone => call("timezone", args, out, sub),
        Op::Cast => {
            out.push_str("CAST(");
            write(&args[0], out, sub);
            out.push_str(&format!(" AS {ty})"));
        }
        Op::LikeMatch { pattern, negated } => {
            out.push('(');
            write(&args[0], out, sub);
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
            write(&args[0], out, sub);
            out.push_str(&format!(" {} ", like_word(*insensitive, *negated)));
            write(&args[1], out, sub);
            if let Some(escape) = args.get(2) {
                out.push_str(" ESCAPE ");
                write(escape, out, sub);
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

//! Constant folding as Postgres's planner does it (`eval_const_expressions`): strict operations
//! with a NULL constant argument become NULL, constant operations are computed (an error there
//! fails the clause, as it fails the query in Postgres), AND/OR drop or are decided by boolean
//! constants. Matching the planner matters: a folded branch is never evaluated per row.

use crate::error::EvalError;
use crate::eval::eval_constant_checked;
use std::sync::Arc;

use crate::expr::{Expr, Op, Subscript};
use crate::like::{escape_char, Pattern, DANGLING_ESCAPE};
use crate::types::Type;
use crate::value::Datum;

/// Folds `expr` bottom-up.
pub(crate) fn fold(expr: Expr) -> Result<Expr, EvalError> {
    let folded = match expr {
        Expr::Op { op, args, ty } => {
            let args = fold_all(args)?;
            if matches!(op, Op::Like { .. }) {
                like_escape(&args)?;
            }
            if args
                .iter()
                .any(|a| matches!(a, Expr::Const { value: None, .. }))
            {
                return Ok(Expr::constant(None, ty));
            }
            compile_like(Expr::Op { op, args, ty })
        }
        Expr::And(args) => return logic(args, false),
        Expr::Or(args) => return logic(args, true),
        Expr::Not(arg) => Expr::Not(Box::new(fold(*arg)?)),
        Expr::IsNull { arg, negated } => Expr::IsNull {
            arg: Box::new(fold(*arg)?),
            negated,
        },
        Expr::BoolTest { arg, test } => Expr::BoolTest {
            arg: Box::new(fold(*arg)?),
            test,
        },
        Expr::Distinct {
            left,
            right,
            negated,
        } => Expr::Distinct {
            left: Box::new(fold(*left)?),
            right: Box::new(fold(*right)?),
            negated,
        },
        Expr::InList { arg, list, negated } => Expr::InList {
            arg: Box::new(fold(*arg)?),
            list: fold_all(list)?,
            negated,
        },
        Expr::Quantified {
            op,
            left,
            array,
            all,
        } => Expr::Quantified {
            op,
            left: Box::new(fold(*left)?),
            array: Box::new(fold(*array)?),
            all,
        },
        Expr::Coalesce { args, ty } => return coalesce(args, ty),
        Expr::MinMax { greatest, args, ty } => Expr::MinMax {
            greatest,
            args: fold_all(args)?,
            ty,
        },
        Expr::Concat(args) => Expr::Concat(fold_all(args)?),
        Expr::ArrayCtor { elems, ty } => Expr::ArrayCtor {
            elems: fold_all(elems)?,
            ty,
        },
        // The planner folds the upper subscripts, then the lower ones, then the array.
        Expr::Subscript {
            array,
            subscripts,
            ty,
        } => {
            let mut folded = Vec::with_capacity(subscripts.len());
            for s in &subscripts {
                folded.push(s.upper.clone().map(fold).transpose()?);
            }
            let mut with_lower = Vec::with_capacity(subscripts.len());
            for (s, upper) in subscripts.into_iter().zip(folded) {
                with_lower.push(Subscript {
                    slice: s.slice,
                    lower: s.lower.map(fold).transpose()?,
                    upper,
                });
            }
            Expr::Subscript {
                array: Box::new(fold(*array)?),
                subscripts: with_lower,
                ty,
            }
        }
        Expr::ArrayBuild { kind, args, ty } => Expr::ArrayBuild {
            kind,
            args: fold_all(args)?,
            ty,
        },
        leaf @ (Expr::Const { .. } | Expr::Column { .. } | Expr::Sublink { .. }) => {
            return Ok(leaf)
        }
    };
    if folded.columns().is_empty() {
        let value = eval_constant_checked(&folded)?;
        return Ok(Expr::constant(value, folded.ty().clone()));
    }
    Ok(folded)
}

/// Postgres's `like_escape(pattern, escape)`, which the planner folds when both are constants:
/// an invalid escape string fails the query even when the text is NULL.
fn like_escape(args: &[Expr]) -> Result<(), EvalError> {
    if let [_, Expr::Const { value: Some(_), .. }, Expr::Const {
        value: Some(Datum::Text(escape)),
        ..
    }] = args
    {
        escape_char(Some(escape))?;
    }
    Ok(())
}

/// Rejects what fails the query on rows that reach it, whatever the data, so that a client's
/// mistake is reported when the shape is made rather than failing its snapshot: a constant
/// LIKE pattern that ends with its escape character (Postgres fails when matching gets there)
/// and a constant invalid ESCAPE string beside a non-constant pattern (`like_escape` fails on
/// every non-NULL pattern).
pub(crate) fn reject_certain_errors(expr: &Expr) -> Result<(), EvalError> {
    let mut failure = Ok(());
    expr.visit(&mut |e| {
        if failure.is_err() {
            return;
        }
        match e {
            Expr::Op {
                op: Op::LikeMatch { pattern, .. },
                ..
            } if pattern.ends_with_escape() => {
                failure = Err(EvalError::Other(DANGLING_ESCAPE.into()));
            }
            Expr::Op {
                op: Op::Like { .. },
                args,
                ..
            } => {
                if let Some(Expr::Const {
                    value: Some(Datum::Text(escape)),
                    ..
                }) = args.get(2)
                {
                    failure = escape_char(Some(escape)).map(|_| ());
                }
            }
            _ => {}
        }
    });
    failure
}

/// A LIKE with constant pattern (and escape) becomes a precompiled match; a pattern that does
/// not compile stays as it is and fails when evaluated, as in Postgres.
fn compile_like(e: Expr) -> Expr {
    let Expr::Op {
        op: Op::Like {
            insensitive,
            negated,
        },
        args,
        ty,
    } = &e
    else {
        return e;
    };
    let text = |i: usize| match args.get(i) {
        Some(Expr::Const {
            value: Some(Datum::Text(t)),
            ..
        }) => Some(t.to_string()),
        _ => None,
    };
    let (Some(pattern), escape) = (text(1), text(2)) else {
        return e;
    };
    if args.len() == 3 && escape.is_none() {
        return e;
    }
    match Pattern::compile(&pattern, escape.as_deref(), *insensitive) {
        Ok(pattern) => {
            let op = Op::LikeMatch {
                pattern: Arc::new(pattern),
                negated: *negated,
            };
            Expr::Op {
                op,
                args: vec![args[0].clone()],
                ty: ty.clone(),
            }
        }
        Err(_) => e,
    }
}

/// COALESCE as the planner simplifies it: NULL constants dropped, and the arguments after the
/// first non-NULL constant neither kept nor folded (so an error there never surfaces); a
/// leading non-NULL constant is the result.
fn coalesce(args: Vec<Expr>, ty: Type) -> Result<Expr, EvalError> {
    let mut kept = Vec::with_capacity(args.len());
    for arg in args {
        match fold(arg)? {
            Expr::Const { value: None, .. } => {}
            constant @ Expr::Const { .. } => {
                if kept.is_empty() {
                    return Ok(constant);
                }
                kept.push(constant);
                break;
            }
            other => kept.push(other),
        }
    }
    Ok(match kept.len() {
        0 => Expr::constant(None, ty),
        _ => Expr::Coalesce { args: kept, ty },
    })
}

fn fold_all(args: Vec<Expr>) -> Result<Vec<Expr>, EvalError> {
    args.into_iter().map(fold).collect()
}

/// AND (`decider` false) or OR (`decider` true) as the planner simplifies it
/// (`simplify_and_arguments`, `simplify_or_arguments`): a constant equal to `decider` decides,
/// the other boolean constant is dropped, NULL constants are dropped and one NULL constant
/// ends the list instead (alone, it is the result), and nested ANDs in an AND (ORs in an OR)
/// are flattened.
fn logic(args: Vec<Expr>, decider: bool) -> Result<Expr, EvalError> {
    let mut kept = Vec::with_capacity(args.len());
    let mut have_null = false;
    for arg in args {
        // A nested AND in an AND (OR in an OR) is flattened, as the planner flattens it and as
        // the parser reads `(a OR b) OR c` back, so that rendering is stable. Folded already,
        // it holds no nested one of its own and no deciding constant.
        let items = match fold(arg)? {
            Expr::Or(inner) if decider => inner,
            Expr::And(inner) if !decider => inner,
            other => vec![other],
        };
        for item in items {
            match item {
                Expr::Const {
                    value: Some(Datum::Bool(b)),
                    ..
                } if b == decider => {
                    return Ok(Expr::constant(Some(Datum::Bool(decider)), Type::Bool))
                }
                Expr::Const {
                    value: Some(Datum::Bool(_)),
                    ..
                } => {}
                Expr::Const { value: None, .. } => have_null = true,
                other => kept.push(other),
            }
        }
    }
    if have_null {
        kept.push(Expr::constant(None, Type::Bool));
    }
    Ok(match kept.len() {
        0 => Expr::constant(Some(Datum::Bool(!decider)), Type::Bool),
        1 => kept.pop().unwrap_or_else(|| unreachable!()),
        _ if decider => Expr::Or(kept),
        _ => Expr::And(kept),
    })
}

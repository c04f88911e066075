//! Constant folding as Postgres's planner does it (`eval_const_expressions`): strict operations
//! with a NULL constant argument become NULL, constant operations are computed (an error there
//! fails the clause, as it fails the query in Postgres), AND/OR drop or are decided by boolean
//! constants. Matching the planner matters: a folded branch is never evaluated per row.

use crate::error::EvalError;
use crate::eval::eval_constant_checked;
use std::sync::Arc;

use crate::expr::{Expr, Op};
use crate::like::Pattern;
use crate::types::Type;
use crate::value::Datum;

/// Folds `expr` bottom-up.
pub fn fold(expr: Expr) -> Result<Expr, EvalError> {
    let folded = match expr {
        Expr::Op { op, args, ty } => {
            let args = fold_all(args)?;
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
        Expr::ArrayBuild { kind, args, ty } => Expr::ArrayBuild {
            kind,
            args: fold_all(args)?,
            ty,
        },
        leaf @ (Expr::Const { .. } | Expr::Column { .. }) => return Ok(leaf),
    };
    if folded.columns().is_empty() {
        let value = eval_constant_checked(&folded)?;
        return Ok(Expr::constant(value, folded.ty().clone()));
    }
    Ok(folded)
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

/// AND (`decider` false) or OR (`decider` true): a constant equal to `decider` decides, the
/// other boolean constant is dropped.
fn logic(args: Vec<Expr>, decider: bool) -> Result<Expr, EvalError> {
    let mut kept = Vec::with_capacity(args.len());
    for arg in args {
        match fold(arg)? {
            Expr::Const {
                value: Some(Datum::Bool(b)),
                ..
            } if b == decider => {
                return Ok(Expr::constant(
                    Some(Datum::Bool(decider)),
                    crate::types::Type::Bool,
                ))
            }
            Expr::Const {
                value: Some(Datum::Bool(_)),
                ..
            } => {}
            other => kept.push(other),
        }
    }
    Ok(match kept.len() {
        0 => Expr::constant(Some(Datum::Bool(!decider)), crate::types::Type::Bool),
        1 => kept.pop().unwrap_or_else(|| unreachable!()),
        _ if decider => Expr::Or(kept),
        _ => Expr::And(kept),
    })
}

//! Function calls: the functions Electric supports, and type-named input functions
//! (`int4(x)`), which are casts.

use pg_query::protobuf as pb;

use super::{error, string_of, Checker, Item};
use crate::error::WhereError;
use crate::expr::{ArrayBuild, Expr, Op};
use crate::types::Type;

/// Most arguments Postgres passes to a function (`FUNC_MAX_ARGS`); more fail the query.
const FUNC_ARGS_MAX: usize = 100;

/// Names that are aggregates in Postgres; rejected with Electric's message.
const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "array_agg",
    "string_agg",
    "bool_and",
    "bool_or",
    "every",
    "json_agg",
    "jsonb_agg",
];

impl Checker<'_> {
    pub(super) fn func_call(&self, f: &pb::FuncCall) -> Result<Expr, WhereError> {
        let at = f.location;
        let names: Vec<&str> = f.funcname.iter().filter_map(string_of).collect();
        let name = match names.as_slice() {
            ["pg_catalog", name] | [name] => name.to_ascii_lowercase(),
            _ => {
                return Err(error(
                    at,
                    format!(
                        "unknown or unsupported function {}/{}",
                        names.join("."),
                        f.args.len()
                    ),
                ))
            }
        };
        if f.agg_star
            || f.agg_distinct
            || f.over.is_some()
            || f.agg_filter.is_some()
            || !f.agg_order.is_empty()
            || AGGREGATES.contains(&name.as_str())
        {
            return Err(error(at, "aggregation is not supported in this context"));
        }
        if f.func_variadic {
            return Err(error(at, "VARIADIC is not supported"));
        }
        let unsupported = || {
            error(
                at,
                format!("unknown or unsupported function {name}/{}", f.args.len()),
            )
        };
        let items = f
            .args
            .iter()
            .map(|a| self.item(a))
            .collect::<Result<Vec<_>, _>>()?;
        if let (Some(target), 1) = (Type::from_name(&name), items.len()) {
            let item = items.into_iter().next().ok_or_else(unsupported)?;
            return match item {
                Item::Unknown { .. } => self.coerce(item, &target, at),
                Item::Typed(e) => {
                    super::operators::explicit_cast(e, &target).map_err(|m| error(at, m))
                }
            };
        }
        let args_of = |types: &[Type], items: Vec<Item>| -> Result<Vec<Expr>, WhereError> {
            if items.len() != types.len() {
                return Err(unsupported());
            }
            items
                .into_iter()
                .zip(types)
                .map(|(i, t)| self.coerce(i, t, at))
                .collect()
        };
        let strict = |op: Op, ty: Type, args: Vec<Expr>| Expr::Op { op, args, ty };
        Ok(match name.as_str() {
            "lower" => strict(Op::Lower, Type::Text, args_of(&[Type::Text], items)?),
            "upper" => strict(Op::Upper, Type::Text, args_of(&[Type::Text], items)?),
            "like" | "ilike" => {
                let like = Op::Like {
                    insensitive: name == "ilike",
                    negated: false,
                };
                strict(like, Type::Bool, args_of(&[Type::Text, Type::Text], items)?)
            }
            "justify_days" => strict(
                Op::JustifyDays,
                Type::Interval,
                args_of(&[Type::Interval], items)?,
            ),
            "justify_hours" => strict(
                Op::JustifyHours,
                Type::Interval,
                args_of(&[Type::Interval], items)?,
            ),
            "justify_interval" => strict(
                Op::JustifyInterval,
                Type::Interval,
                args_of(&[Type::Interval], items)?,
            ),
            "concat" if items.len() > FUNC_ARGS_MAX => {
                return Err(error(
                    at,
                    format!("cannot pass more than {FUNC_ARGS_MAX} arguments to a function"),
                ))
            }
            "concat" => Expr::Concat(
                items
                    .into_iter()
                    .map(|i| self.coerce_default(i))
                    .collect::<Result<_, _>>()?,
            ),
            "array_ndims" => {
                let array = self.array_arg(items, at, &unsupported)?;
                strict(Op::ArrayNdims, Type::Int4, vec![array])
            }
            "array_cat" | "array_append" | "array_prepend" => self.array_build(&name, items, at)?,
            "timezone" => self.timezone(items.try_into().map_err(|_| unsupported())?, at)?,
            _ => return Err(unsupported()),
        })
    }

    fn array_arg(
        &self,
        items: Vec<Item>,
        at: i32,
        unsupported: &dyn Fn() -> WhereError,
    ) -> Result<Expr, WhereError> {
        match items.into_iter().next() {
            Some(Item::Typed(e)) if matches!(e.ty(), Type::Array(_)) => Ok(e),
            Some(Item::Typed(e)) => Err(error(
                at,
                format!("function expects an array, got {}", e.ty()),
            )),
            _ => Err(unsupported()),
        }
    }

    /// `timezone(zone, ts)` and `ts AT TIME ZONE zone` with Postgres's signatures: zone text or
    /// interval; timestamp → timestamptz, timestamptz → timestamp. As Postgres resolves them, an
    /// untyped zone is text and an untyped or date `ts` is timestamptz. The timetz forms
    /// (which a time argument would take) are not supported.
    fn timezone(&self, [zone, ts]: [Item; 2], at: i32) -> Result<Expr, WhereError> {
        let zone_ty = match &zone {
            Item::Typed(e) if *e.ty() == Type::Interval => Type::Interval,
            _ => Type::Text,
        };
        let (ts_ty, ty) = match &ts {
            Item::Typed(e) if *e.ty() == Type::Timestamp => (Type::Timestamp, Type::Timestamptz),
            Item::Typed(e) if *e.ty() == Type::Time => {
                return Err(error(
                    at,
                    "timezone() of time with time zone is not supported",
                ))
            }
            _ => (Type::Timestamptz, Type::Timestamp),
        };
        let args = vec![
            self.coerce(zone, &zone_ty, at)?,
            self.coerce(ts, &ts_ty, at)?,
        ];
        Ok(Expr::Op {
            op: Op::Timezone,
            args,
            ty,
        })
    }

    fn array_build(&self, name: &str, items: Vec<Item>, at: i32) -> Result<Expr, WhereError> {
        let message = format!("unknown or unsupported function {name}/{}", items.len());
        let unsupported = || error(at, message.clone());
        if items.len() != 2 {
            return Err(unsupported());
        }
        let array_at = if name == "array_prepend" { 1 } else { 0 };
        let array_ty = match (&items[array_at], &items[1 - array_at]) {
            (Item::Typed(a), _) if matches!(a.ty(), Type::Array(_)) => a.ty().clone(),
            (Item::Unknown { .. }, Item::Typed(o)) if name == "array_cat" => o.ty().clone(),
            (Item::Unknown { .. }, Item::Typed(o)) if !matches!(o.ty(), Type::Array(_)) => {
                Type::Array(Box::new(o.ty().clone()))
            }
            _ => {
                return Err(error(
                    at,
                    "could not determine polymorphic type because input has type unknown",
                ))
            }
        };
        let elem = array_ty.element().cloned().ok_or_else(unsupported)?;
        let mut it = items.into_iter();
        let (first, second) = (
            it.next().ok_or_else(unsupported)?,
            it.next().ok_or_else(unsupported)?,
        );
        let (kind, args) = match name {
            "array_cat" => (
                ArrayBuild::Cat,
                vec![
                    self.coerce(first, &array_ty, at)?,
                    self.coerce(second, &array_ty, at)?,
                ],
            ),
            "array_append" => (
                ArrayBuild::Append,
                vec![
                    self.coerce(first, &array_ty, at)?,
                    self.coerce(second, &elem, at)?,
                ],
            ),
            _ => (
                ArrayBuild::Prepend,
                vec![
                    self.coerce(first, &elem, at)?,
                    self.coerce(second, &array_ty, at)?,
                ],
            ),
        };
        Ok(Expr::ArrayBuild {
            kind,
            args,
            ty: array_ty,
        })
    }
}

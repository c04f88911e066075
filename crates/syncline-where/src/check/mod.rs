//! Type-checking a parsed where clause against a relation: column references, literals and
//! parameters typed by context, operator and function resolution, implicit casts.

mod fold;
mod functions;
mod operators;

use pg_query::protobuf::{self as pb, a_const::Val, node::Node as N, AExprKind, Node};
use syncline_core::relation::RelationDesc;

use crate::error::WhereError;
use crate::expr::{BoolTest, CmpOp, Expr, Op, Subscript};
use crate::parse::PREFIX_LEN;
use crate::subquery::{readable, Sublinks};
use crate::types::{Category, Type};
use crate::value::Datum;

/// Most subscripts (array dimensions) Postgres takes (`MAXDIM`).
const ARRAY_DIMENSIONS_MAX: usize = 6;
/// Deepest parse-tree nesting the checker walks (keeps recursion bounded for any input).
const DEPTH_MAX: usize = 200;
/// Deepest checked expression accepted. Rendering adds a level here and there (casts made
/// explicit, typed constants), and the rendered SQL must still parse within the parse-tree
/// decoder's limit of 100 message levels (about 50 expression levels) to be checked again.
pub(crate) const EXPR_DEPTH_MAX: usize = 32;

/// A checked operand: a typed expression, or a literal whose type the context decides
/// (a quoted string, a `$n` parameter, or NULL).
#[derive(Clone)]
enum Item {
    Typed(Expr),
    Unknown { text: Option<String>, location: i32 },
}

/// Checks the parsed where clause; `params[0]` is `$1`; `sublinks` are its prepared
/// subqueries.
pub(crate) fn check(
    node: &Node,
    relation: &RelationDesc,
    params: &[String],
    sublinks: &Sublinks,
) -> Result<Expr, WhereError> {
    let checker = Checker {
        relation,
        params,
        depth: std::cell::Cell::new(0),
        sublinks: Some(sublinks),
    };
    let location = node_location(node);
    let item = checker.item(node)?;
    let expr = match checker.coerce(item, &Type::Bool, location) {
        Ok(expr) => expr,
        Err(_) => return Err(WhereError::new("WHERE clause must return a boolean")),
    };
    let expr = fold::fold(expr).map_err(|e| WhereError::new(e.to_string()))?;
    fold::reject_certain_errors(&expr).map_err(|e| WhereError::new(e.to_string()))?;
    if expr.depth() > EXPR_DEPTH_MAX {
        return Err(WhereError::new("expression nested too deeply"));
    }
    Ok(expr)
}

/// Checks a parsed expression of any type (a sort key); unknown literals become `text`.
pub(crate) fn check_value(
    node: &Node,
    relation: &RelationDesc,
    params: &[String],
) -> Result<Expr, WhereError> {
    let checker = Checker {
        relation,
        params,
        depth: std::cell::Cell::new(0),
        sublinks: None,
    };
    let expr = checker.typed(Some(node), node_location(node))?;
    let expr = fold::fold(expr).map_err(|e| WhereError::new(e.to_string()))?;
    fold::reject_certain_errors(&expr).map_err(|e| WhereError::new(e.to_string()))?;
    if expr.depth() > EXPR_DEPTH_MAX {
        return Err(WhereError::new("expression nested too deeply"));
    }
    Ok(expr)
}

struct Checker<'a> {
    relation: &'a RelationDesc,
    params: &'a [String],
    depth: std::cell::Cell<usize>,
    /// The prepared subqueries; `None` where no subquery may appear (a sort key).
    sublinks: Option<&'a Sublinks>,
}

/// Electric's text for a left side of `IN (SELECT ...)` that is not bare columns.
const SUBLINK_LEFT_SIDE: &str = "currently, left side of `IN (SELECT ...)` can only be a column reference or a list of column references";
/// Electric's text for a sublink that is not `IN (SELECT ...)`.
const SUBLINK_KIND: &str = "only `value IN (SELECT ...)` sublinks are supported right now";

/// Offset within the where text of a parser location (which counts the `SELECT 1 WHERE ` prefix).
fn local(location: i32) -> i32 {
    (location - PREFIX_LEN).max(0)
}

fn error(location: i32, message: impl Into<String>) -> WhereError {
    WhereError::at(local(location), message)
}

/// The parser location of a node, where it has one.
fn node_location(node: &Node) -> i32 {
    match &node.node {
        Some(N::AExpr(e)) => e.location,
        Some(N::BoolExpr(e)) => e.location,
        Some(N::ColumnRef(e)) => e.location,
        Some(N::ParamRef(e)) => e.location,
        Some(N::AConst(e)) => e.location,
        Some(N::TypeCast(e)) => e.location,
        Some(N::FuncCall(e)) => e.location,
        Some(N::NullTest(e)) => e.location,
        Some(N::BooleanTest(e)) => e.location,
        Some(N::AArrayExpr(e)) => e.location,
        Some(N::CoalesceExpr(e)) => e.location,
        Some(N::MinMaxExpr(e)) => e.location,
        Some(N::SubLink(e)) => e.location,
        Some(N::AIndirection(e)) => e.arg.as_deref().map_or(PREFIX_LEN, node_location),
        _ => PREFIX_LEN,
    }
}

fn string_of(node: &Node) -> Option<&str> {
    match &node.node {
        Some(N::String(s)) => Some(&s.sval),
        _ => None,
    }
}

impl Checker<'_> {
    fn item(&self, node: &Node) -> Result<Item, WhereError> {
        let depth = self.depth.get();
        if depth >= DEPTH_MAX {
            return Err(error(node_location(node), "expression nested too deeply"));
        }
        self.depth.set(depth + 1);
        let result = self.item_inner(node);
        self.depth.set(depth);
        result
    }

    fn item_inner(&self, node: &Node) -> Result<Item, WhereError> {
        let location = node_location(node);
        let Some(inner) = &node.node else {
            return Err(error(location, "empty expression"));
        };
        match inner {
            N::ColumnRef(c) => self.column(c).map(Item::Typed),
            N::ParamRef(p) => self.param(p),
            N::AConst(c) => constant(c),
            N::TypeCast(c) => self.type_cast(c),
            N::AExpr(e) => self.a_expr(e).map(Item::Typed),
            N::BoolExpr(e) => self.bool_expr(e).map(Item::Typed),
            N::NullTest(t) => {
                let arg = self.typed(t.arg.as_deref(), location)?;
                let negated = t.nulltesttype == pb::NullTestType::IsNotNull as i32;
                Ok(Item::Typed(Expr::IsNull {
                    arg: Box::new(arg),
                    negated,
                }))
            }
            N::BooleanTest(t) => self.boolean_test(t).map(Item::Typed),
            N::FuncCall(f) => self.func_call(f).map(Item::Typed),
            N::CoalesceExpr(c) => self.coalesce(&c.args, c.location).map(Item::Typed),
            N::MinMaxExpr(m) => self.min_max(m).map(Item::Typed),
            N::AArrayExpr(a) => self
                .array_ctor(&a.elements, None, a.location)
                .map(Item::Typed),
            N::SubLink(s) => self.sublink(s).map(Item::Typed),
            N::SqlvalueFunction(f) => Err(error(
                f.location,
                "non-deterministic functions are not supported",
            )),
            N::CollateClause(c) => Err(error(c.location, "COLLATE is not supported")),
            N::AIndirection(a) => self.subscript(a).map(Item::Typed),
            other => Err(error(
                location,
                format!("unsupported expression: {}", node_name(other)),
            )),
        }
    }

    /// `left IN (SELECT ...)`, as Electric's parser checks it: the left side first (its own
    /// errors come first), then the kind of sublink, then that the left side is bare columns
    /// (one, or a row of them) of exactly the select list's types.
    fn sublink(&self, s: &pb::SubLink) -> Result<Expr, WhereError> {
        let location = s.location;
        let is_in = s.sub_link_type == pb::SubLinkType::AnySublink as i32 && s.oper_name.is_empty();
        let Some(sublinks) = self.sublinks else {
            let message = if s.sub_link_type == pb::SubLinkType::AnySublink as i32 {
                "subqueries are not supported"
            } else {
                SUBLINK_KIND
            };
            return Err(error(location, message));
        };
        let left = match s.testexpr.as_deref() {
            Some(Node {
                node: Some(N::RowExpr(r)),
            }) => Some((
                r.args
                    .iter()
                    .map(|a| self.item(a))
                    .collect::<Result<Vec<_>, _>>()?,
                true,
            )),
            Some(node) => Some((vec![self.item(node)?], false)),
            None => None,
        };
        let (Some((items, row)), true) = (left, is_in) else {
            return Err(error(location, SUBLINK_KIND));
        };
        let columns: Option<Vec<Expr>> = items
            .into_iter()
            .map(|i| match i {
                Item::Typed(e @ Expr::Column { .. }) => Some(e),
                _ => None,
            })
            .collect();
        let columns = columns.ok_or_else(|| error(location, SUBLINK_LEFT_SIDE))?;
        let info = sublinks
            .get(location)
            .ok_or_else(|| error(location, "malformed subquery"))?;
        let matches = row == (info.types.len() > 1)
            && columns.len() == info.types.len()
            && columns
                .iter()
                .zip(&info.types)
                .all(|(c, t)| Some(c.ty()) == t.as_ref());
        if !matches {
            let names: Vec<String> = columns
                .iter()
                .map(|c| match c {
                    Expr::Column { index, ty, .. } => {
                        readable(Some(ty), &self.relation.columns[*index].pg_type)
                    }
                    other => other.ty().to_string(),
                })
                .collect();
            let left = if row {
                format!("row of ({})", names.join(", "))
            } else {
                names.join(", ")
            };
            return Err(error(
                location,
                format!(
                    "left side of `IN (SELECT ...)` has type {left} but subquery returns {}",
                    info.readable
                ),
            ));
        }
        Ok(Expr::Sublink {
            subquery: info.index,
            left: columns,
        })
    }

    /// Checks a node and gives it a type, unknown literals becoming `text`.
    fn typed(&self, node: Option<&Node>, location: i32) -> Result<Expr, WhereError> {
        let node = node.ok_or_else(|| error(location, "missing operand"))?;
        let item = self.item(node)?;
        self.coerce_default(item)
    }

    fn coerce_default(&self, item: Item) -> Result<Expr, WhereError> {
        match item {
            Item::Typed(e) => Ok(e),
            item => self.coerce(item, &Type::Text, 0),
        }
    }

    fn boolean(&self, node: &Node) -> Result<Expr, WhereError> {
        let location = node_location(node);
        let item = self.item(node)?;
        self.coerce(item, &Type::Bool, location)
    }

    fn column(&self, c: &pb::ColumnRef) -> Result<Expr, WhereError> {
        let names: Vec<&str> = c.fields.iter().filter_map(string_of).collect();
        let name = match names.as_slice() {
            [name] if c.fields.len() == 1 => *name,
            _ => {
                return Err(error(
                    c.location,
                    "unknown reference ".to_string() + &names.join("."),
                ))
            }
        };
        let (index, column) = self
            .relation
            .column(name)
            .ok_or_else(|| error(c.location, format!("unknown reference {name}")))?;
        let ty = Type::from_pg(&column.pg_type).ok_or_else(|| {
            error(
                c.location,
                format!(
                    "column {name} has type {} which cannot be used in a where clause",
                    column.pg_type.name
                ),
            )
        })?;
        Ok(Expr::Column {
            index,
            name: name.to_string(),
            ty,
        })
    }

    fn param(&self, p: &pb::ParamRef) -> Result<Item, WhereError> {
        let value = usize::try_from(p.number)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| self.params.get(i))
            .ok_or_else(|| {
                error(
                    p.location,
                    format!("parameter ${} was not provided", p.number),
                )
            })?;
        unknown(value, p.location)
    }

    fn type_cast(&self, c: &pb::TypeCast) -> Result<Item, WhereError> {
        let target = type_name(c.type_name.as_ref(), c.location)?;
        let node = c
            .arg
            .as_deref()
            .ok_or_else(|| error(c.location, "missing operand"))?;
        if let (Some(N::AArrayExpr(a)), Type::Array(elem)) = (&node.node, &target) {
            return self
                .array_ctor(&a.elements, Some(elem), a.location)
                .map(Item::Typed);
        }
        let item = self.item(node)?;
        match item {
            Item::Unknown { .. } => self.coerce(item, &target, c.location).map(Item::Typed),
            Item::Typed(e) => operators::explicit_cast(e, &target)
                .map(Item::Typed)
                .map_err(|m| error(c.location, m)),
        }
    }

    /// Converts an operand to `target`: unknown literals are read as `target` input, typed
    /// expressions must convert implicitly.
    fn coerce(&self, item: Item, target: &Type, location: i32) -> Result<Expr, WhereError> {
        match item {
            Item::Unknown { text: None, .. } => Ok(Expr::constant(None, target.clone())),
            Item::Unknown {
                text: Some(text),
                location,
            } => {
                let value =
                    Datum::parse(target, &text).map_err(|e| error(location, e.to_string()))?;
                Ok(Expr::constant(Some(value), target.clone()))
            }
            Item::Typed(e) => operators::implicit_cast(e, target).map_err(|m| error(location, m)),
        }
    }

    fn bool_expr(&self, e: &pb::BoolExpr) -> Result<Expr, WhereError> {
        let args = e
            .args
            .iter()
            .map(|a| self.boolean(a))
            .collect::<Result<Vec<_>, _>>()?;
        let op = pb::BoolExprType::try_from(e.boolop).unwrap_or(pb::BoolExprType::Undefined);
        match op {
            pb::BoolExprType::AndExpr => Ok(Expr::And(args)),
            pb::BoolExprType::OrExpr => Ok(Expr::Or(args)),
            pb::BoolExprType::NotExpr if args.len() == 1 => Ok(Expr::Not(Box::new(
                args.into_iter().next().unwrap_or_else(|| unreachable!()),
            ))),
            _ => Err(error(e.location, "malformed boolean expression")),
        }
    }

    fn boolean_test(&self, t: &pb::BooleanTest) -> Result<Expr, WhereError> {
        let arg = t
            .arg
            .as_deref()
            .ok_or_else(|| error(t.location, "missing operand"))?;
        let arg = self.boolean(arg)?;
        let test = match pb::BoolTestType::try_from(t.booltesttype)
            .unwrap_or(pb::BoolTestType::Undefined)
        {
            pb::BoolTestType::IsTrue => BoolTest::True,
            pb::BoolTestType::IsNotTrue => BoolTest::NotTrue,
            pb::BoolTestType::IsFalse => BoolTest::False,
            pb::BoolTestType::IsNotFalse => BoolTest::NotFalse,
            pb::BoolTestType::IsUnknown => BoolTest::Unknown,
            pb::BoolTestType::IsNotUnknown => BoolTest::NotUnknown,
            pb::BoolTestType::Undefined => return Err(error(t.location, "malformed boolean test")),
        };
        Ok(Expr::BoolTest {
            arg: Box::new(arg),
            test,
        })
    }

    fn a_expr(&self, e: &pb::AExpr) -> Result<Expr, WhereError> {
        let name: Vec<&str> = e.name.iter().filter_map(string_of).collect();
        let op = name.last().copied().unwrap_or("");
        let kind = AExprKind::try_from(e.kind).unwrap_or(AExprKind::Undefined);
        let at = e.location;
        match kind {
            AExprKind::AexprOp => match (&e.lexpr, &e.rexpr) {
                (Some(l), Some(r)) => {
                    let (l, r) = (self.item(l)?, self.item(r)?);
                    self.binary(op, l, r, at)
                }
                (None, Some(r)) => {
                    let r = self.item(r)?;
                    let r = self.coerce_default(r)?;
                    operators::unary(op, r).map_err(|m| error(at, m))
                }
                _ => Err(error(at, format!("unsupported operator {op}"))),
            },
            AExprKind::AexprOpAny | AExprKind::AexprOpAll => {
                self.quantified(e, op, kind == AExprKind::AexprOpAll)
            }
            AExprKind::AexprDistinct | AExprKind::AexprNotDistinct => {
                let (l, r) = self.pair(e)?;
                let (l, r) = self.unify(l, r, at)?;
                Ok(Expr::Distinct {
                    left: Box::new(l),
                    right: Box::new(r),
                    negated: kind == AExprKind::AexprNotDistinct,
                })
            }
            AExprKind::AexprIn => self.in_list(e, op == "<>"),
            AExprKind::AexprLike | AExprKind::AexprIlike => self.like(e, op),
            AExprKind::AexprBetween
            | AExprKind::AexprNotBetween
            | AExprKind::AexprBetweenSym
            | AExprKind::AexprNotBetweenSym => self.between(e, kind),
            AExprKind::AexprNullif => Err(error(at, "unknown or unsupported function nullif/2")),
            _ => Err(error(at, format!("unsupported operator {op}"))),
        }
    }

    fn pair(&self, e: &pb::AExpr) -> Result<(Item, Item), WhereError> {
        let l = e
            .lexpr
            .as_deref()
            .ok_or_else(|| error(e.location, "missing operand"))?;
        let r = e
            .rexpr
            .as_deref()
            .ok_or_else(|| error(e.location, "missing operand"))?;
        Ok((self.item(l)?, self.item(r)?))
    }

    /// Brings the two operands of a comparison to the type its operator works in.
    fn unify(&self, l: Item, r: Item, at: i32) -> Result<(Expr, Expr), WhereError> {
        let ty = match (&l, &r) {
            (Item::Typed(a), Item::Typed(b)) => {
                Type::operator_common(a.ty(), b.ty()).ok_or_else(|| {
                    error(
                        at,
                        format!("operator does not exist: {} = {}", a.ty(), b.ty()),
                    )
                })?
            }
            _ => {
                let ty = self.common_type([&l, &r].into_iter(), at)?;
                Type::operator_common(&ty, &ty).unwrap_or(ty)
            }
        };
        Ok((self.coerce(l, &ty, at)?, self.coerce(r, &ty, at)?))
    }

    /// Postgres's `select_common_type`: unknowns follow the typed operands, all-unknown is text.
    fn common_type<'i>(
        &self,
        items: impl Iterator<Item = &'i Item>,
        at: i32,
    ) -> Result<Type, WhereError> {
        let mut common: Option<Type> = None;
        for item in items {
            if let Item::Typed(e) = item {
                common = Some(match common {
                    None => e.ty().clone(),
                    Some(c) => Type::common(&c, e.ty()).ok_or_else(|| {
                        error(at, format!("types {c} and {} cannot be matched", e.ty()))
                    })?,
                });
            }
        }
        Ok(common.unwrap_or(Type::Text))
    }

    fn binary(&self, op: &str, l: Item, r: Item, at: i32) -> Result<Expr, WhereError> {
        if let Some(cmp) = CmpOp::from_sql(op) {
            let (l, r) = self.unify(l, r, at)?;
            return operators::comparison(cmp, l, r).map_err(|m| error(at, m));
        }
        let (lt, rt) = (item_type(&l), item_type(&r));
        let (ltarget, rtarget) =
            operators::binary_operand_types(op, lt, rt).map_err(|m| error(at, m))?;
        let (l, r) = (self.coerce(l, &ltarget, at)?, self.coerce(r, &rtarget, at)?);
        operators::binary(op, l, r).map_err(|m| error(at, m))
    }

    fn quantified(&self, e: &pb::AExpr, op: &str, all: bool) -> Result<Expr, WhereError> {
        let at = e.location;
        let cmp = CmpOp::from_sql(op)
            .ok_or_else(|| error(at, format!("unsupported operator {op} with ANY/ALL")))?;
        let (l, r) = self.pair(e)?;
        let elem = match (&l, &r) {
            (Item::Typed(l), Item::Typed(a)) => {
                let elem = a
                    .ty()
                    .element()
                    .ok_or_else(|| error(at, "op ANY/ALL (array) requires array on right side"))?;
                Type::operator_common(l.ty(), elem).ok_or_else(|| {
                    error(
                        at,
                        format!("operator does not exist: {} {op} {}", l.ty(), a.ty()),
                    )
                })?
            }
            (_, Item::Typed(a)) => a
                .ty()
                .element()
                .cloned()
                .ok_or_else(|| error(at, "op ANY/ALL (array) requires array on right side"))?,
            (Item::Typed(l), Item::Unknown { .. }) => {
                Type::operator_common(l.ty(), l.ty()).unwrap_or_else(|| l.ty().clone())
            }
            _ => Type::Text,
        };
        let left = self.coerce(l, &elem, at)?;
        let array = self.coerce(r, &Type::Array(Box::new(elem)), at)?;
        operators::check_comparable(cmp, left.ty()).map_err(|m| error(at, m))?;
        Ok(Expr::Quantified {
            op: cmp,
            left: Box::new(left),
            array: Box::new(array),
            all,
        })
    }

    fn list_items(&self, node: Option<&Node>, at: i32) -> Result<Vec<Item>, WhereError> {
        match node.and_then(|n| n.node.as_ref()) {
            Some(N::List(list)) => list.items.iter().map(|n| self.item(n)).collect(),
            Some(N::SubLink(_)) => Err(error(at, "subqueries are not supported")),
            _ => Err(error(at, "malformed IN list")),
        }
    }

    /// `x [NOT] IN (...)` as Postgres's `transformAExprIn` builds it: the items without a
    /// column, when there are at least two with a common type, become one `x = ANY` list of
    /// that type; every other item is its own `x = item`, typed on its own (a `bpchar` column
    /// beside a `text` item compares as text, beside a constant as `bpchar`). The parts are
    /// ORed (`NOT IN`: `<>` and AND), the list first.
    fn in_list(&self, e: &pb::AExpr, negated: bool) -> Result<Expr, WhereError> {
        let at = e.location;
        let left = self.item(
            e.lexpr
                .as_deref()
                .ok_or_else(|| error(at, "missing operand"))?,
        )?;
        let items = self.list_items(e.rexpr.as_deref(), at)?;
        let has_column = |i: &Item| matches!(i, Item::Typed(e) if !e.columns().is_empty());
        let constants = items.iter().filter(|i| !has_column(i)).count();
        let list_ty = match constants {
            0 | 1 => None,
            _ => {
                let constant_items = items.iter().filter(|i| !has_column(i));
                self.common_type(std::iter::once(&left).chain(constant_items), at)
                    .ok()
            }
        };
        let mut parts = Vec::with_capacity(items.len());
        let mut singles = Vec::with_capacity(items.len());
        match list_ty {
            Some(list_ty) => {
                let (columns, constants): (Vec<Item>, Vec<Item>) =
                    items.into_iter().partition(has_column);
                let ty = match item_type(&left) {
                    Some(left_ty) => Type::operator_common(left_ty, &list_ty),
                    None => Type::operator_common(&list_ty, &list_ty),
                }
                .ok_or_else(|| {
                    error(
                        at,
                        format!("operator does not exist: {list_ty} = {list_ty}"),
                    )
                })?;
                operators::check_comparable(CmpOp::Eq, &ty).map_err(|m| error(at, m))?;
                let list = constants
                    .into_iter()
                    .map(|i| {
                        self.coerce(i, &list_ty, at)
                            .and_then(|e| self.coerce(Item::Typed(e), &ty, at))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                parts.push(Expr::InList {
                    arg: Box::new(self.coerce(left.clone(), &ty, at)?),
                    list,
                    negated,
                });
                singles = columns;
            }
            None => singles.extend(items),
        }
        let op = if negated { "<>" } else { "=" };
        for item in singles {
            parts.push(self.binary(op, left.clone(), item, at)?);
        }
        Ok(match parts.len() {
            1 => parts.pop().unwrap_or_else(|| unreachable!()),
            _ if negated => Expr::And(parts),
            _ => Expr::Or(parts),
        })
    }

    /// BETWEEN as Postgres rewrites it: two comparisons per bound order, each typed on its own.
    fn between(&self, e: &pb::AExpr, kind: AExprKind) -> Result<Expr, WhereError> {
        let at = e.location;
        let arg = e
            .lexpr
            .as_deref()
            .ok_or_else(|| error(at, "missing operand"))?;
        let bounds: Vec<&Node> = match e.rexpr.as_deref().and_then(|n| n.node.as_ref()) {
            Some(N::List(list)) if list.items.len() == 2 => list.items.iter().collect(),
            _ => return Err(error(at, "malformed BETWEEN")),
        };
        let negated = matches!(
            kind,
            AExprKind::AexprNotBetween | AExprKind::AexprNotBetweenSym
        );
        let symmetric = matches!(
            kind,
            AExprKind::AexprBetweenSym | AExprKind::AexprNotBetweenSym
        );
        let in_range = |low: &Node, high: &Node| -> Result<Expr, WhereError> {
            let (lo_op, hi_op) = if negated {
                (CmpOp::Lt, CmpOp::Gt)
            } else {
                (CmpOp::Ge, CmpOp::Le)
            };
            let lo = self.binary(lo_op.sql(), self.item(arg)?, self.item(low)?, at)?;
            let hi = self.binary(hi_op.sql(), self.item(arg)?, self.item(high)?, at)?;
            Ok(if negated {
                Expr::Or(vec![lo, hi])
            } else {
                Expr::And(vec![lo, hi])
            })
        };
        let forward = in_range(bounds[0], bounds[1])?;
        if !symmetric {
            return Ok(forward);
        }
        let backward = in_range(bounds[1], bounds[0])?;
        Ok(if negated {
            Expr::And(vec![forward, backward])
        } else {
            Expr::Or(vec![forward, backward])
        })
    }

    fn like(&self, e: &pb::AExpr, op: &str) -> Result<Expr, WhereError> {
        let at = e.location;
        let (insensitive, negated) = match op {
            "~~" => (false, false),
            "!~~" => (false, true),
            "~~*" => (true, false),
            "!~~*" => (true, true),
            _ => return Err(error(at, format!("unsupported operator {op}"))),
        };
        let left = self.item(
            e.lexpr
                .as_deref()
                .ok_or_else(|| error(at, "missing operand"))?,
        )?;
        let right = e
            .rexpr
            .as_deref()
            .ok_or_else(|| error(at, "missing operand"))?;
        // bpchar's own LIKE operators match its padded value; any other text matches as text.
        let left_ty = match &left {
            Item::Typed(e) if *e.ty() == Type::Bpchar => Type::Bpchar,
            _ => Type::Text,
        };
        let mut args = vec![self.coerce(left, &left_ty, at)?];
        match &right.node {
            Some(N::FuncCall(f))
                if f.funcname.iter().filter_map(string_of).next_back() == Some("like_escape")
                    && f.args.len() == 2 =>
            {
                for a in &f.args {
                    let item = self.item(a)?;
                    args.push(self.coerce(item, &Type::Text, at)?);
                }
            }
            _ => {
                let item = self.item(right)?;
                args.push(self.coerce(item, &Type::Text, at)?);
            }
        }
        Ok(Expr::Op {
            op: Op::Like {
                insensitive,
                negated,
            },
            args,
            ty: Type::Bool,
        })
    }

    /// `array[i]...` and slices `array[a:b]...`, as Postgres's `transformContainerSubscripts`
    /// checks them: an array operand, at most 6 subscripts, each an integer (an untyped literal
    /// read as `int4`, a numeric type converted as by assignment, so `1.5` is 2).
    fn subscript(&self, a: &pb::AIndirection) -> Result<Expr, WhereError> {
        let at = a.arg.as_deref().map_or(PREFIX_LEN, node_location);
        let array = self.typed(a.arg.as_deref(), at)?;
        let elem = match array.ty() {
            Type::Array(elem) => (**elem).clone(),
            Type::Jsonb => return Err(error(at, "jsonb subscripts are not supported")),
            other => {
                return Err(error(
                    at,
                    format!(
                        "cannot subscript type {other} because it does not support subscripting"
                    ),
                ))
            }
        };
        let mut subscripts = Vec::with_capacity(a.indirection.len());
        for node in &a.indirection {
            match &node.node {
                Some(N::AIndices(ix)) => subscripts.push(Subscript {
                    slice: ix.is_slice,
                    lower: ix.lidx.as_deref().map(|n| self.index(n)).transpose()?,
                    upper: ix.uidx.as_deref().map(|n| self.index(n)).transpose()?,
                }),
                Some(N::String(field)) => {
                    return Err(error(
                        at,
                        format!(
                            "column notation .{} applied to type {}, which is not a composite type",
                            field.sval,
                            array.ty()
                        ),
                    ))
                }
                _ => return Err(error(at, "unsupported indirection")),
            }
        }
        if subscripts.len() > ARRAY_DIMENSIONS_MAX {
            return Err(WhereError::new(format!(
                "number of array dimensions ({}) exceeds the maximum allowed ({ARRAY_DIMENSIONS_MAX})",
                subscripts.len()
            )));
        }
        let ty = if subscripts.iter().any(|s| s.slice) {
            array.ty().clone()
        } else {
            elem
        };
        Ok(Expr::Subscript {
            array: Box::new(array),
            subscripts,
            ty,
        })
    }

    /// A subscript as `int4`: Postgres coerces it by assignment, so numeric types round.
    fn index(&self, node: &Node) -> Result<Expr, WhereError> {
        let location = node_location(node);
        match self.item(node)? {
            item @ Item::Unknown { .. } => self.coerce(item, &Type::Int4, location),
            Item::Typed(e) if e.ty().category() == Category::Numeric => {
                operators::explicit_cast(e, &Type::Int4).map_err(|m| error(location, m))
            }
            Item::Typed(_) => Err(error(location, "array subscript must have type integer")),
        }
    }

    fn coalesce(&self, args: &[Node], at: i32) -> Result<Expr, WhereError> {
        let items = args
            .iter()
            .map(|a| self.item(a))
            .collect::<Result<Vec<_>, _>>()?;
        let ty = self.common_type(items.iter(), at)?;
        let args = items
            .into_iter()
            .map(|i| self.coerce(i, &ty, at))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Expr::Coalesce { args, ty })
    }

    fn min_max(&self, m: &pb::MinMaxExpr) -> Result<Expr, WhereError> {
        let items = m
            .args
            .iter()
            .map(|a| self.item(a))
            .collect::<Result<Vec<_>, _>>()?;
        let ty = self.common_type(items.iter(), m.location)?;
        if !ty.is_ordered() {
            return Err(error(
                m.location,
                format!("could not identify a comparison function for type {ty}"),
            ));
        }
        let args = items
            .into_iter()
            .map(|i| self.coerce(i, &ty, m.location))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Expr::MinMax {
            greatest: m.op == pb::MinMaxOp::IsGreatest as i32,
            args,
            ty,
        })
    }

    /// `ARRAY[...]`; `elem` forces the element type (from a cast), else the common type.
    fn array_ctor(
        &self,
        elements: &[Node],
        elem: Option<&Type>,
        at: i32,
    ) -> Result<Expr, WhereError> {
        let items = elements
            .iter()
            .map(|a| self.item(a))
            .collect::<Result<Vec<_>, _>>()?;
        if items
            .iter()
            .any(|i| matches!(i, Item::Typed(e) if matches!(e.ty(), Type::Array(_))))
        {
            return Err(error(
                at,
                "multidimensional ARRAY[] constructors are not supported",
            ));
        }
        if items.is_empty() && elem.is_none() {
            return Err(error(at, "cannot determine type of empty array"));
        }
        let ty = match elem {
            Some(t) => t.clone(),
            None => self.common_type(items.iter(), at)?,
        };
        let elems = items
            .into_iter()
            .map(|i| self.coerce(i, &ty, at))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Expr::ArrayCtor {
            elems,
            ty: Type::Array(Box::new(ty)),
        })
    }
}

/// An untyped literal (a quoted string or a parameter's value). Postgres takes no NUL
/// character in any text, so one is its encoding error.
fn unknown(text: &str, location: i32) -> Result<Item, WhereError> {
    if text.contains('\0') {
        return Err(error(
            location,
            "invalid byte sequence for encoding \"UTF8\": 0x00",
        ));
    }
    Ok(Item::Unknown {
        text: Some(text.to_string()),
        location,
    })
}

fn item_type(item: &Item) -> Option<&Type> {
    match item {
        Item::Typed(e) => Some(e.ty()),
        Item::Unknown { .. } => None,
    }
}

fn constant(c: &pb::AConst) -> Result<Item, WhereError> {
    if c.isnull {
        return Ok(Item::Unknown {
            text: None,
            location: c.location,
        });
    }
    let typed = |value: Datum, ty: Type| Ok(Item::Typed(Expr::constant(Some(value), ty)));
    match &c.val {
        Some(Val::Ival(i)) => typed(Datum::Int(i.ival as i64), Type::Int4),
        Some(Val::Fval(f)) => {
            let text = f.fval.as_str();
            match text.parse::<i64>() {
                Ok(i) if !text.contains(['.', 'e', 'E']) => typed(Datum::Int(i), Type::Int8),
                _ => Datum::parse(&Type::Numeric, text)
                    .map_err(|e| error(c.location, e.to_string()))
                    .and_then(|d| typed(d, Type::Numeric)),
            }
        }
        Some(Val::Boolval(b)) => typed(Datum::Bool(b.boolval), Type::Bool),
        Some(Val::Sval(s)) => unknown(&s.sval, c.location),
        Some(Val::Bsval(_)) | None => {
            Err(error(c.location, "bit string literals are not supported"))
        }
    }
}

/// The language type a `TypeName` names (`int4`, `pg_catalog.int8`, `text[]`, ...).
fn type_name(t: Option<&pb::TypeName>, at: i32) -> Result<Type, WhereError> {
    let t = t.ok_or_else(|| error(at, "missing type name"))?;
    let names: Vec<&str> = t.names.iter().filter_map(string_of).collect();
    let name = match names.as_slice() {
        ["pg_catalog", name] | [name] => *name,
        _ => {
            return Err(error(
                t.location,
                format!("unsupported type {}", names.join(".")),
            ))
        }
    };
    if !t.typmods.is_empty() {
        return Err(error(t.location, "type modifiers are not supported"));
    }
    let base = Type::from_name(name)
        .ok_or_else(|| error(t.location, format!("unsupported type {name}")))?;
    Ok(if t.array_bounds.is_empty() {
        base
    } else {
        Type::Array(Box::new(base))
    })
}

fn node_name(node: &N) -> String {
    let debug = format!("{node:?}");
    debug.split('(').next().unwrap_or("expression").to_string()
}

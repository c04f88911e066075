//! A subset snapshot's `ORDER BY`: sort keys checked against the table like where-clause
//! expressions, rendered back to canonical SQL (the user's text never reaches Postgres).

use pg_query::protobuf::{
    a_const::Val, node::Node as NodeEnum, AConst, SortBy, SortByDir, SortByNulls,
};
use syncline_core::relation::RelationDesc;

use crate::check::check_value;
use crate::error::WhereError;
use crate::expr::Expr;
use crate::parse::{parse_order_by, ORDER_BY_PREFIX_LEN, PREFIX_LEN};
use crate::render::render;
use syncline_core::sql::{quote_ident, quote_literal};

/// Sort keys a subset may name.
pub(crate) const SORT_KEYS_MAX: usize = 32;

/// A checked `ORDER BY` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderBy {
    sql: String,
}

impl OrderBy {
    /// Parses and checks `text` (`title DESC NULLS LAST, lower(name)`) against `relation`;
    /// `params[0]` is `$1`.
    pub fn new(
        text: &str,
        relation: &RelationDesc,
        params: &[String],
    ) -> Result<OrderBy, WhereError> {
        stacker::maybe_grow(
            crate::PARSE_STACK_RED_ZONE_BYTES,
            crate::PARSE_STACK_BYTES,
            || {
                let items = parse_order_by(text)?;
                if items.len() > SORT_KEYS_MAX {
                    return Err(WhereError::new(format!(
                        "ORDER BY may have at most {SORT_KEYS_MAX} sort keys"
                    )));
                }
                let keys = items
                    .iter()
                    .map(|item| sort_key(item, relation, params))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(OrderBy {
                    sql: keys.join(", "),
                })
            },
        )
    }

    /// Canonical SQL for the list, without the `ORDER BY` keywords.
    pub fn sql(&self) -> &str {
        &self.sql
    }
}

/// One checked, rendered sort key.
fn sort_key(
    item: &SortBy,
    relation: &RelationDesc,
    params: &[String],
) -> Result<String, WhereError> {
    let shift = ORDER_BY_PREFIX_LEN - PREFIX_LEN;
    let node = item
        .node
        .as_deref()
        .ok_or_else(|| WhereError::new("empty sort key"))?;
    let mut sql = match &node.node {
        Some(NodeEnum::AConst(constant)) => position(constant, relation)?,
        _ => {
            let expr = check_value(node, relation, params).map_err(|e| e.shifted(shift))?;
            // A bare name in ORDER BY binds to an output column first (`SELECT "c"::text …
            // ORDER BY "c"` would sort the text); a qualified one always means the table's
            // column.
            match &expr {
                Expr::Column { name, .. } => format!(
                    "{}.{}.{}",
                    quote_ident(&relation.schema),
                    quote_ident(&relation.name),
                    quote_ident(name)
                ),
                _ => render(&expr),
            }
        }
    };
    match SortByDir::try_from(item.sortby_dir) {
        Ok(SortByDir::SortbyDefault | SortByDir::SortbyAsc) => sql.push_str(" ASC"),
        Ok(SortByDir::SortbyDesc) => sql.push_str(" DESC"),
        _ => {
            return Err(WhereError::at(
                item.location - ORDER_BY_PREFIX_LEN,
                "ORDER BY … USING is not supported",
            ))
        }
    }
    match SortByNulls::try_from(item.sortby_nulls) {
        Ok(SortByNulls::SortbyNullsFirst) => sql.push_str(" NULLS FIRST"),
        Ok(SortByNulls::SortbyNullsLast) => sql.push_str(" NULLS LAST"),
        _ => {}
    }
    Ok(sql)
}

/// A constant sort key, which Postgres reads as a position in the select list. Electric's
/// subset query selects one column, each row's JSON message line, which begins with the row's
/// key: `ORDER BY 1` sorts by that line, any other position or a non-integer constant fails in
/// Postgres. Syncline selects the columns themselves, so position 1 is rendered as the text that
/// orders rows as Electric's line does: the key as a JSON string (keys are unique, so the rest
/// of the line never decides).
fn position(constant: &AConst, relation: &RelationDesc) -> Result<String, WhereError> {
    let location = constant.location - ORDER_BY_PREFIX_LEN;
    match &constant.val {
        Some(Val::Ival(i)) if i.ival == 1 && !constant.isnull => Ok(key_json(relation)),
        Some(Val::Ival(i)) if !constant.isnull => Err(WhereError::at(
            location,
            format!("ORDER BY position {} is not in select list", i.ival),
        )),
        _ => Err(WhereError::at(location, "non-integer constant in ORDER BY")),
    }
}

/// SQL for a row's key as a JSON string, built as Electric builds it in its snapshot query:
/// `"schema"."table"`, then per key column (the primary key, or every column by name for a
/// table without one) `/` and the column's text in double quotes with `/` doubled, or `_` for
/// NULL.
fn key_json(relation: &RelationDesc) -> String {
    let pk = relation.primary_key();
    let mut names: Vec<&str> = if pk.is_empty() {
        relation.columns.iter().map(|c| c.name.as_str()).collect()
    } else {
        pk.iter().map(|c| c.name.as_str()).collect()
    };
    if pk.is_empty() {
        names.sort_unstable();
    }
    let prefix = format!("\"{}\".\"{}\"", relation.schema, relation.name);
    let mut key = quote_literal(&prefix);
    for name in names {
        key.push_str(&format!(
            " || '/' || COALESCE('\"' || replace(CAST({} AS text), '/', '//') || '\"', '_')",
            quote_ident(name)
        ));
    }
    format!("CAST(to_json({key}) AS text)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncline_core::relation::{ColumnDesc, PgType, ReplicaIdentity, TypeKind};

    fn relation() -> RelationDesc {
        let column = |name: &str, oid, ty: &str, pk_index| ColumnDesc {
            name: name.into(),
            pg_type: PgType {
                oid,
                name: ty.into(),
                kind: TypeKind::Base,
            },
            type_mod: -1,
            not_null: false,
            pk_index,
            array_dims: 0,
        };
        RelationDesc {
            oid: 1,
            schema: "public".into(),
            name: "items".into(),
            columns: vec![
                column("id", 23, "int4", Some(0)),
                column("title", 25, "text", None),
            ],
            replica_identity: ReplicaIdentity::Full,
        }
    }

    #[test]
    fn renders_canonical_sort_keys() {
        let r = relation();
        let o = OrderBy::new("title desc nulls last, ID, lower(title) asc", &r, &[]).unwrap();
        assert_eq!(
            o.sql(),
            r#""public"."items"."title" DESC NULLS LAST, "public"."items"."id" ASC, lower("title") ASC"#
        );
        let o = OrderBy::new("id + $1 NULLS FIRST", &r, &["2".into()]).unwrap();
        assert_eq!(o.sql(), r#"("id" + '2'::int4) ASC NULLS FIRST"#);
    }

    #[test]
    fn position_one_sorts_by_the_key_as_electric_does() {
        let r = relation();
        let key = r#"CAST(to_json('"public"."items"' || '/' || COALESCE('"' || replace(CAST("id" AS text), '/', '//') || '"', '_')) AS text)"#;
        assert_eq!(
            OrderBy::new("1", &r, &[]).unwrap().sql(),
            format!("{key} ASC")
        );
        assert_eq!(
            OrderBy::new("title, (1) DESC", &r, &[]).unwrap().sql(),
            format!(r#""public"."items"."title" ASC, {key} DESC"#)
        );
        assert_eq!(OrderBy::new("+1", &r, &[]).unwrap().sql(), "'1'::int4 ASC");
        for (text, message) in [
            (
                "id, 2",
                "At location 4: ORDER BY position 2 is not in select list",
            ),
            (
                "0",
                "At location 0: ORDER BY position 0 is not in select list",
            ),
            (
                "-1",
                "At location 0: ORDER BY position -1 is not in select list",
            ),
            ("'a'", "At location 0: non-integer constant in ORDER BY"),
            ("id, 1.5", "At location 4: non-integer constant in ORDER BY"),
            ("NULL", "At location 0: non-integer constant in ORDER BY"),
            ("true", "At location 0: non-integer constant in ORDER BY"),
            (
                "2147483648",
                "At location 0: non-integer constant in ORDER BY",
            ),
        ] {
            assert_eq!(
                OrderBy::new(text, &r, &[]).unwrap_err().message,
                message,
                "{text}"
            );
        }
    }

    #[test]
    fn rejects_unknown_columns_with_their_location() {
        let r = relation();
        assert_eq!(
            OrderBy::new("id, nope DESC", &r, &[]).unwrap_err().message,
            "At location 4: unknown reference nope"
        );
        assert_eq!(
            OrderBy::new("id USING <", &r, &[]).unwrap_err().message,
            "At location 9: ORDER BY … USING is not supported"
        );
        assert!(OrderBy::new("id; select 1", &r, &[]).is_err());
        assert!(OrderBy::new("(select 1)", &r, &[]).is_err());
    }
}

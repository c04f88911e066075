//! A subset snapshot's `ORDER BY`: sort keys checked against the table like where-clause
//! expressions, rendered back to canonical SQL (the user's text never reaches Postgres).

use pg_query::protobuf::{SortBy, SortByDir, SortByNulls};
use syncline_core::relation::RelationDesc;

use crate::check::check_value;
use crate::error::WhereError;
use crate::expr::Expr;
use crate::parse::{parse_order_by, ORDER_BY_PREFIX, PREFIX};
use crate::render::{quote_ident, render};

/// Sort keys a subset may name.
pub const SORT_KEYS_MAX: usize = 32;

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
    let shift = (ORDER_BY_PREFIX.len() - PREFIX.len()) as i32;
    let node = item
        .node
        .as_deref()
        .ok_or_else(|| WhereError::new("empty sort key"))?;
    let expr = check_value(node, relation, params).map_err(|e| e.shifted(shift))?;
    // A bare name in ORDER BY binds to an output column first (`SELECT "c"::text … ORDER BY
    // "c"` would sort the text); a qualified one always means the table's column.
    let mut sql = match &expr {
        Expr::Column { name, .. } => format!(
            "{}.{}.{}",
            quote_ident(&relation.schema),
            quote_ident(&relation.name),
            quote_ident(name)
        ),
        _ => render(&expr),
    };
    match SortByDir::try_from(item.sortby_dir) {
        Ok(SortByDir::SortbyDefault | SortByDir::SortbyAsc) => sql.push_str(" ASC"),
        Ok(SortByDir::SortbyDesc) => sql.push_str(" DESC"),
        _ => {
            return Err(WhereError::at(
                item.location - ORDER_BY_PREFIX.len() as i32,
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

#[cfg(test)]
mod tests {
    use super::*;
    use syncline_core::relation::{ColumnDesc, PgType, ReplicaIdentity, TypeKind};

    fn relation() -> RelationDesc {
        let column = |name: &str, oid, ty: &str| ColumnDesc {
            name: name.into(),
            pg_type: PgType {
                oid,
                name: ty.into(),
                kind: TypeKind::Base,
            },
            type_mod: -1,
            not_null: false,
            pk_index: None,
            array_dims: 0,
        };
        RelationDesc {
            oid: 1,
            schema: "public".into(),
            name: "items".into(),
            columns: vec![column("id", 23, "int4"), column("title", 25, "text")],
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

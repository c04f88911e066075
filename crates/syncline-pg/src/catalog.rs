//! Reading relation and type descriptions from the catalog.

use syncline_core::{ColumnDesc, PgType, RelationDesc, ReplicaIdentity, TypeKind};
use tokio_postgres::Client;

use crate::error::{PgError, PgResult};

/// Deepest type nesting followed (domain over array over domain …) before giving up.
const TYPE_DEPTH_MAX: u32 = 8;

/// Describes the table `schema.name`, or `None` if there is no such table.
pub async fn load_relation(
    client: &Client,
    schema: &str,
    name: &str,
) -> PgResult<Option<RelationDesc>> {
    let row = client
        .query_opt(
            "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')",
            &[&schema, &name],
        )
        .await?;
    match row {
        Some(row) => load_relation_by_oid(client, row.get(0)).await,
        None => Ok(None),
    }
}

/// Describes the table with OID `oid`, or `None` if there is none.
pub async fn load_relation_by_oid(client: &Client, oid: u32) -> PgResult<Option<RelationDesc>> {
    let Some(rel) = client
        .query_opt(
            "SELECT n.nspname::text, c.relname::text, c.relreplident::\"char\" FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1",
            &[&oid],
        )
        .await?
    else {
        return Ok(None);
    };
    let identity: i8 = rel.get(2);
    let replica_identity = ReplicaIdentity::from_char(identity.to_ne_bytes()[0])
        .ok_or_else(|| PgError::Protocol(format!("unknown replica identity {identity}")))?;
    let rows = client
        .query(
            "SELECT a.attname::text, a.atttypid, a.atttypmod, a.attnotnull, \
               (SELECT array_position(i.indkey::int2[], a.attnum) - array_lower(i.indkey::int2[], 1) \
                FROM pg_index i WHERE i.indrelid = a.attrelid AND i.indisprimary), a.attndims::int4 \
             FROM pg_attribute a WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            &[&oid],
        )
        .await?;
    let mut columns = Vec::with_capacity(rows.len());
    for row in rows {
        let pk_position: Option<i32> = row.get(4);
        columns.push(ColumnDesc {
            name: row.get(0),
            pg_type: load_type(client, row.get(1)).await?,
            type_mod: row.get(2),
            not_null: row.get(3),
            pk_index: pk_position.and_then(|p| usize::try_from(p).ok()),
            array_dims: u32::try_from(row.get::<_, i32>(5)).unwrap_or(0),
        });
    }
    Ok(Some(RelationDesc {
        oid,
        schema: rel.get(0),
        name: rel.get(1),
        columns,
        replica_identity,
    }))
}

/// Describes the type with OID `oid`, following domains and array elements.
pub async fn load_type(client: &Client, oid: u32) -> PgResult<PgType> {
    let mut chain = Vec::new();
    let mut next = oid;
    // Walk down iteratively (async recursion would need boxing), then fold back up.
    for _ in 0..TYPE_DEPTH_MAX {
        let row = client
            .query_one(
                "SELECT typname::text, typtype::text, typelem, typbasetype, typcategory::text, typlen FROM pg_type WHERE oid = $1",
                &[&next],
            )
            .await?;
        let (name, typtype, elem, base, category, len): (String, String, u32, u32, String, i16) = (
            row.get(0),
            row.get(1),
            row.get(2),
            row.get(3),
            row.get(4),
            row.get(5),
        );
        let link = match (typtype.as_str(), category.as_str()) {
            ("d", _) => Some(base),
            ("b", "A") if elem != 0 && len == -1 => Some(elem),
            _ => None,
        };
        match link {
            Some(l) => {
                chain.push((next, name, typtype == "d"));
                next = l;
            }
            None => {
                let kind = match typtype.as_str() {
                    "e" => TypeKind::Enum,
                    "b" => TypeKind::Base,
                    _ => TypeKind::Other,
                };
                return Ok(fold(
                    PgType {
                        oid: next,
                        name,
                        kind,
                    },
                    chain,
                ));
            }
        }
    }
    Err(PgError::Protocol(format!(
        "type {oid} nests deeper than {TYPE_DEPTH_MAX} levels"
    )))
}

/// Wraps the innermost type in the domains and arrays found above it, innermost last.
fn fold(innermost: PgType, mut chain: Vec<(u32, String, bool)>) -> PgType {
    let mut ty = innermost;
    while let Some((oid, name, is_domain)) = chain.pop() {
        let kind = if is_domain {
            TypeKind::Domain(Box::new(ty))
        } else {
            TypeKind::Array(Box::new(ty))
        };
        ty = PgType { oid, name, kind };
    }
    ty
}

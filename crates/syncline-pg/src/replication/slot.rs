//! Replication slots.

use syncline_core::Lsn;

use crate::conn::ConnConfig;
use crate::error::{PgError, PgResult};
use crate::wire::{Mode, WireConnection};
use syncline_core::sql::quote_ident;

/// SQLSTATE `duplicate_object`: the slot exists already.
const DUPLICATE_OBJECT: &str = "42710";

/// A logical replication slot as found or created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotInfo {
    /// Slot name.
    pub name: String,
    /// True when this call created it.
    pub created: bool,
    /// Where decoding resumes: the consistent point of a new slot, or the confirmed flush
    /// position of an existing one.
    pub resume_lsn: Lsn,
}

/// Creates the pgoutput slot `name` unless it exists, and says where streaming will resume.
pub async fn ensure_slot(config: &ConnConfig, name: &str) -> PgResult<SlotInfo> {
    let mut conn = WireConnection::connect(config, "syncline-slot", Mode::Replication).await?;
    let sql = format!(
        "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput NOEXPORT_SNAPSHOT",
        quote_ident(name)
    );
    match conn.simple_query(&sql).await {
        Ok(rows) => {
            let point = rows.first().and_then(|r| r.get(1).cloned().flatten());
            let resume_lsn = parse_lsn(point.as_deref())?;
            tracing::info!(slot = name, consistent_point = %resume_lsn, "created replication slot");
            Ok(SlotInfo {
                name: name.to_owned(),
                created: true,
                resume_lsn,
            })
        }
        Err(PgError::Server { code, .. }) if code == DUPLICATE_OBJECT => {
            let rows = conn
                .simple_query(&format!(
                    "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = {}",
                    syncline_core::sql::quote_literal(name)
                ))
                .await?;
            let resume_lsn = parse_lsn(rows.first().and_then(|r| r[0].as_deref()))?;
            Ok(SlotInfo {
                name: name.to_owned(),
                created: false,
                resume_lsn,
            })
        }
        Err(e) => Err(e),
    }
}

/// Drops the slot `name` if it exists, waiting for an active walsender to let go of it.
pub async fn drop_slot(config: &ConnConfig, name: &str) -> PgResult<()> {
    let mut conn = WireConnection::connect(config, "syncline-slot", Mode::Replication).await?;
    match conn
        .simple_query(&format!("DROP_REPLICATION_SLOT {} WAIT", quote_ident(name)))
        .await
    {
        Ok(_) => Ok(()),
        Err(PgError::Server { code, .. }) if code == "42704" => Ok(()),
        Err(e) => Err(e),
    }
}

fn parse_lsn(text: Option<&str>) -> PgResult<Lsn> {
    let text = text.ok_or_else(|| PgError::Protocol("slot has no LSN".into()))?;
    text.parse()
        .map_err(|e: syncline_core::lsn::ParseLsnError| PgError::Protocol(e.to_string()))
}

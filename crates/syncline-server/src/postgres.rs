//! Postgres access for everything but the replication stream: the catalog connection, query
//! connections for snapshots and subsets (bounded by `ELECTRIC_DB_POOL_SIZE`), relation
//! loading and publication membership. Catalog lookups that requests make at the same time
//! share their round trips ([`SharedLookups`]), and a table is published once per process.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use syncline_core::RelationDesc;
use syncline_pg::wire::{Mode, WireConnection};
use syncline_pg::{ConnConfig, PgResult};
use tokio::sync::{AcquireError, Mutex, OwnedSemaphorePermit, Semaphore};
use tokio_postgres::Client;

use crate::shared_lookup::SharedLookups;

/// What decides whether shapes may be made on a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableFacts {
    /// Row-level security policies apply to this server's role (`row_security_active`).
    pub row_security: bool,
    /// Generated columns, in table order (Postgres 15 does not replicate them).
    pub generated: Vec<String>,
}

/// How long a query connection may wait idle for reuse; older ones are closed rather than
/// found broken by a snapshot (Postgres's `idle_session_timeout`, a restart).
const IDLE_CONNECTION_TTL: Duration = Duration::from_secs(30);

/// A query connection, new or reused.
pub struct QueryConnection {
    /// The connection.
    pub conn: WireConnection,
    /// It served an earlier query: a failure on its first statement may only mean it broke
    /// while idle, and is worth one retry on a new connection.
    pub reused: bool,
}

/// The server's ordinary Postgres connections.
pub struct Postgres {
    config: ConnConfig,
    publication: String,
    /// Bounds concurrent snapshots and subset queries (each holds a connection).
    query_permits: Arc<Semaphore>,
    /// At most `pool_size` idle query connections, each with its application name and when it
    /// became idle: a snapshot need not start a Postgres backend of its own.
    idle: std::sync::Mutex<Vec<(String, Instant, WireConnection)>>,
    pool_size: usize,
    admin: Mutex<Option<Client>>,
    /// Tables described by name, for the requests asking at the same time.
    relations: SharedLookups<(String, String), Option<RelationDesc>>,
    /// Table facts by OID, likewise.
    facts: SharedLookups<u32, TableFacts>,
    /// Publishing by OID, likewise.
    publishing: SharedLookups<u32, ()>,
    /// Tables this process has published (with `REPLICA IDENTITY FULL`); it never unpublishes
    /// one, and a table created again has a new OID.
    published: std::sync::Mutex<HashSet<u32>>,
}

impl Postgres {
    /// Access to the database `config` names, publishing tables in `publication`, with at most
    /// `pool_size` query connections at once.
    pub fn new(config: ConnConfig, publication: String, pool_size: usize) -> Postgres {
        Postgres {
            config,
            publication,
            query_permits: Arc::new(Semaphore::new(pool_size)),
            idle: std::sync::Mutex::new(Vec::new()),
            pool_size,
            admin: Mutex::new(None),
            relations: SharedLookups::default(),
            facts: SharedLookups::default(),
            publishing: SharedLookups::default(),
            published: std::sync::Mutex::new(HashSet::new()),
        }
    }

    /// The connection settings.
    pub fn config(&self) -> &ConnConfig {
        &self.config
    }

    /// The publication replication reads.
    pub fn publication(&self) -> &str {
        &self.publication
    }

    /// Waits for a free query connection slot; fails only when the server is shutting down.
    pub async fn query_permit(&self) -> Result<OwnedSemaphorePermit, AcquireError> {
        self.query_permits.clone().acquire_owned().await
    }

    /// A query connection with Electric's session settings (text output formats, UTC), for a
    /// snapshot or a subset query: an idle one with the same application name if there is
    /// one, else a new one.
    pub async fn query_connection(&self, application_name: &str) -> PgResult<QueryConnection> {
        if let Some(conn) = self.idle_connection(application_name) {
            return Ok(QueryConnection { conn, reused: true });
        }
        self.new_query_connection(application_name)
            .await
            .map(|conn| QueryConnection {
                conn,
                reused: false,
            })
    }

    /// A new query connection with Electric's session settings.
    pub async fn new_query_connection(&self, application_name: &str) -> PgResult<WireConnection> {
        let mut conn = WireConnection::connect(&self.config, application_name, Mode::Query).await?;
        conn.simple_query(&syncline_pg::conn::session_settings_sql())
            .await?;
        Ok(conn)
    }

    /// Keeps `conn`, idle outside any transaction, for the next [`Postgres::query_connection`]
    /// with the same application name (closed instead when `pool_size` are idle already).
    pub fn reuse(&self, application_name: &str, conn: WireConnection) {
        let mut idle = self.idle.lock().expect("idle connections lock");
        if idle.len() < self.pool_size {
            idle.push((application_name.to_owned(), Instant::now(), conn));
        }
    }

    /// The most recently idle connection named `application_name`, closing those idle too long.
    fn idle_connection(&self, application_name: &str) -> Option<WireConnection> {
        let mut idle = self.idle.lock().expect("idle connections lock");
        idle.retain(|(_, since, _)| since.elapsed() < IDLE_CONNECTION_TTL);
        let i = idle
            .iter()
            .rposition(|(name, _, _)| name == application_name)?;
        Some(idle.swap_remove(i).2)
    }

    /// Runs `f` with the catalog connection, connecting first if needed; a failed connection
    /// is dropped so the next call reconnects.
    async fn with_admin<T>(&self, f: impl AsyncFnOnce(&Client) -> PgResult<T>) -> PgResult<T> {
        let mut guard = self.admin.lock().await;
        if guard.as_ref().is_none_or(Client::is_closed) {
            *guard = Some(syncline_pg::connect(&self.config).await?);
        }
        let client = guard.as_ref().expect("connected above");
        let result = f(client).await;
        if result.is_err() && client.is_closed() {
            *guard = None;
        }
        result
    }

    /// Creates the publication unless it exists. Each pipeline start calls this; what this
    /// process published before is checked again at the next shape on each table (the
    /// publication may have been made anew, empty).
    pub async fn ensure_publication(&self) -> PgResult<()> {
        self.published.lock().expect("published lock").clear();
        self.with_admin(async |c| {
            syncline_pg::publication::ensure_publication(c, &self.publication).await
        })
        .await
    }

    /// Adds `relation` to the publication (with `REPLICA IDENTITY FULL`) unless it is in it;
    /// once done, later calls for the table cost nothing.
    pub async fn publish(&self, relation: &RelationDesc) -> PgResult<()> {
        let is_published = || {
            self.published
                .lock()
                .expect("published lock")
                .contains(&relation.oid)
        };
        if is_published() {
            return Ok(());
        }
        self.publishing
            .get(&relation.oid, async || {
                if is_published() {
                    return Ok(());
                }
                self.with_admin(async |c| {
                    syncline_pg::publication::add_table(
                        c,
                        &self.publication,
                        &relation.schema,
                        &relation.name,
                        true,
                    )
                    .await
                })
                .await?;
                self.published
                    .lock()
                    .expect("published lock")
                    .insert(relation.oid);
                Ok(())
            })
            .await
    }

    /// Describes `schema.table`, `None` if there is no such table.
    pub async fn load_relation(&self, schema: &str, table: &str) -> PgResult<Option<RelationDesc>> {
        let key = (schema.to_owned(), table.to_owned());
        self.relations
            .get(&key, async || {
                self.with_admin(async |c| {
                    syncline_pg::catalog::load_relation(c, schema, table).await
                })
                .await
            })
            .await
    }

    /// What decides whether shapes may be made on the table `oid`.
    pub async fn table_facts(&self, oid: u32) -> PgResult<TableFacts> {
        self.facts
            .get(&oid, async || self.read_table_facts(oid).await)
            .await
    }

    async fn read_table_facts(&self, oid: u32) -> PgResult<TableFacts> {
        self.with_admin(async |c| {
            let row = c
                .query_one(
                    "SELECT row_security_active($1::oid::regclass), \
                       ARRAY(SELECT attname::text FROM pg_attribute WHERE attrelid = $1 \
                             AND attnum > 0 AND NOT attisdropped AND attgenerated <> '' \
                             ORDER BY attnum)",
                    &[&oid],
                )
                .await?;
            Ok(TableFacts {
                row_security: row.get(0),
                generated: row.get(1),
            })
        })
        .await
    }

    /// The partitions of the table `oid` at every level (none for a plain table).
    pub async fn partitions(&self, oid: u32) -> PgResult<Vec<u32>> {
        self.with_admin(async |c| syncline_pg::publication::partitions(c, oid).await)
            .await
    }

    /// The OID of the table `schema.name`, `None` if there is none.
    pub async fn table_oid(&self, schema: &str, name: &str) -> PgResult<Option<u32>> {
        self.with_admin(async |c| {
            let row = c
                .query_opt(
                    "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                     WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')",
                    &[&schema, &name],
                )
                .await?;
            Ok(row.map(|r| r.get(0)))
        })
        .await
    }

    /// Describes the table with `oid`, `None` if there is none.
    pub async fn load_relation_by_oid(&self, oid: u32) -> PgResult<Option<RelationDesc>> {
        self.with_admin(async |c| syncline_pg::catalog::load_relation_by_oid(c, oid).await)
            .await
    }

    /// Whether a walsender streams the replication slot `name` now.
    pub async fn slot_active(&self, name: &str) -> PgResult<bool> {
        self.with_admin(async |c| {
            let row = c
                .query_opt(
                    "SELECT active FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
                    &[&name],
                )
                .await?;
            Ok(row.is_some_and(|r| r.get(0)))
        })
        .await
    }
}

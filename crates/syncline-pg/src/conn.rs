//! Connection settings and ordinary (non-replication) connections.

use std::str::FromStr;

use tokio_postgres::config::Host;
use tokio_postgres::{Client, Config, NoTls};

use crate::error::{PgError, PgResult};

/// Session settings under which Postgres renders values exactly as Electric's clients expect.
/// Applied to snapshot connections and sent as startup parameters on the replication connection.
pub const SESSION_SETTINGS: &[(&str, &str)] = &[
    ("bytea_output", "hex"),
    ("DateStyle", "ISO, DMY"),
    ("TimeZone", "UTC"),
    ("extra_float_digits", "1"),
    ("IntervalStyle", "iso_8601"),
];

/// Where and as whom to connect: parsed from a `postgres://` URL or a libpq key-value string.
///
/// Connections are made without TLS; `sslmode=require` is refused rather than ignored.
#[derive(Debug, Clone)]
pub struct ConnConfig {
    inner: Config,
}

/// The network endpoint of a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// Host name or address, and port.
    Tcp(String, u16),
    /// Unix-socket directory, and port (the socket file is `.s.PGSQL.<port>`).
    Unix(std::path::PathBuf, u16),
}

impl ConnConfig {
    /// Parses a connection URL or key-value string as libpq does.
    pub fn parse(text: &str) -> PgResult<ConnConfig> {
        let inner = Config::from_str(text).map_err(|e| PgError::Config(e.to_string()))?;
        if inner.get_user().is_none() {
            return Err(PgError::Config("no user given".into()));
        }
        if inner.get_hosts().is_empty() {
            return Err(PgError::Config("no host given".into()));
        }
        if inner.get_ssl_mode() == tokio_postgres::config::SslMode::Require {
            return Err(PgError::Config(
                "sslmode=require is not supported yet: Syncline connects without TLS".into(),
            ));
        }
        Ok(ConnConfig { inner })
    }

    /// The user name.
    pub fn user(&self) -> &str {
        self.inner.get_user().unwrap_or("postgres")
    }

    /// The password, if any.
    pub fn password(&self) -> Option<&[u8]> {
        self.inner.get_password()
    }

    /// The database name (defaults to the user name, as libpq does).
    pub fn dbname(&self) -> &str {
        self.inner.get_dbname().unwrap_or_else(|| self.user())
    }

    /// The first endpoint to try.
    pub fn endpoint(&self) -> Endpoint {
        let port = self.inner.get_ports().first().copied().unwrap_or(5432);
        match &self.inner.get_hosts()[0] {
            Host::Tcp(host) => Endpoint::Tcp(host.clone(), port),
            Host::Unix(dir) => Endpoint::Unix(dir.clone(), port),
        }
    }

    /// The tokio-postgres configuration, for ordinary connections.
    pub fn client_config(&self) -> &Config {
        &self.inner
    }
}

/// Opens an ordinary connection with [`SESSION_SETTINGS`] applied; the connection task runs on
/// the current tokio runtime and ends when the client is dropped.
pub async fn connect(config: &ConnConfig) -> PgResult<Client> {
    let (client, connection) = config.client_config().connect(NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "postgres connection ended");
        }
    });
    client.batch_execute(&session_settings_sql()).await?;
    Ok(client)
}

/// `SET` statements for [`SESSION_SETTINGS`].
pub fn session_settings_sql() -> String {
    SESSION_SETTINGS
        .iter()
        .map(|(k, v)| format!("SET {k} = '{v}';"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls_and_key_value_strings() {
        let url = ConnConfig::parse("postgres://alice:secret@db.example:6543/app").unwrap();
        assert_eq!(
            (url.user(), url.password(), url.dbname()),
            ("alice", Some(&b"secret"[..]), "app")
        );
        assert_eq!(url.endpoint(), Endpoint::Tcp("db.example".into(), 6543));
        let kv = ConnConfig::parse("host=/tmp/sock port=5555 user=bob").unwrap();
        assert_eq!(kv.dbname(), "bob");
        assert_eq!(kv.endpoint(), Endpoint::Unix("/tmp/sock".into(), 5555));
    }

    #[test]
    fn refuses_what_it_cannot_honour() {
        assert!(ConnConfig::parse("host=localhost").is_err(), "no user");
        assert!(ConnConfig::parse("user=x").is_err(), "no host");
        assert!(
            ConnConfig::parse("postgres://x@h/db?sslmode=require").is_err(),
            "TLS required"
        );
        assert!(ConnConfig::parse("not a connection string").is_err());
    }
}

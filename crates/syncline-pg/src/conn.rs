//! Connection settings and ordinary (non-replication) connections.

use std::borrow::Cow;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use percent_encoding::percent_decode_str;
use rustls::ClientConfig;
use tokio_postgres::config::{Host, SslMode as ClientSslMode};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, Config, Connection, NoTls, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::endpoint::Endpoint;
use crate::error::{PgError, PgResult, TlsFailure};
use crate::tls::{tls_failure, worth_retrying_without_tls, SslMode, TlsSettings};

/// Session settings every connection Syncline opens runs under, whatever the role or the
/// database sets: values are rendered exactly as Electric's clients expect, and string literals
/// are read the way `syncline_core::sql` writes them. Sent as startup parameters (which take
/// precedence over `ALTER ROLE`/`ALTER DATABASE` settings) and, on ordinary connections, as
/// `SET` statements too. The search path is `pg_catalog, public`, whatever the role says: the
/// built-ins a where clause calls come first, no other schema is searched, and Postgres names
/// a type of `public` unqualified in its messages, as it does for Electric. Every relation
/// Syncline names is schema-qualified.
pub const SESSION_SETTINGS: &[(&str, &str)] = &[
    ("client_encoding", "UTF8"),
    ("standard_conforming_strings", "on"),
    ("backslash_quote", "safe_encoding"),
    ("bytea_output", "hex"),
    ("DateStyle", "ISO, DMY"),
    ("TimeZone", "UTC"),
    ("extra_float_digits", "1"),
    ("IntervalStyle", "iso_8601"),
    ("search_path", "pg_catalog, public"),
];

/// Where and as whom to connect: parsed from a `postgres://` URL or a libpq key-value string.
///
/// TLS follows libpq's `sslmode` (default `prefer`) and `sslrootcert`; see [`crate::tls`].
#[derive(Debug, Clone)]
pub struct ConnConfig {
    inner: Config,
    tls: TlsSettings,
}

impl ConnConfig {
    /// Parses a connection URL or key-value string as libpq does. A root certificate file
    /// (`sslrootcert`) is read now.
    pub fn parse(text: &str) -> PgResult<ConnConfig> {
        // tokio-postgres knows neither `verify-ca`/`verify-full` nor `sslrootcert`: those are
        // taken out and handled here.
        let (rest, options) = take_tls_options(text)?;
        let mut inner = Config::from_str(&rest).map_err(|e| match PgError::from(e) {
            PgError::Client(e) => PgError::Config(e.to_string()),
            other => other,
        })?;
        if inner.get_user().is_none() {
            return Err(PgError::Config("no user given".into()));
        }
        if inner.get_hosts().is_empty() {
            return Err(PgError::Config("no host given".into()));
        }
        if inner.get_hosts().len() > 1 || inner.get_ports().len() > 1 {
            return Err(PgError::Config("several hosts are not supported".into()));
        }
        let mode = options
            .sslmode
            .as_deref()
            .map_or(Ok(SslMode::Prefer), SslMode::parse)?;
        let tls = TlsSettings::new(mode, options.sslrootcert.as_deref().map(Path::new))?;
        inner.ssl_mode(match mode {
            SslMode::Disable => ClientSslMode::Disable,
            SslMode::Prefer => ClientSslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => ClientSslMode::Require,
        });
        Ok(ConnConfig { inner, tls })
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

    /// The server's endpoint.
    pub fn endpoint(&self) -> Endpoint {
        let port = self.inner.get_ports().first().copied().unwrap_or(5432);
        match &self.inner.get_hosts()[0] {
            Host::Tcp(host) => Endpoint::Tcp(host.clone(), port),
            Host::Unix(dir) => Endpoint::Unix(dir.clone(), port),
        }
    }

    /// The tokio-postgres configuration, for ordinary connections (its `sslmode` is
    /// `require` for `verify-ca` and `verify-full`; [`connect`] does the checking).
    pub fn client_config(&self) -> &Config {
        &self.inner
    }

    /// The TLS settings.
    pub fn tls(&self) -> &TlsSettings {
        &self.tls
    }

    /// Whether connections to the endpoint try TLS: not with `sslmode=disable`, and never over
    /// a Unix socket (as with libpq).
    pub(crate) fn tries_tls(&self) -> bool {
        self.tls.mode() != SslMode::Disable && matches!(self.endpoint(), Endpoint::Tcp(..))
    }
}

/// libpq's TLS options as found in a connection string.
#[derive(Debug, Default)]
struct TlsOptions {
    sslmode: Option<String>,
    sslrootcert: Option<String>,
}

impl TlsOptions {
    /// Records `key = value` if it is a TLS option; returns whether it was.
    fn take(&mut self, key: &str, value: String) -> bool {
        match key {
            "sslmode" => self.sslmode = Some(value),
            "sslrootcert" => self.sslrootcert = Some(value),
            _ => return false,
        }
        true
    }
}

/// Splits the TLS options off a connection string: the string without them, and their values.
fn take_tls_options(text: &str) -> PgResult<(String, TlsOptions)> {
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        take_from_url(text)
    } else {
        take_from_key_values(text)
    }
}

fn take_from_url(url: &str) -> PgResult<(String, TlsOptions)> {
    let mut options = TlsOptions::default();
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), options));
    };
    let decode = |text: &str| {
        percent_decode_str(text)
            .decode_utf8()
            .map(Cow::into_owned)
            .map_err(|_| PgError::Config(format!("invalid percent-encoding in {text:?}")))
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if !options.take(&decode(key)?, decode(value)?) {
            kept.push(pair);
        }
    }
    if kept.is_empty() {
        Ok((base.to_owned(), options))
    } else {
        Ok((format!("{base}?{}", kept.join("&")), options))
    }
}

/// libpq's `key = value` syntax: values bare or in single quotes, backslash escaping.
fn take_from_key_values(text: &str) -> PgResult<(String, TlsOptions)> {
    let mut options = TlsOptions::default();
    let mut kept = String::new();
    let skip_space = |pos: usize| {
        text[pos..]
            .find(|c: char| !c.is_whitespace())
            .map_or(text.len(), |n| pos + n)
    };
    let mut pos = skip_space(0);
    while pos < text.len() {
        let key_end = text[pos..]
            .find(|c: char| c == '=' || c.is_whitespace())
            .map_or(text.len(), |n| pos + n);
        let key = &text[pos..key_end];
        let equals = skip_space(key_end);
        if !text[equals..].starts_with('=') {
            return Err(PgError::Config(format!("missing \"=\" after {key:?}")));
        }
        let (value, end) = key_value(text, skip_space(equals + 1))?;
        if !options.take(key, value) {
            kept.push_str(&text[pos..end]);
            kept.push(' ');
        }
        pos = skip_space(end);
    }
    Ok((kept, options))
}

/// The value starting at `start`, unescaped, and where it ends.
fn key_value(text: &str, start: usize) -> PgResult<(String, usize)> {
    let mut value = String::new();
    let mut chars = text[start..].char_indices();
    let quoted = text[start..].starts_with('\'');
    if quoted {
        chars.next();
    }
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, escaped)) => value.push(escaped),
                None if quoted => break,
                None => return Ok((value, text.len())),
            },
            '\'' if quoted => return Ok((value, start + i + 1)),
            c if !quoted && c.is_whitespace() => return Ok((value, start + i)),
            c => value.push(c),
        }
    }
    if quoted {
        return Err(PgError::Config(
            "unterminated quoted string in the connection string".into(),
        ));
    }
    Ok((value, text.len()))
}

/// Opens an ordinary connection with [`SESSION_SETTINGS`] applied; the connection task runs on
/// the current tokio runtime and ends when the client is dropped. TLS as configured; with
/// `sslmode=prefer`, a session refused over TLS is tried again without, as libpq does.
pub async fn connect(config: &ConnConfig) -> PgResult<Client> {
    let client = open(config).await.map_err(|cause| PgError::Connect {
        endpoint: config.endpoint(),
        cause: Box::new(cause),
    })?;
    client.batch_execute(&session_settings_sql()).await?;
    Ok(client)
}

async fn open(config: &ConnConfig) -> PgResult<Client> {
    let Some(tls) = config.tls.client().filter(|_| config.tries_tls()) else {
        return open_plain(config).await;
    };
    let connector = RustlsConnector {
        inner: MakeRustlsConnect::new(ClientConfig::clone(tls)),
        started: Arc::new(AtomicBool::new(false)),
    };
    let started = connector.started.clone();
    match config.inner.connect(connector).await {
        Ok((client, connection)) => {
            run(connection);
            Ok(client)
        }
        Err(e) => {
            let e = PgError::from(e);
            if config.tls.mode() == SslMode::Prefer
                && started.load(Ordering::SeqCst)
                && worth_retrying_without_tls(&e)
            {
                tracing::debug!(error = %e, "session over TLS failed; trying without TLS (sslmode=prefer)");
                return open_plain(config).await;
            }
            Err(e)
        }
    }
}

async fn open_plain(config: &ConnConfig) -> PgResult<Client> {
    let mut plain = config.inner.clone();
    plain.ssl_mode(ClientSslMode::Disable);
    let (client, connection) = plain.connect(NoTls).await?;
    run(connection);
    Ok(client)
}

/// Runs a connection's task until its client is dropped.
fn run<T>(connection: Connection<Socket, T>)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %PgError::from(e), "postgres connection ended");
        }
    });
}

/// tokio-postgres-rustls's connector, noting whether a handshake began (the server agreed to
/// TLS) and telling TLS failures ([`TlsFailure`]) from I/O errors.
struct RustlsConnector {
    inner: MakeRustlsConnect,
    started: Arc<AtomicBool>,
}

/// The TLS connector of [`MakeRustlsConnect`].
type InnerConnect = <MakeRustlsConnect as MakeTlsConnect<Socket>>::TlsConnect;
/// The TLS stream of [`MakeRustlsConnect`].
type InnerStream = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream;
/// Errors handed to tokio-postgres.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl MakeTlsConnect<Socket> for RustlsConnector {
    type Stream = InnerStream;
    type TlsConnect = RustlsConnect;
    type Error = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, Self::Error> {
        Ok(RustlsConnect {
            inner: MakeTlsConnect::<Socket>::make_tls_connect(&mut self.inner, domain)?,
            started: self.started.clone(),
        })
    }
}

/// One handshake of a [`RustlsConnector`].
struct RustlsConnect {
    inner: InnerConnect,
    started: Arc<AtomicBool>,
}

impl TlsConnect<Socket> for RustlsConnect {
    type Stream = InnerStream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<InnerStream, BoxError>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        self.started.store(true, Ordering::SeqCst);
        let handshake = self.inner.connect(stream);
        Box::pin(async move {
            handshake.await.map_err(|e| -> BoxError {
                match tls_failure(&e) {
                    Some(message) => Box::new(TlsFailure(message)),
                    None => Box::new(e),
                }
            })
        })
    }
}

/// Statements applying [`SESSION_SETTINGS`]. `set_config` reads a value as the configuration
/// file does, so a list (`pg_catalog, public`) stays a list; a quoted `SET` value would be one
/// schema name.
pub fn session_settings_sql() -> String {
    SESSION_SETTINGS
        .iter()
        .map(|(k, v)| format!("SELECT pg_catalog.set_config('{k}', '{v}', false);"))
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
        assert!(ConnConfig::parse("not a connection string").is_err());
        assert!(
            ConnConfig::parse("host=a,b user=x").is_err(),
            "several hosts"
        );
        let refused = |text: &str| ConnConfig::parse(text).unwrap_err().to_string();
        assert_eq!(
            refused("postgres://x@h/db?sslmode=verify-full"),
            "invalid connection settings: sslmode=verify-full needs sslrootcert, the file of the CA certificates to trust"
        );
        assert_eq!(
            refused("host=h user=x sslmode=allow"),
            "invalid connection settings: sslmode=allow is not supported: use prefer or disable"
        );
        assert_eq!(
            refused("host=h user=x sslmode=sometimes"),
            "invalid connection settings: invalid sslmode \"sometimes\""
        );
        assert!(
            refused("host=h user=x sslmode=require sslrootcert=/no/such/file")
                .starts_with("invalid connection settings: sslrootcert /no/such/file: "),
        );
        assert!(refused("host=h user=x sslmode=require sslrootcert=system").contains("system"));
        assert!(refused("host=h user=x sslrootcert='/a").contains("unterminated"));
    }

    #[test]
    fn ssl_modes_are_parsed_from_urls_and_key_value_strings() {
        let dir = tempfile::tempdir().unwrap();
        let ca = syncline_testkit::TestCa::new(dir.path(), "a CA");
        let root = ca.cert().to_str().unwrap();
        let default = ConnConfig::parse("postgres://x@h/db").unwrap();
        assert_eq!(
            (default.tls().mode(), default.tls().root_cert()),
            (SslMode::Prefer, None)
        );
        let url = ConnConfig::parse(&format!(
            "postgresql://x@h/db?application_name=app&sslmode=verify-full&sslrootcert={}&connect_timeout=3",
            root.replace(' ', "%20")
        ))
        .unwrap();
        assert_eq!(url.tls().mode(), SslMode::VerifyFull);
        assert_eq!(url.tls().root_cert(), Some(ca.cert()));
        assert_eq!(url.client_config().get_application_name(), Some("app"));
        assert_eq!(
            url.client_config().get_connect_timeout(),
            Some(&std::time::Duration::from_secs(3))
        );
        assert_eq!(url.client_config().get_ssl_mode(), ClientSslMode::Require);
        let quoted = root.replace('\'', "\\'");
        let kv = ConnConfig::parse(&format!(
            "host=h user = 'x y' sslrootcert = '{quoted}' sslmode=verify-ca dbname=d\\ b"
        ))
        .unwrap();
        assert_eq!(
            (
                kv.tls().mode(),
                kv.tls().root_cert(),
                kv.user(),
                kv.dbname()
            ),
            (SslMode::VerifyCa, Some(ca.cert()), "x y", "d b")
        );
        for (text, mode, client_mode) in [
            (
                "host=h user=x sslmode=disable",
                SslMode::Disable,
                ClientSslMode::Disable,
            ),
            (
                "host=h user=x sslmode=prefer",
                SslMode::Prefer,
                ClientSslMode::Prefer,
            ),
            (
                "host=h user=x sslmode=require",
                SslMode::Require,
                ClientSslMode::Require,
            ),
        ] {
            let config = ConnConfig::parse(text).unwrap();
            assert_eq!(config.tls().mode(), mode, "{text}");
            assert_eq!(config.client_config().get_ssl_mode(), client_mode, "{text}");
        }
    }
}

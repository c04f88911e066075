//! Errors from talking to Postgres, and what kind of failure each one is.

use std::error::Error as _;

use crate::endpoint::Endpoint;

/// An error from Postgres or from the connection to it.
///
/// Errors Postgres reports are [`PgError::Server`] whichever client met them (our own wire
/// client or tokio-postgres), so their message and SQLSTATE are never lost. [`PgError::kind`]
/// sorts them for callers that answer for them (e.g. with an HTTP status).
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The server answered with an ErrorResponse.
    #[error("{message} (SQLSTATE {code}){}{}",
        detail.as_deref().map(|d| format!("; detail: {d}")).unwrap_or_default(),
        hint.as_deref().map(|h| format!("; hint: {h}")).unwrap_or_default())]
    Server {
        /// SQLSTATE code, e.g. `57P01`.
        code: String,
        /// Primary message.
        message: String,
        /// Detail, when the server gave one.
        detail: Option<String>,
        /// Hint, when the server gave one.
        hint: Option<String>,
    },
    /// Connecting to the server at `endpoint`, or starting a session there, failed.
    #[error("could not connect to {endpoint}: {}", connect_cause(cause))]
    Connect {
        /// Where the connection went.
        endpoint: Endpoint,
        /// Why it failed.
        cause: Box<PgError>,
    },
    /// The socket failed or closed.
    #[error("connection to postgres failed: {0}")]
    Io(#[from] std::io::Error),
    /// The server ended the session without an error, as it does when it shuts down.
    #[error("the server ended the session: {0}")]
    Closed(String),
    /// TLS was refused by the server, or the handshake or the certificate check failed.
    #[error("TLS: {0}")]
    Tls(String),
    /// The server sent something this client does not understand.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// An error of the tokio-postgres client other than one the server reported.
    #[error("{}", with_sources(.0))]
    Client(tokio_postgres::Error),
    /// The connection settings are unusable.
    #[error("invalid connection settings: {0}")]
    Config(String),
    /// A transaction the replication stream delivered stayed invisible to new snapshots: its
    /// session waits for something before it shows the commit, most likely a synchronous
    /// standby's confirmation.
    #[error("transaction {xid}, delivered by the replication stream, was still not visible to new snapshots after {seconds} s (does its commit wait for a synchronous standby, see synchronous_standby_names?)")]
    Invisible {
        /// The transaction.
        xid: u32,
        /// How long the snapshot waited.
        seconds: u64,
    },
}

/// What kind of failure a [`PgError`] is, for callers that answer for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The database cannot be reached or cannot serve now: the connection failed or broke,
    /// the server is shutting down or starting up (class 08, `57P0x`), it is out of resources
    /// (class 53), or TLS could not be set up. Worth retrying later (HTTP 503).
    Unavailable,
    /// The server refused the credentials or the connection (class 28).
    Authentication,
    /// The role lacks a privilege (`42501`).
    Permission,
    /// A named database, schema, table, column, type or function does not exist (`3D000`,
    /// `3F000`, `42P01`, `42703`, `42704`, `42883`).
    UndefinedObject,
    /// The request's data or SQL is at fault: a data exception (class 22) or a syntax or other
    /// class-42 error. The message is for the requester (HTTP 400).
    InvalidRequest,
    /// Anything else: a server-side failure or a bug on our side.
    Other,
}

impl ErrorKind {
    /// The kind of a server error with SQLSTATE `code`.
    pub fn of_sqlstate(code: &str) -> ErrorKind {
        match code {
            "42501" => ErrorKind::Permission,
            "3D000" | "3F000" | "42P01" | "42703" | "42704" | "42883" => ErrorKind::UndefinedObject,
            _ if code.starts_with("08") || code.starts_with("57P") || code.starts_with("53") => {
                ErrorKind::Unavailable
            }
            _ if code.starts_with("28") => ErrorKind::Authentication,
            _ if code.starts_with("22") || code.starts_with("42") => ErrorKind::InvalidRequest,
            _ => ErrorKind::Other,
        }
    }
}

impl PgError {
    /// Whether reconnecting may help: the connection dropped or could not be made, the server
    /// ended the session or is shutting down or starting up, or the slot is still held by a
    /// walsender that is going away.
    pub fn is_transient(&self) -> bool {
        match self {
            PgError::Io(_) | PgError::Closed(_) => true,
            PgError::Server { code, .. } => {
                code.starts_with("08")
                    || code.starts_with("57P")
                    || code == "55006"
                    || code == "53300"
            }
            PgError::Connect { cause, .. } => cause.is_transient(),
            PgError::Client(e) => {
                e.is_closed() || e.source().is_some_and(|s| s.is::<std::io::Error>())
            }
            PgError::Tls(_)
            | PgError::Protocol(_)
            | PgError::Config(_)
            | PgError::Invisible { .. } => false,
        }
    }

    /// What kind of failure this is. A failed connection is of the kind of its cause: a
    /// refused connection is [`ErrorKind::Unavailable`], a database that does not exist
    /// [`ErrorKind::UndefinedObject`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            PgError::Server { code, .. } => ErrorKind::of_sqlstate(code),
            PgError::Connect { cause, .. } => cause.kind(),
            PgError::Io(_) | PgError::Closed(_) | PgError::Tls(_) | PgError::Invisible { .. } => {
                ErrorKind::Unavailable
            }
            PgError::Client(_) if self.is_transient() => ErrorKind::Unavailable,
            PgError::Client(_) | PgError::Protocol(_) | PgError::Config(_) => ErrorKind::Other,
        }
    }

    /// The SQLSTATE code of an error the server reported (also through a failed connection).
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            PgError::Server { code, .. } => Some(code),
            PgError::Connect { cause, .. } => cause.sqlstate(),
            _ => None,
        }
    }

    /// The SQLSTATE code of an error the server reported; the same as [`PgError::sqlstate`].
    pub fn code(&self) -> Option<&str> {
        self.sqlstate()
    }

    /// The error the server reported, when there is one: its primary message.
    pub fn server_message(&self) -> Option<&str> {
        match self {
            PgError::Server { message, .. } => Some(message),
            PgError::Connect { cause, .. } => cause.server_message(),
            _ => None,
        }
    }
}

impl From<tokio_postgres::Error> for PgError {
    /// Errors the server reported become [`PgError::Server`], with every field kept.
    fn from(e: tokio_postgres::Error) -> PgError {
        match e.as_db_error() {
            Some(db) => PgError::Server {
                code: db.code().code().to_owned(),
                message: db.message().to_owned(),
                detail: db.detail().map(str::to_owned),
                hint: db.hint().map(str::to_owned),
            },
            None => match e.source().and_then(|s| s.downcast_ref::<TlsFailure>()) {
                Some(tls) => PgError::Tls(tls.0.clone()),
                None => PgError::Client(e),
            },
        }
    }
}

/// A TLS failure (handshake or certificate) met inside tokio-postgres's connect, told apart
/// from I/O errors there so that it is not taken for a transient one.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct TlsFailure(pub(crate) String);

/// `e` followed by each of its sources, as tokio-postgres's own Display leaves them out
/// ("db error", "error connecting to server").
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The cause of a failed connection, without repeating that it is about the connection.
fn connect_cause(cause: &PgError) -> String {
    match cause {
        PgError::Io(e) => e.to_string(),
        other => other.to_string(),
    }
}

/// Result of talking to Postgres.
pub type PgResult<T> = Result<T, PgError>;

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: &str) -> PgError {
        PgError::Server {
            code: code.into(),
            message: "m".into(),
            detail: None,
            hint: None,
        }
    }

    #[test]
    fn sqlstates_are_classified() {
        let cases = [
            ("08006", ErrorKind::Unavailable),
            ("08001", ErrorKind::Unavailable),
            ("57P01", ErrorKind::Unavailable),
            ("57P02", ErrorKind::Unavailable),
            ("57P03", ErrorKind::Unavailable),
            ("53300", ErrorKind::Unavailable),
            ("53100", ErrorKind::Unavailable),
            ("28P01", ErrorKind::Authentication),
            ("28000", ErrorKind::Authentication),
            ("42501", ErrorKind::Permission),
            ("42P01", ErrorKind::UndefinedObject),
            ("42703", ErrorKind::UndefinedObject),
            ("3D000", ErrorKind::UndefinedObject),
            ("42704", ErrorKind::UndefinedObject),
            ("42883", ErrorKind::UndefinedObject),
            ("3F000", ErrorKind::UndefinedObject),
            ("22P02", ErrorKind::InvalidRequest),
            ("22012", ErrorKind::InvalidRequest),
            ("2201X", ErrorKind::InvalidRequest),
            ("42601", ErrorKind::InvalidRequest),
            ("42804", ErrorKind::InvalidRequest),
            ("XX000", ErrorKind::Other),
            ("40001", ErrorKind::Other),
            ("57014", ErrorKind::Other),
            ("55006", ErrorKind::Other),
        ];
        for (code, kind) in cases {
            assert_eq!(server(code).kind(), kind, "{code}");
            assert_eq!(server(code).sqlstate(), Some(code));
        }
    }

    #[test]
    fn connection_failures_take_the_kind_of_their_cause() {
        let refused = PgError::Connect {
            endpoint: Endpoint::Tcp("db".into(), 5433),
            cause: Box::new(PgError::Io(std::io::ErrorKind::ConnectionRefused.into())),
        };
        assert_eq!(refused.kind(), ErrorKind::Unavailable);
        assert!(refused.is_transient());
        let no_db = PgError::Connect {
            endpoint: Endpoint::Tcp("db".into(), 5433),
            cause: Box::new(server("3D000")),
        };
        assert_eq!(no_db.kind(), ErrorKind::UndefinedObject);
        assert_eq!(no_db.sqlstate(), Some("3D000"));
        assert!(!no_db.is_transient());
        let shutting_down = PgError::Connect {
            endpoint: Endpoint::Tcp("db".into(), 5433),
            cause: Box::new(server("57P03")),
        };
        assert!(shutting_down.is_transient());
        assert_eq!(PgError::Closed("x".into()).kind(), ErrorKind::Unavailable);
        assert!(PgError::Closed("x".into()).is_transient());
        assert!(!PgError::Tls("x".into()).is_transient());
        assert_eq!(PgError::Protocol("x".into()).kind(), ErrorKind::Other);
    }

    #[test]
    fn display_says_what_postgres_said_and_where() {
        let e = PgError::Server {
            code: "42501".into(),
            message: "permission denied for table secret".into(),
            detail: Some("d".into()),
            hint: Some("h".into()),
        };
        assert_eq!(
            e.to_string(),
            "permission denied for table secret (SQLSTATE 42501); detail: d; hint: h"
        );
        let e = PgError::Connect {
            endpoint: Endpoint::Tcp("127.0.0.1".into(), 5999),
            cause: Box::new(PgError::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "Connection refused",
            ))),
        };
        assert_eq!(
            e.to_string(),
            "could not connect to 127.0.0.1:5999: Connection refused"
        );
        let e = PgError::Connect {
            endpoint: Endpoint::Unix("/run/pg".into(), 5432),
            cause: Box::new(server("3D000")),
        };
        assert_eq!(
            e.to_string(),
            "could not connect to /run/pg/.s.PGSQL.5432: m (SQLSTATE 3D000)"
        );
        assert_eq!(Endpoint::Tcp("::1".into(), 5432).to_string(), "[::1]:5432");
    }
}

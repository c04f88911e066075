//! Errors from talking to Postgres.

/// An error from Postgres or from the connection to it.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The server answered with an ErrorResponse.
    #[error("postgres error {code}: {message}{}", detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Server {
        /// SQLSTATE code, e.g. `57P01`.
        code: String,
        /// Primary message.
        message: String,
        /// Detail, when the server gave one.
        detail: Option<String>,
    },
    /// The socket failed or closed.
    #[error("connection to postgres failed: {0}")]
    Io(#[from] std::io::Error),
    /// The server sent something this client does not understand.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// An error from the tokio-postgres client (queries, COPY).
    #[error(transparent)]
    Client(#[from] tokio_postgres::Error),
    /// The connection settings are unusable.
    #[error("invalid connection settings: {0}")]
    Config(String),
}

impl PgError {
    /// Whether reconnecting may help: the connection dropped, the backend was terminated or
    /// shut down, or the slot is still held by a walsender that is going away.
    pub fn is_transient(&self) -> bool {
        match self {
            PgError::Io(_) => true,
            PgError::Server { code, .. } => {
                code.starts_with("08")
                    || code.starts_with("57P")
                    || code == "55006"
                    || code == "53300"
            }
            PgError::Client(e) => {
                e.is_closed()
                    || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
            }
            PgError::Protocol(_) | PgError::Config(_) => false,
        }
    }

    /// The SQLSTATE code of a server error.
    pub fn code(&self) -> Option<&str> {
        match self {
            PgError::Server { code, .. } => Some(code),
            PgError::Client(e) => e.code().map(|c| c.code()),
            _ => None,
        }
    }
}

/// Result of talking to Postgres.
pub type PgResult<T> = Result<T, PgError>;

//! Errors of parsing and checking a where clause, and of evaluating it on a row.

use thiserror::Error;

/// Why a where clause was rejected, worded as Electric words it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{message}")]
pub struct WhereError {
    /// The complete message a client receives, e.g. `At location 17: syntax error at or near "x"`.
    pub message: String,
    /// The location and the message without it, for [`WhereError::shifted`].
    located: Option<(i32, String)>,
    /// The request parameter the message belongs under.
    key: ErrorKey,
}

/// The request parameter a [`WhereError`] is reported under (Electric's `errors` object key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKey {
    /// `where`: the clause itself (syntax, types, subquery shape, DNF limits).
    Where,
    /// `table`: a table a subquery reads does not exist.
    Table,
    /// `columns`: a subquery selects columns its table does not have (or none).
    Columns,
}

impl ErrorKey {
    /// The key as Electric spells it: `"where"`, `"table"` or `"columns"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKey::Where => "where",
            ErrorKey::Table => "table",
            ErrorKey::Columns => "columns",
        }
    }
}

impl WhereError {
    /// A semantic error at a 0-based byte offset within the where text.
    pub(crate) fn at(location: i32, message: impl Into<String>) -> WhereError {
        let location = location.max(0);
        let detail = message.into();
        WhereError {
            message: format!("At location {location}: {detail}"),
            located: Some((location, detail)),
            key: ErrorKey::Where,
        }
    }

    /// An error not tied to a position.
    pub(crate) fn new(message: impl Into<String>) -> WhereError {
        WhereError {
            message: message.into(),
            located: None,
            key: ErrorKey::Where,
        }
    }

    /// An error reported under `key` rather than `where`.
    pub(crate) fn under(key: ErrorKey, message: impl Into<String>) -> WhereError {
        WhereError {
            message: message.into(),
            located: None,
            key,
        }
    }

    /// The request parameter the error belongs under: `where` for everything but a subquery's
    /// unknown table (`table`) and its unknown or missing columns (`columns`).
    pub fn key(&self) -> ErrorKey {
        self.key
    }

    /// The same error with its location moved `by` bytes back: for text that was checked
    /// behind a longer prefix than the where clause's.
    pub(crate) fn shifted(self, by: i32) -> WhereError {
        match self.located {
            Some((location, detail)) => WhereError {
                key: self.key,
                ..WhereError::at(location - by, detail)
            },
            None => self,
        }
    }
}

/// Why evaluating a checked expression on a row failed (Postgres would raise an error too).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EvalError {
    /// A column value or constant is not valid input for its type.
    #[error("invalid input syntax for type {type_name}: \"{text}\"")]
    InvalidInput {
        /// The target type.
        type_name: String,
        /// The offending text (truncated).
        text: String,
    },
    /// Arithmetic left the range of the result type.
    #[error("{0} out of range")]
    OutOfRange(&'static str),
    /// Division or modulo by zero.
    #[error("division by zero")]
    DivisionByZero,
    /// Any other runtime error Postgres would raise, with its message.
    #[error("{0}")]
    Other(String),
}

impl EvalError {
    /// An invalid-input error for `type_name`, keeping at most 64 bytes of the text.
    pub(crate) fn invalid(type_name: impl ToString, text: &[u8]) -> EvalError {
        let cut = &text[..text.len().min(64)];
        EvalError::InvalidInput {
            type_name: type_name.to_string(),
            text: String::from_utf8_lossy(cut).into_owned(),
        }
    }
}

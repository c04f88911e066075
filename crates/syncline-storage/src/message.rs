//! What the engine stores: messages addressed by offset.

/// The operation a message describes (Electric's vocabulary, one definition in core);
/// compaction needs it, readers never look at it.
pub use syncline_core::wire::Operation;
use syncline_core::LogOffset;

/// One message to append: its offset, the row key, the operation, and the exact JSON bytes a
/// client receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// Position in the shape log; strictly increasing across appends.
    pub offset: LogOffset,
    /// The row's key (at most [`crate::KEY_BYTES_MAX`] bytes).
    pub key: &'a [u8],
    /// What happened to the row.
    pub op: Operation,
    /// Pre-serialized JSON, stored and served byte for byte.
    pub json: &'a [u8],
}

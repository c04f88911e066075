//! Decoding pgoutput (protocol version 1) messages.
//!
//! Column values are kept as slices of the received buffer (`Bytes`), never copied.

use bytes::{Buf, Bytes};
use syncline_core::{Lsn, ReplicaIdentity, Tuple, Value};

use crate::error::{PgError, PgResult};

/// One column of a pgoutput Relation message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationColumn {
    /// Column name.
    pub name: String,
    /// Type OID.
    pub type_oid: u32,
    /// Type modifier.
    pub type_mod: i32,
    /// Part of the replica identity key.
    pub is_key: bool,
}

/// A pgoutput Relation message: the current shape of a table, sent before its first change
/// in a session and again after every change to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationMessage {
    /// Table OID.
    pub oid: u32,
    /// Schema name.
    pub schema: String,
    /// Table name.
    pub name: String,
    /// Replica identity.
    pub replica_identity: ReplicaIdentity,
    /// Columns in attribute order.
    pub columns: Vec<RelationColumn>,
}

/// The old row carried by an UPDATE or DELETE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OldRow {
    /// Key columns only (`K`), other columns NULL.
    Key(Tuple),
    /// The whole old row (`O`, replica identity FULL).
    Full(Tuple),
}

/// One decoded pgoutput message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgOutput {
    /// Start of a transaction.
    Begin {
        /// LSN of the commit record: the transaction's position in the log.
        final_lsn: Lsn,
        /// Commit time, microseconds since 2000-01-01.
        commit_time: i64,
        /// 32-bit transaction id.
        xid: u32,
    },
    /// End of a transaction.
    Commit {
        /// LSN of the commit record.
        commit_lsn: Lsn,
        /// End of the commit record: the position to acknowledge once this transaction is durable.
        end_lsn: Lsn,
        /// Commit time, microseconds since 2000-01-01.
        commit_time: i64,
    },
    /// The transaction came from another replication origin.
    Origin {
        /// Commit LSN on the origin server.
        commit_lsn: Lsn,
        /// Origin name.
        name: String,
    },
    /// A table's description.
    Relation(RelationMessage),
    /// A user-defined type's name, sent before a Relation that uses it.
    Type {
        /// Type OID.
        oid: u32,
        /// Schema name.
        schema: String,
        /// Type name.
        name: String,
    },
    /// A row was inserted.
    Insert {
        /// Table OID.
        relation: u32,
        /// The new row.
        new: Tuple,
    },
    /// A row was updated.
    Update {
        /// Table OID.
        relation: u32,
        /// The old key (when it changed) or old row (replica identity FULL).
        old: Option<OldRow>,
        /// The new row; TOASTed columns the update did not touch are [`Value::UnchangedToast`].
        new: Tuple,
    },
    /// A row was deleted.
    Delete {
        /// Table OID.
        relation: u32,
        /// The old key or old row.
        old: OldRow,
    },
    /// Tables were truncated.
    Truncate {
        /// Table OIDs.
        relations: Vec<u32>,
        /// `TRUNCATE … CASCADE`.
        cascade: bool,
        /// `TRUNCATE … RESTART IDENTITY`.
        restart_identity: bool,
    },
    /// A logical decoding message (`pg_logical_emit_message`).
    Message {
        /// Emitted inside a transaction.
        transactional: bool,
        /// LSN of the message.
        lsn: Lsn,
        /// Prefix.
        prefix: String,
        /// Content.
        content: Bytes,
    },
}

/// Decodes one pgoutput message (the payload of an XLogData).
pub fn decode(mut buf: Bytes) -> PgResult<PgOutput> {
    let r = &mut buf;
    let msg = match u8(r)? {
        b'B' => PgOutput::Begin {
            final_lsn: Lsn(u64(r)?),
            commit_time: i64(r)?,
            xid: u32(r)?,
        },
        b'C' => {
            u8(r)?;
            PgOutput::Commit {
                commit_lsn: Lsn(u64(r)?),
                end_lsn: Lsn(u64(r)?),
                commit_time: i64(r)?,
            }
        }
        b'O' => PgOutput::Origin {
            commit_lsn: Lsn(u64(r)?),
            name: cstr(r)?,
        },
        b'R' => PgOutput::Relation(relation(r)?),
        b'Y' => PgOutput::Type {
            oid: u32(r)?,
            schema: cstr(r)?,
            name: cstr(r)?,
        },
        b'I' => {
            let relation = u32(r)?;
            expect(r, b'N')?;
            PgOutput::Insert {
                relation,
                new: tuple(r)?,
            }
        }
        b'U' => {
            let relation = u32(r)?;
            let old = match u8(r)? {
                b'K' => Some(OldRow::Key(tuple(r)?)),
                b'O' => Some(OldRow::Full(tuple(r)?)),
                b'N' => None,
                other => {
                    return Err(malformed(format!(
                        "update tuple marker {:?}",
                        other as char
                    )))
                }
            };
            if old.is_some() {
                expect(r, b'N')?;
            }
            PgOutput::Update {
                relation,
                old,
                new: tuple(r)?,
            }
        }
        b'D' => {
            let relation = u32(r)?;
            let old = match u8(r)? {
                b'K' => OldRow::Key(tuple(r)?),
                b'O' => OldRow::Full(tuple(r)?),
                other => {
                    return Err(malformed(format!(
                        "delete tuple marker {:?}",
                        other as char
                    )))
                }
            };
            PgOutput::Delete { relation, old }
        }
        b'T' => {
            let n = u32(r)?;
            let options = u8(r)?;
            let relations = (0..n).map(|_| u32(r)).collect::<PgResult<_>>()?;
            PgOutput::Truncate {
                relations,
                cascade: options & 1 != 0,
                restart_identity: options & 2 != 0,
            }
        }
        b'M' => {
            let transactional = u8(r)? != 0;
            let lsn = Lsn(u64(r)?);
            let prefix = cstr(r)?;
            let len = u32(r)? as usize;
            PgOutput::Message {
                transactional,
                lsn,
                prefix,
                content: take(r, len)?,
            }
        }
        other => {
            return Err(malformed(format!(
                "unknown message type {:?}",
                other as char
            )))
        }
    };
    if !buf.is_empty() {
        return Err(malformed(format!("{} trailing bytes", buf.len())));
    }
    Ok(msg)
}

fn relation(r: &mut Bytes) -> PgResult<RelationMessage> {
    let oid = u32(r)?;
    let schema = cstr(r)?;
    let name = cstr(r)?;
    let ident = u8(r)?;
    let replica_identity = ReplicaIdentity::from_char(ident)
        .ok_or_else(|| malformed(format!("replica identity {:?}", ident as char)))?;
    let n = i16(r)?;
    let mut columns = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    for _ in 0..n {
        let flags = u8(r)?;
        columns.push(RelationColumn {
            name: cstr(r)?,
            type_oid: u32(r)?,
            type_mod: i32(r)?,
            is_key: flags & 1 != 0,
        });
    }
    Ok(RelationMessage {
        oid,
        schema,
        name,
        replica_identity,
        columns,
    })
}

fn tuple(r: &mut Bytes) -> PgResult<Tuple> {
    let n = i16(r)?;
    let mut values = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    for _ in 0..n {
        values.push(match u8(r)? {
            b'n' => Value::Null,
            b'u' => Value::UnchangedToast,
            b't' => {
                let len = u32(r)? as usize;
                Value::Text(take(r, len)?)
            }
            b'b' => {
                return Err(malformed(
                    "binary tuple data (this client asks for text)".into(),
                ))
            }
            other => return Err(malformed(format!("tuple column kind {:?}", other as char))),
        });
    }
    Ok(Tuple(values))
}

fn malformed(what: String) -> PgError {
    PgError::Protocol(format!("malformed pgoutput message: {what}"))
}

fn need(r: &Bytes, n: usize) -> PgResult<()> {
    if r.len() < n {
        return Err(malformed(format!("needs {n} more bytes, has {}", r.len())));
    }
    Ok(())
}

fn expect(r: &mut Bytes, marker: u8) -> PgResult<()> {
    match u8(r)? {
        m if m == marker => Ok(()),
        m => Err(malformed(format!(
            "expected {:?}, got {:?}",
            marker as char, m as char
        ))),
    }
}

fn u8(r: &mut Bytes) -> PgResult<u8> {
    need(r, 1)?;
    Ok(r.get_u8())
}

fn i16(r: &mut Bytes) -> PgResult<i16> {
    need(r, 2)?;
    Ok(r.get_i16())
}

fn u32(r: &mut Bytes) -> PgResult<u32> {
    need(r, 4)?;
    Ok(r.get_u32())
}

fn i32(r: &mut Bytes) -> PgResult<i32> {
    need(r, 4)?;
    Ok(r.get_i32())
}

fn u64(r: &mut Bytes) -> PgResult<u64> {
    need(r, 8)?;
    Ok(r.get_u64())
}

fn i64(r: &mut Bytes) -> PgResult<i64> {
    need(r, 8)?;
    Ok(r.get_i64())
}

fn take(r: &mut Bytes, n: usize) -> PgResult<Bytes> {
    need(r, n)?;
    Ok(r.split_to(n))
}

fn cstr(r: &mut Bytes) -> PgResult<String> {
    let end = r
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| malformed("unterminated string".into()))?;
    let s = String::from_utf8(r[..end].to_vec())
        .map_err(|_| malformed("string is not UTF-8".into()))?;
    r.advance(end + 1);
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    #[test]
    fn decodes_insert_with_null_and_toast_markers() {
        let mut b = bytes::BytesMut::new();
        b.put_u8(b'I');
        b.put_u32(16384);
        b.put_u8(b'N');
        b.put_i16(3);
        b.put_u8(b't');
        b.put_u32(2);
        b.put_slice(b"42");
        b.put_u8(b'n');
        b.put_u8(b'u');
        let msg = decode(b.freeze()).unwrap();
        assert_eq!(
            msg,
            PgOutput::Insert {
                relation: 16384,
                new: Tuple(vec![
                    Value::Text(Bytes::from_static(b"42")),
                    Value::Null,
                    Value::UnchangedToast
                ])
            }
        );
    }

    #[test]
    fn rejects_truncated_and_trailing_input() {
        let full = {
            let mut b = bytes::BytesMut::new();
            b.put_u8(b'B');
            b.put_u64(1);
            b.put_i64(2);
            b.put_u32(3);
            b.freeze()
        };
        assert!(decode(full.clone()).is_ok());
        for cut in 0..full.len() {
            assert!(decode(full.slice(..cut)).is_err(), "cut at {cut}");
        }
        let mut longer = full.to_vec();
        longer.push(0);
        assert!(decode(Bytes::from(longer)).is_err());
    }
}

//! Parsing the `COPY … (FORMAT binary)` stream into rows of raw field values.
//!
//! Rows are parsed straight out of each received chunk; only a row split across chunks is
//! copied (into `pending`) to be completed by the next chunk.

use std::ops::Range;

use crate::error::{PgError, PgResult};

const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";
/// Signature, flags word, header-extension length word.
const HEADER_FIXED_BYTES: usize = 19;

/// One row: the bytes it lies in and the range of each field (`None` for NULL).
pub struct RowRef<'a> {
    data: &'a [u8],
    fields: &'a [Option<Range<usize>>],
}

impl<'a> RowRef<'a> {
    /// Number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether the row has no fields.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The binary value of field `i`, `None` for NULL.
    pub fn get(&self, i: usize) -> Option<&'a [u8]> {
        self.fields[i].clone().map(|r| &self.data[r])
    }
}

/// Incremental parser of a binary COPY stream.
#[derive(Default)]
pub struct CopyParser {
    pending: Vec<u8>,
    fields: Vec<Option<Range<usize>>>,
    header_done: bool,
    trailer_seen: bool,
}

impl CopyParser {
    /// A parser expecting the stream's header first.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next chunk of the stream; calls `on_row` for every row it completes.
    pub fn feed(
        &mut self,
        chunk: &[u8],
        on_row: &mut impl FnMut(RowRef<'_>) -> PgResult<()>,
    ) -> PgResult<()> {
        if self.pending.is_empty() {
            let used = self.parse(chunk, on_row)?;
            self.pending.extend_from_slice(&chunk[used..]);
        } else {
            let mut pending = std::mem::take(&mut self.pending);
            pending.extend_from_slice(chunk);
            let used = self.parse(&pending, on_row)?;
            pending.drain(..used);
            self.pending = pending;
        }
        Ok(())
    }

    /// Checks that the stream ended where a binary COPY ends: after its trailer.
    pub fn finish(&self) -> PgResult<()> {
        if !self.trailer_seen || !self.pending.is_empty() {
            return Err(PgError::Protocol("binary COPY stream ended early".into()));
        }
        Ok(())
    }

    /// Parses complete rows from `buf`; returns how many bytes were used.
    fn parse(
        &mut self,
        buf: &[u8],
        on_row: &mut impl FnMut(RowRef<'_>) -> PgResult<()>,
    ) -> PgResult<usize> {
        let mut pos = 0;
        if !self.header_done {
            if buf.len() < HEADER_FIXED_BYTES {
                return Ok(0);
            }
            if &buf[..11] != SIGNATURE {
                return Err(PgError::Protocol("not a binary COPY stream".into()));
            }
            let ext = u32::from_be_bytes(buf[15..19].try_into().expect("4 bytes")) as usize;
            if buf.len() < HEADER_FIXED_BYTES + ext {
                return Ok(0);
            }
            pos = HEADER_FIXED_BYTES + ext;
            self.header_done = true;
        }
        while pos + 2 <= buf.len() {
            if self.trailer_seen {
                return Err(PgError::Protocol("data after binary COPY trailer".into()));
            }
            let count = i16::from_be_bytes([buf[pos], buf[pos + 1]]);
            if count == -1 {
                self.trailer_seen = true;
                pos += 2;
                continue;
            }
            let Some(end) = self.split_row(buf, pos + 2, count)? else {
                break;
            };
            on_row(RowRef {
                data: buf,
                fields: &self.fields,
            })?;
            pos = end;
        }
        Ok(pos)
    }

    /// Finds the fields of the row whose first field starts at `start`; `None` if incomplete.
    fn split_row(&mut self, buf: &[u8], start: usize, count: i16) -> PgResult<Option<usize>> {
        if count < 0 {
            return Err(PgError::Protocol(format!("invalid field count {count}")));
        }
        self.fields.clear();
        let mut pos = start;
        for _ in 0..count {
            let Some(len) = buf.get(pos..pos + 4) else {
                return Ok(None);
            };
            let len = i32::from_be_bytes(len.try_into().expect("4 bytes"));
            pos += 4;
            let Ok(len) = usize::try_from(len) else {
                self.fields.push(None);
                continue;
            };
            let end = pos + len;
            if end > buf.len() {
                return Ok(None);
            }
            self.fields.push(Some(pos..end));
            pos = end;
        }
        Ok(Some(pos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream() -> Vec<u8> {
        let mut s = SIGNATURE.to_vec();
        s.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
        for (a, b) in [(&b"x"[..], Some(&b"hello"[..])), (&b"yz"[..], None)] {
            s.extend_from_slice(&2i16.to_be_bytes());
            s.extend_from_slice(&i32::try_from(a.len()).unwrap().to_be_bytes());
            s.extend_from_slice(a);
            match b {
                Some(b) => {
                    s.extend_from_slice(&i32::try_from(b.len()).unwrap().to_be_bytes());
                    s.extend_from_slice(b);
                }
                None => s.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        s.extend_from_slice(&(-1i16).to_be_bytes());
        s
    }

    #[test]
    fn parses_across_every_split_point() {
        let s = stream();
        for cut in 0..=s.len() {
            let mut rows = Vec::new();
            let mut p = CopyParser::new();
            let mut collect = |r: RowRef<'_>| {
                rows.push((r.get(0).map(<[u8]>::to_vec), r.get(1).map(<[u8]>::to_vec)));
                Ok(())
            };
            p.feed(&s[..cut], &mut collect).unwrap();
            p.feed(&s[cut..], &mut collect).unwrap();
            p.finish().unwrap();
            assert_eq!(
                rows,
                vec![
                    (Some(b"x".to_vec()), Some(b"hello".to_vec())),
                    (Some(b"yz".to_vec()), None)
                ],
                "cut {cut}"
            );
        }
    }

    #[test]
    fn detects_early_end() {
        let s = stream();
        let mut p = CopyParser::new();
        p.feed(&s[..s.len() - 3], &mut |_| Ok(())).unwrap();
        assert!(p.finish().is_err());
    }
}

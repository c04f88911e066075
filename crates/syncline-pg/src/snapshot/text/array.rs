//! Arrays in Postgres's text form: `{1,2}`, `{{a,"b c"},{NULL,""}}`, `[0:1]={x,y}`.

use super::TextDecoder;
use crate::error::{PgError, PgResult};

/// Most dimensions Postgres allows (MAXDIM).
const DIMS_MAX: usize = 6;

/// Appends the text form of a binary array whose elements `elem` decodes.
pub fn write_array(out: &mut Vec<u8>, raw: &[u8], elem: &TextDecoder) -> PgResult<()> {
    let bad = |what: &str| PgError::Protocol(format!("malformed binary array: {what}"));
    let mut r = Reader { raw, pos: 0 };
    let ndim = r.i32().ok_or_else(|| bad("header"))?;
    r.i32().ok_or_else(|| bad("header"))?; // has-null flag
    r.i32().ok_or_else(|| bad("header"))?; // element type oid
    let ndim = usize::try_from(ndim)
        .ok()
        .filter(|n| *n <= DIMS_MAX)
        .ok_or_else(|| bad("dimension count"))?;
    let mut dims = [(0i64, 0i64); DIMS_MAX];
    for dim in dims.iter_mut().take(ndim) {
        let len = r.i32().ok_or_else(|| bad("dimensions"))?;
        let lower = r.i32().ok_or_else(|| bad("dimensions"))?;
        *dim = (i64::from(len), i64::from(lower));
    }
    let dims = &dims[..ndim];
    if dims.is_empty() || dims.iter().any(|(len, _)| *len == 0) {
        out.extend_from_slice(b"{}");
        return Ok(());
    }
    if dims.iter().any(|(_, lower)| *lower != 1) {
        for (len, lower) in dims {
            out.push(b'[');
            super::numbers::write_int(out, *lower);
            out.push(b':');
            super::numbers::write_int(out, lower + len - 1);
            out.push(b']');
        }
        out.push(b'=');
    }
    let mut scratch = Vec::new();
    write_dim(out, &mut r, dims, elem, &mut scratch)?;
    if r.pos != raw.len() {
        return Err(bad("trailing bytes"));
    }
    Ok(())
}

fn write_dim(
    out: &mut Vec<u8>,
    r: &mut Reader,
    dims: &[(i64, i64)],
    elem: &TextDecoder,
    scratch: &mut Vec<u8>,
) -> PgResult<()> {
    out.push(b'{');
    for i in 0..dims[0].0 {
        if i > 0 {
            out.push(b',');
        }
        if dims.len() > 1 {
            write_dim(out, r, &dims[1..], elem, scratch)?;
            continue;
        }
        let len = r
            .i32()
            .ok_or_else(|| PgError::Protocol("malformed binary array: element length".into()))?;
        let Ok(len) = usize::try_from(len) else {
            out.extend_from_slice(b"NULL");
            continue;
        };
        let value = r
            .take(len)
            .ok_or_else(|| PgError::Protocol("malformed binary array: element".into()))?;
        scratch.clear();
        match elem {
            // Inside arrays Postgres uses bool's output function (`t`/`f`), not the `::text`
            // cast (`true`/`false`) that scalar columns get.
            TextDecoder::Bool => scratch.push(if value.first() == Some(&1) {
                b't'
            } else {
                b'f'
            }),
            _ => elem.write_text(value, scratch)?,
        }
        write_element(out, scratch);
    }
    out.push(b'}');
    Ok(())
}

/// Quotes an element when Postgres would: empty, `NULL` in any case, or containing a
/// delimiter, brace, quote, backslash or white space.
fn write_element(out: &mut Vec<u8>, text: &[u8]) {
    let needs_quotes = text.is_empty()
        || text.eq_ignore_ascii_case(b"NULL")
        || text.iter().any(|b| {
            matches!(
                b,
                b'{' | b'}' | b',' | b'"' | b'\\' | b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c
            )
        });
    if !needs_quotes {
        out.extend_from_slice(text);
        return;
    }
    out.push(b'"');
    for &b in text {
        if b == b'"' || b == b'\\' {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.push(b'"');
}

struct Reader<'a> {
    raw: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let slice = self.raw.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(slice)
    }

    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
}

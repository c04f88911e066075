//! Arrays in Postgres's text form (`{1,2,NULL}`, `{{1,2},{3,4}}`, `{"a b","c\"d"}`).

use std::cmp::Ordering;

use super::{Datum, Nullable};
use crate::error::EvalError;
use crate::types::Type;

/// Dimensions deeper than this are rejected (Postgres's `MAXDIM`).
const DIMENSIONS_MAX: usize = 6;

/// An array value: dimension lengths (lower bounds are always 1) and elements in row-major
/// order. An empty array has no dimensions.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Array {
    /// Length of each dimension.
    pub(crate) dims: Vec<usize>,
    /// Elements, row-major.
    pub(crate) elems: Vec<Nullable>,
}

impl Array {
    /// A one-dimensional array of `elems` (empty when there are none).
    pub(crate) fn from_elems(elems: Vec<Nullable>) -> Array {
        let dims = if elems.is_empty() {
            Vec::new()
        } else {
            vec![elems.len()]
        };
        Array { dims, elems }
    }

    /// Parses array text whose elements are of type `elem`.
    pub(crate) fn parse(elem: &Type, text: &str) -> Result<Array, EvalError> {
        let invalid = || {
            EvalError::Other(format!(
                "malformed array literal: \"{}\"",
                text.chars().take(64).collect::<String>()
            ))
        };
        let mut parser = Parser {
            bytes: text.as_bytes(),
            at: 0,
        };
        parser.skip_space();
        let mut dims: Vec<Option<usize>> = Vec::new();
        let mut raw: Vec<Option<String>> = Vec::new();
        parser
            .parse_level(0, &mut dims, &mut raw)
            .ok_or_else(invalid)?;
        parser.skip_space();
        if parser.at != parser.bytes.len() {
            return Err(invalid());
        }
        let mut elems = Vec::with_capacity(raw.len());
        for item in raw {
            elems.push(match item {
                Some(s) => Some(Datum::parse(elem, &s)?),
                None => None,
            });
        }
        let dims: Vec<usize> = if elems.is_empty() {
            Vec::new()
        } else {
            dims.into_iter().map(|d| d.unwrap_or(0)).collect()
        };
        Ok(Array { dims, elems })
    }

    /// Postgres text output.
    pub(crate) fn to_text(&self, elem: &Type) -> String {
        if self.elems.is_empty() {
            return "{}".into();
        }
        let mut out = String::new();
        self.write_level(elem, 0, &mut 0, &mut out);
        out
    }

    fn write_level(&self, elem: &Type, depth: usize, next: &mut usize, out: &mut String) {
        out.push('{');
        for i in 0..self.dims[depth] {
            if i > 0 {
                out.push(',');
            }
            if depth + 1 < self.dims.len() {
                self.write_level(elem, depth + 1, next, out);
                continue;
            }
            match &self.elems[*next] {
                None => out.push_str("NULL"),
                Some(d) => push_quoted(&d.to_text(elem), out),
            }
            *next += 1;
        }
        out.push('}');
    }

    /// Whether the elements fill the dimensions exactly (none for an empty array).
    fn is_consistent(&self) -> bool {
        if self.dims.is_empty() {
            self.elems.is_empty()
        } else {
            self.dims.iter().product::<usize>() == self.elems.len()
        }
    }

    /// `array[i][j]...` as Postgres's `array_get_element` fetches it: NULL unless there is one
    /// index per dimension, each within it (lower bounds are 1).
    pub(crate) fn element(&self, index: &[i64]) -> Nullable {
        debug_assert!(self.is_consistent(), "{self:?}");
        if index.len() != self.dims.len() || index.is_empty() {
            return None;
        }
        let mut offset = 0usize;
        for (&len, &i) in self.dims.iter().zip(index) {
            let at = usize::try_from(i.checked_sub(1)?)
                .ok()
                .filter(|at| *at < len)?;
            offset = offset * len + at;
        }
        self.elems.get(offset).cloned().flatten()
    }

    /// `array[a:b]...` as Postgres's `array_get_slice` takes it: each bound (`None` when left
    /// out) is clipped to its dimension, dimensions without a subscript are taken whole, an
    /// empty range or more subscripts than dimensions give an empty array. The result's lower
    /// bounds are 1.
    pub(crate) fn slice(&self, bounds: &[(Option<i64>, Option<i64>)]) -> Array {
        debug_assert!(self.is_consistent(), "{self:?}");
        if self.dims.len() < bounds.len() || self.dims.is_empty() {
            return Array::default();
        }
        let mut ranges = Vec::with_capacity(self.dims.len());
        for (d, &len) in self.dims.iter().enumerate() {
            let (lower, upper) = bounds.get(d).copied().unwrap_or((None, None));
            let last = i64::try_from(len).unwrap_or(i64::MAX);
            let lower = lower.map_or(1, |l| l.max(1));
            let upper = upper.map_or(last, |u| u.min(last));
            if lower > upper {
                return Array::default();
            }
            let (Ok(from), Ok(to)) = (usize::try_from(lower - 1), usize::try_from(upper)) else {
                return Array::default();
            };
            ranges.push(from..to);
        }
        let mut elems = Vec::new();
        self.collect_range(&ranges, 0, 0, &mut elems);
        Array {
            dims: ranges.iter().map(ExactSizeIterator::len).collect(),
            elems,
        }
    }

    /// Appends, in row-major order, the elements within `ranges` from dimension `depth` on,
    /// `offset` being the flat index of the block being walked.
    fn collect_range(
        &self,
        ranges: &[std::ops::Range<usize>],
        depth: usize,
        offset: usize,
        out: &mut Vec<Nullable>,
    ) {
        for i in ranges[depth].clone() {
            let at = offset * self.dims[depth] + i;
            if depth + 1 == ranges.len() {
                out.push(self.elems[at].clone());
            } else {
                self.collect_range(ranges, depth + 1, at, out);
            }
        }
    }

    /// Postgres's `array_cmp`: elements in order (NULL above values), then element count,
    /// then dimensions.
    pub(crate) fn compare(&self, other: &Array) -> Ordering {
        for (a, b) in self.elems.iter().zip(&other.elems) {
            let ord = match (a, b) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), None) => Ordering::Less,
                (Some(a), Some(b)) => a.compare(b),
            };
            if ord != Ordering::Equal {
                return ord;
            }
        }
        self.elems
            .len()
            .cmp(&other.elems.len())
            .then(self.dims.len().cmp(&other.dims.len()))
            .then_with(|| self.dims.cmp(&other.dims))
    }

    /// `self @> other`: every non-NULL element of `other` equals some element of `self`; a NULL
    /// in `other` makes it false.
    pub(crate) fn contains(&self, other: &Array) -> bool {
        other.elems.iter().all(|b| match b {
            None => false,
            Some(b) => self
                .elems
                .iter()
                .flatten()
                .any(|a| a.compare(b) == Ordering::Equal),
        })
    }

    /// `self && other`: some non-NULL element in both.
    pub(crate) fn overlaps(&self, other: &Array) -> bool {
        self.elems.iter().flatten().any(|a| {
            other
                .elems
                .iter()
                .flatten()
                .any(|b| a.compare(b) == Ordering::Equal)
        })
    }
}

fn push_quoted(text: &str, out: &mut String) {
    let needs_quotes = text.is_empty()
        || text.eq_ignore_ascii_case("NULL")
        || text
            .bytes()
            .any(|b| matches!(b, b'{' | b'}' | b',' | b'"' | b'\\') || b.is_ascii_whitespace());
    if !needs_quotes {
        out.push_str(text);
        return;
    }
    out.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn skip_space(&mut self) {
        while self
            .bytes
            .get(self.at)
            .is_some_and(|b| b.is_ascii_whitespace())
        {
            self.at += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.bytes.get(self.at) == Some(&b);
        self.at += hit as usize;
        hit
    }

    /// Parses `{...}` at `depth`, recording the dimension length and collecting elements.
    fn parse_level(
        &mut self,
        depth: usize,
        dims: &mut Vec<Option<usize>>,
        out: &mut Vec<Option<String>>,
    ) -> Option<()> {
        if depth >= DIMENSIONS_MAX || !self.eat(b'{') {
            return None;
        }
        if dims.len() <= depth {
            dims.push(None);
        }
        self.skip_space();
        let mut count = 0;
        let mut saw_scalar = false;
        if !self.eat(b'}') {
            loop {
                self.skip_space();
                if self.bytes.get(self.at) == Some(&b'{') {
                    if saw_scalar {
                        return None;
                    }
                    self.parse_level(depth + 1, dims, out)?;
                } else {
                    if dims.len() > depth + 1 {
                        return None;
                    }
                    saw_scalar = true;
                    out.push(self.parse_element()?);
                }
                count += 1;
                self.skip_space();
                if self.eat(b'}') {
                    break;
                }
                if !self.eat(b',') {
                    return None;
                }
            }
        } else if depth > 0 {
            return None;
        }
        match dims[depth] {
            Some(n) if n != count => None,
            _ => {
                dims[depth] = Some(count);
                Some(())
            }
        }
    }

    fn parse_element(&mut self) -> Option<Option<String>> {
        let mut text = Vec::new();
        if self.eat(b'"') {
            loop {
                match *self.bytes.get(self.at)? {
                    b'"' => break,
                    b'\\' => {
                        self.at += 1;
                        text.push(*self.bytes.get(self.at)?);
                    }
                    b => text.push(b),
                }
                self.at += 1;
            }
            self.at += 1;
            return Some(Some(String::from_utf8(text).ok()?));
        }
        let mut trailing_space = 0;
        while let Some(&b) = self.bytes.get(self.at) {
            match b {
                b',' | b'}' => break,
                b'{' | b'"' => return None,
                b'\\' => {
                    self.at += 1;
                    text.push(*self.bytes.get(self.at)?);
                    trailing_space = 0;
                }
                b if b.is_ascii_whitespace() => {
                    text.push(b);
                    trailing_space += 1;
                }
                b => {
                    text.push(b);
                    trailing_space = 0;
                }
            }
            self.at += 1;
        }
        text.truncate(text.len() - trailing_space);
        if text.is_empty() {
            return None;
        }
        let text = String::from_utf8(text).ok()?;
        Some(if text.eq_ignore_ascii_case("NULL") {
            None
        } else {
            Some(text)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscripts_as_postgres() {
        let a = Array::parse(&Type::Int4, "{{1,2},{3,4}}").unwrap();
        let text = |a: Array| a.to_text(&Type::Int4);
        assert_eq!(a.element(&[2, 1]), Some(Datum::Int(3)));
        assert_eq!(a.element(&[2]), None);
        assert_eq!(a.element(&[3, 1]), None);
        assert_eq!(a.element(&[0, 1]), None);
        assert_eq!(text(a.slice(&[(Some(1), Some(1))])), "{{1,2}}");
        assert_eq!(text(a.slice(&[(None, None), (Some(2), None)])), "{{2},{4}}");
        assert_eq!(text(a.slice(&[(Some(2), Some(1))])), "{}");
        assert_eq!(
            text(a.slice(&[(Some(-5), Some(9)), (Some(1), Some(9))])),
            "{{1,2},{3,4}}"
        );
        assert_eq!(text(a.slice(&[(None, None); 3])), "{}");
        assert_eq!(text(Array::default().slice(&[(None, None)])), "{}");
    }

    #[test]
    fn round_trips_postgres_text() {
        for text in ["{}", "{1,2,NULL}", "{{1,2},{3,4}}"] {
            assert_eq!(
                Array::parse(&Type::Int4, text)
                    .unwrap()
                    .to_text(&Type::Int4),
                text
            );
        }
        let a = Array::parse(&Type::Text, r#"{"a b","c\"d",NULL,"NULL", x }"#).unwrap();
        assert_eq!(a.to_text(&Type::Text), r#"{"a b","c\"d",NULL,"NULL",x}"#);
        for bad in ["{1,2", "{{1},2}", "{1,{2}}", "{{1,2},{3}}", "1", "{,}"] {
            assert!(Array::parse(&Type::Int4, bad).is_err(), "{bad}");
        }
    }
}

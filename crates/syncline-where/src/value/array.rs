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
pub struct Array {
    /// Length of each dimension.
    pub dims: Vec<usize>,
    /// Elements, row-major.
    pub elems: Vec<Nullable>,
}

impl Array {
    /// A one-dimensional array of `elems` (empty when there are none).
    pub fn from_elems(elems: Vec<Nullable>) -> Array {
        let dims = if elems.is_empty() {
            Vec::new()
        } else {
            vec![elems.len()]
        };
        Array { dims, elems }
    }

    /// Parses array text whose elements are of type `elem`.
    pub fn parse(elem: &Type, text: &str) -> Result<Array, EvalError> {
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
    pub fn to_text(&self, elem: &Type) -> String {
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

    /// Postgres's `array_cmp`: elements in order (NULL above values), then element count,
    /// then dimensions.
    pub fn compare(&self, other: &Array) -> Ordering {
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
    pub fn contains(&self, other: &Array) -> bool {
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
    pub fn overlaps(&self, other: &Array) -> bool {
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

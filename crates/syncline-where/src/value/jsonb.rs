//! `jsonb`: parsing, Postgres's text output, equality, containment (`@>`), key existence (`?`)
//! and field access (`->`, `->>`).

use crate::error::EvalError;
use std::cmp::Ordering;

use super::numeric::Numeric;

/// Nesting deeper than this is rejected (Postgres limits depth by stack; we by a constant).
const DEPTH_MAX: usize = 512;

/// A jsonb value. Object keys are unique and sorted as Postgres stores them (shorter first,
/// then bytewise); numbers are exact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Jsonb {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number, kept as numeric.
    Number(Numeric),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Jsonb>),
    /// An object.
    Object(Vec<(String, Jsonb)>),
}

impl Jsonb {
    /// Parses JSON text; duplicate keys keep the last value, as in Postgres. A `\u0000`
    /// escape is Postgres's own error (jsonb text cannot hold NUL).
    pub(crate) fn parse(text: &str) -> Result<Jsonb, EvalError> {
        let mut p = Parser {
            b: text.as_bytes(),
            at: 0,
            nul_escape: false,
        };
        let value = p.value(0);
        p.space();
        match value {
            Some(v) if p.at == p.b.len() => Ok(v),
            _ if p.nul_escape => Err(EvalError::Other(
                "unsupported Unicode escape sequence".into(),
            )),
            _ => Err(EvalError::invalid("jsonb", text.as_bytes())),
        }
    }

    /// Postgres's jsonb text output (`{"a": 1, "b": [1, 2]}`).
    pub(crate) fn to_text(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Jsonb::Null => out.push_str("null"),
            Jsonb::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Jsonb::Number(n) => out.push_str(&n.to_text()),
            Jsonb::String(s) => write_string(s, out),
            Jsonb::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Jsonb::Object(pairs) => {
                out.push('{');
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_string(k, out);
                    out.push_str(": ");
                    v.write(out);
                }
                out.push('}');
            }
        }
    }

    /// Structural order used for `=` (numbers compare as numeric).
    pub(crate) fn compare(&self, other: &Jsonb) -> Ordering {
        match (self, other) {
            (Jsonb::Number(a), Jsonb::Number(b)) => a.cmp(b),
            (Jsonb::String(a), Jsonb::String(b)) => a.as_bytes().cmp(b.as_bytes()),
            (Jsonb::Bool(a), Jsonb::Bool(b)) => a.cmp(b),
            (Jsonb::Null, Jsonb::Null) => Ordering::Equal,
            (Jsonb::Array(a), Jsonb::Array(b)) => a.len().cmp(&b.len()).then_with(|| {
                a.iter()
                    .zip(b)
                    .map(|(x, y)| x.compare(y))
                    .find(|o| o.is_ne())
                    .unwrap_or(Ordering::Equal)
            }),
            (Jsonb::Object(a), Jsonb::Object(b)) => a.len().cmp(&b.len()).then_with(|| {
                a.iter()
                    .zip(b)
                    .map(|((ka, va), (kb, vb))| key_order(ka, kb).then_with(|| va.compare(vb)))
                    .find(|o| o.is_ne())
                    .unwrap_or(Ordering::Equal)
            }),
            _ => self.kind_rank().cmp(&other.kind_rank()),
        }
    }

    fn kind_rank(&self) -> u8 {
        match self {
            Jsonb::Null => 0,
            Jsonb::String(_) => 1,
            Jsonb::Number(_) => 2,
            Jsonb::Bool(_) => 3,
            Jsonb::Array(_) => 4,
            Jsonb::Object(_) => 5,
        }
    }

    /// `self @> other`.
    pub(crate) fn contains(&self, other: &Jsonb) -> bool {
        match (self, other) {
            (Jsonb::Array(items), scalar)
                if !matches!(scalar, Jsonb::Array(_) | Jsonb::Object(_)) =>
            {
                items.iter().any(|item| item.compare(scalar).is_eq())
            }
            _ => self.contains_nested(other),
        }
    }

    fn contains_nested(&self, other: &Jsonb) -> bool {
        match (self, other) {
            (Jsonb::Object(a), Jsonb::Object(b)) => {
                b.iter().all(
                    |(k, vb)| match a.binary_search_by(|(ka, _)| key_order(ka, k)) {
                        Ok(i) => a[i].1.contains_nested(vb),
                        Err(_) => false,
                    },
                )
            }
            (Jsonb::Array(a), Jsonb::Array(b)) => b.iter().all(|vb| match vb {
                Jsonb::Array(_) | Jsonb::Object(_) => a.iter().any(|va| va.contains_nested(vb)),
                scalar => a.iter().any(|va| va.compare(scalar).is_eq()),
            }),
            (Jsonb::Array(_) | Jsonb::Object(_), _) | (_, Jsonb::Array(_) | Jsonb::Object(_)) => {
                false
            }
            (a, b) => a.compare(b).is_eq(),
        }
    }

    /// `self ? key`: an object key, a string element of an array, or an equal string scalar.
    pub(crate) fn has_key(&self, key: &str) -> bool {
        match self {
            Jsonb::Object(pairs) => pairs.binary_search_by(|(k, _)| key_order(k, key)).is_ok(),
            Jsonb::Array(items) => items
                .iter()
                .any(|i| matches!(i, Jsonb::String(s) if s == key)),
            Jsonb::String(s) => s == key,
            _ => false,
        }
    }

    /// `self -> key` on an object.
    pub(crate) fn field(&self, key: &str) -> Option<&Jsonb> {
        match self {
            Jsonb::Object(pairs) => pairs
                .binary_search_by(|(k, _)| key_order(k, key))
                .ok()
                .map(|i| &pairs[i].1),
            _ => None,
        }
    }

    /// `self -> index` on an array (negative counts from the end); a top-level scalar acts as a
    /// one-element array, as Postgres stores it.
    pub(crate) fn element(&self, index: i64) -> Option<&Jsonb> {
        let items = match self {
            Jsonb::Array(items) => items.as_slice(),
            Jsonb::Object(_) => return None,
            scalar => std::slice::from_ref(scalar),
        };
        let i = if index < 0 {
            i64::try_from(items.len()).ok()? + index
        } else {
            index
        };
        usize::try_from(i).ok().and_then(|i| items.get(i))
    }

    /// What `->>` returns for this value: strings unquoted, JSON null as SQL NULL.
    pub(crate) fn as_text(&self) -> Option<String> {
        match self {
            Jsonb::Null => None,
            Jsonb::String(s) => Some(s.clone()),
            other => Some(other.to_text()),
        }
    }
}

fn key_order(a: &str, b: &str) -> Ordering {
    a.len()
        .cmp(&b.len())
        .then_with(|| a.as_bytes().cmp(b.as_bytes()))
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

struct Parser<'a> {
    b: &'a [u8],
    at: usize,
    /// Parsing stopped at a `\u0000` escape.
    nul_escape: bool,
}

impl Parser<'_> {
    fn space(&mut self) {
        while self
            .b
            .get(self.at)
            .is_some_and(|&c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.space();
        let hit = self.b.get(self.at) == Some(&c);
        self.at += hit as usize;
        hit
    }

    fn literal(&mut self, word: &str) -> bool {
        let hit = self.b[self.at..].starts_with(word.as_bytes());
        self.at += if hit { word.len() } else { 0 };
        hit
    }

    fn value(&mut self, depth: usize) -> Option<Jsonb> {
        if depth > DEPTH_MAX {
            return None;
        }
        self.space();
        match *self.b.get(self.at)? {
            b'{' => self.object(depth),
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                if !self.eat(b']') {
                    loop {
                        items.push(self.value(depth + 1)?);
                        if self.eat(b']') {
                            break;
                        }
                        if !self.eat(b',') {
                            return None;
                        }
                    }
                }
                Some(Jsonb::Array(items))
            }
            b'"' => self.string().map(Jsonb::String),
            b't' if self.literal("true") => Some(Jsonb::Bool(true)),
            b'f' if self.literal("false") => Some(Jsonb::Bool(false)),
            b'n' if self.literal("null") => Some(Jsonb::Null),
            _ => self.number(),
        }
    }

    fn object(&mut self, depth: usize) -> Option<Jsonb> {
        self.at += 1;
        let mut pairs: Vec<(String, Jsonb)> = Vec::new();
        if !self.eat(b'}') {
            loop {
                self.space();
                let key = self.string()?;
                if !self.eat(b':') {
                    return None;
                }
                let value = self.value(depth + 1)?;
                pairs.push((key, value));
                if self.eat(b'}') {
                    break;
                }
                if !self.eat(b',') {
                    return None;
                }
            }
        }
        pairs.reverse();
        pairs.sort_by(|a, b| key_order(&a.0, &b.0));
        pairs.dedup_by(|later, earlier| later.0 == earlier.0);
        Some(Jsonb::Object(pairs))
    }

    fn number(&mut self) -> Option<Jsonb> {
        let start = self.at;
        self.at += self.b[self.at..].starts_with(b"-") as usize;
        let int_start = self.at;
        self.digits();
        let int = &self.b[int_start..self.at];
        if int.is_empty() || (int.len() > 1 && int[0] == b'0') {
            return None;
        }
        if self.b.get(self.at) == Some(&b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return None;
            }
        }
        if matches!(self.b.get(self.at), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.b.get(self.at), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return None;
            }
        }
        let text = std::str::from_utf8(&self.b[start..self.at]).ok()?;
        Numeric::parse(text).map(Jsonb::Number)
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while self.b.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        self.at - start
    }

    fn string(&mut self) -> Option<String> {
        if self.b.get(self.at) != Some(&b'"') {
            return None;
        }
        self.at += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let c = *self.b.get(self.at)?;
            self.at += 1;
            match c {
                b'"' => return String::from_utf8(out).ok(),
                b'\\' => {
                    let e = *self.b.get(self.at)?;
                    self.at += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => return None,
                    };
                    out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
                }
                c if c < 0x20 => return None,
                c => out.push(c),
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let s = std::str::from_utf8(self.b.get(self.at..self.at + 4)?).ok()?;
        self.at += 4;
        u32::from_str_radix(s, 16).ok()
    }

    fn unicode_escape(&mut self) -> Option<char> {
        let hi = self.hex4()?;
        if (0xD800..0xDC00).contains(&hi) {
            if !self.b[self.at..].starts_with(b"\\u") {
                return None;
            }
            self.at += 2;
            let lo = self.hex4()?;
            if !(0xDC00..0xE000).contains(&lo) {
                return None;
            }
            return char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00));
        }
        if hi == 0 {
            self.nul_escape = true;
            return None;
        }
        char::from_u32(hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn j(s: &str) -> Jsonb {
        Jsonb::parse(s).unwrap()
    }

    #[test]
    fn prints_like_postgres() {
        assert_eq!(
            j(r#"{"bb":1,"a":[1,2.50,1e2],"a":true}"#).to_text(),
            r#"{"a": true, "bb": 1}"#
        );
        assert_eq!(j(r#"["x\ty",null]"#).to_text(), r#"["x\ty", null]"#);
    }

    #[test]
    fn contains_and_keys() {
        assert!(j(r#"{"a":1,"b":{"c":[1,2]}}"#).contains(&j(r#"{"b":{"c":[2]}}"#)));
        assert!(j("[1,2]").contains(&j("1")));
        assert!(!j("[[1,2]]").contains(&j("1")));
        assert!(j(r#"["a","b"]"#).has_key("b"));
        assert!(j("1.0").compare(&j("1")).is_eq());
    }
}

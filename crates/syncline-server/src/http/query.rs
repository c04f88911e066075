//! Raw request values: query strings decoded the way Plug decodes them, and the few value
//! shapes a JSON body can add.
//!
//! Plug turns `a=1` into a string, `a[k]=1` into a map entry and `a[]=1` into a list element;
//! a repeated key keeps its last value. Electric then casts those values with Ecto, which is
//! why a map where a string is expected is "is invalid" rather than silently used.

use std::collections::BTreeMap;

/// One decoded parameter value, before it is cast to what the field expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Raw {
    /// `a=…`, or a JSON string.
    Str(String),
    /// A JSON integer (query strings only carry strings).
    Int(i64),
    /// `a[k]=…`, or a JSON object with scalar values (converted to text as Elixir's
    /// `to_string` does).
    Map(BTreeMap<String, String>),
    /// `a[]=…`.
    List(Vec<String>),
    /// Anything no field accepts: deeper nesting, JSON booleans, floats, arrays.
    Other,
}

impl Raw {
    /// Ecto's default empty value: a string that is empty after trimming counts as absent.
    pub(crate) fn is_blank(&self) -> bool {
        matches!(self, Raw::Str(s) if s.trim().is_empty())
    }
}

/// Decodes a raw (still percent-encoded) query string.
pub(crate) fn decode(query: &str) -> BTreeMap<String, Raw> {
    let mut out: BTreeMap<String, Raw> = BTreeMap::new();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        let value = value.into_owned();
        match split_key(&key) {
            Key::Plain(name) => {
                out.insert(name.to_owned(), Raw::Str(value));
            }
            Key::ListItem(name) => match out.get_mut(name) {
                Some(Raw::List(items)) => items.push(value),
                _ => {
                    out.insert(name.to_owned(), Raw::List(vec![value]));
                }
            },
            Key::MapEntry(name, sub) => match out.get_mut(name) {
                Some(Raw::Map(entries)) => {
                    entries.insert(sub.to_owned(), value);
                }
                _ => {
                    out.insert(
                        name.to_owned(),
                        Raw::Map(BTreeMap::from([(sub.to_owned(), value)])),
                    );
                }
            },
            Key::Nested(name) => {
                out.insert(name.to_owned(), Raw::Other);
            }
        }
    }
    out
}

enum Key<'a> {
    Plain(&'a str),
    ListItem(&'a str),
    MapEntry(&'a str, &'a str),
    Nested(&'a str),
}

/// Splits `name[a][b]…` into its name and bracketed parts; a key that is not well formed is
/// taken literally.
fn split_key(key: &str) -> Key<'_> {
    let Some(open) = key.find('[').filter(|&i| i > 0) else {
        return Key::Plain(key);
    };
    let name = &key[..open];
    let mut parts = Vec::new();
    let mut rest = &key[open..];
    while let Some(inner) = rest.strip_prefix('[') {
        let Some(close) = inner.find(']') else {
            return Key::Plain(key);
        };
        parts.push(&inner[..close]);
        rest = &inner[close + 1..];
    }
    match (rest.is_empty(), parts.as_slice()) {
        (false, _) => Key::Plain(key),
        (true, [""]) => Key::ListItem(name),
        (true, [sub]) => Key::MapEntry(name, sub),
        (true, _) => Key::Nested(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn str(s: &str) -> Raw {
        Raw::Str(s.into())
    }

    #[test]
    fn decodes_like_plug() {
        let q = decode(
            "table=items&where=a%20%3D%20%241+AND+b&params%5B1%5D=x&params[2]=y%26z\
             &columns[]=a&columns[]=b&live&table=last&deep[a][b]=1&odd[=1&tail[a]x=2",
        );
        assert_eq!(q["table"], str("last"));
        assert_eq!(q["where"], str("a = $1 AND b"));
        assert_eq!(
            q["params"],
            Raw::Map(BTreeMap::from([
                ("1".into(), "x".into()),
                ("2".into(), "y&z".into())
            ]))
        );
        assert_eq!(q["columns"], Raw::List(vec!["a".into(), "b".into()]));
        assert_eq!(q["live"], str(""));
        assert_eq!(q["deep"], Raw::Other);
        assert_eq!(q["odd["], str("1"));
        assert_eq!(q["tail[a]x"], str("2"));
    }

    #[test]
    fn a_later_kind_replaces_an_earlier_one() {
        let q = decode("p=1&p[1]=a&l[x]=1&l[]=2");
        assert_eq!(q["p"], Raw::Map(BTreeMap::from([("1".into(), "a".into())])));
        assert_eq!(q["l"], Raw::List(vec!["2".into()]));
    }

    #[test]
    fn blank_is_empty_after_trimming() {
        assert!(str("").is_blank());
        assert!(str(" \t").is_blank());
        assert!(!str(" x ").is_blank());
        assert!(!Raw::List(vec![]).is_blank());
    }
}

//! `LIKE` / `ILIKE` matching as Postgres does it under the "C" collation: `%` matches any run
//! of characters, `_` one character, the escape character (default `\`) makes the next one
//! literal; ILIKE folds ASCII letters only.

use crate::error::EvalError;

#[derive(Clone, Copy, PartialEq)]
enum Token {
    Any,
    One,
    Lit(char),
}

/// Compiles a pattern; `escape` is the ESCAPE string (`None` for the default backslash).
fn tokens(pattern: &str, escape: Option<&str>, fold: bool) -> Result<Vec<Token>, EvalError> {
    let escape = match escape {
        None => Some('\\'),
        Some("") => None,
        Some(e) => {
            let mut chars = e.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Some(c),
                _ => return Err(EvalError::Other("invalid escape string".into())),
            }
        }
    };
    let mut out = Vec::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        let token = if Some(c) == escape {
            let next = chars.next().ok_or_else(|| {
                EvalError::Other("LIKE pattern must not end with escape character".into())
            })?;
            Token::Lit(fold_char(next, fold))
        } else if c == '%' {
            if out.last() == Some(&Token::Any) {
                continue;
            }
            Token::Any
        } else if c == '_' {
            Token::One
        } else {
            Token::Lit(fold_char(c, fold))
        };
        out.push(token);
    }
    Ok(out)
}

fn fold_char(c: char, fold: bool) -> char {
    if fold {
        c.to_ascii_lowercase()
    } else {
        c
    }
}

/// Whether `text` matches `pattern`.
pub fn like(
    text: &str,
    pattern: &str,
    escape: Option<&str>,
    insensitive: bool,
) -> Result<bool, EvalError> {
    let pattern = tokens(pattern, escape, insensitive)?;
    let text: Vec<char> = text.chars().map(|c| fold_char(c, insensitive)).collect();
    Ok(matches(&text, &pattern))
}

/// Wildcard matching with one backtrack point per `%` (linear in practice, O(n·m) at worst).
fn matches(text: &[char], pattern: &[Token]) -> bool {
    let (mut t, mut p) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(Token::Any) => {
                star = Some((p, t));
                p += 1;
            }
            Some(Token::One) => {
                t += 1;
                p += 1;
            }
            Some(Token::Lit(c)) if *c == text[t] => {
                t += 1;
                p += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|t| *t == Token::Any)
}

/// The literal prefix of a pattern (before its first wildcard) and whether the pattern is
/// exactly that prefix followed by a single `%`; used by the router.
pub fn literal_prefix(pattern: &str) -> Option<String> {
    let tokens = tokens(pattern, None, false).ok()?;
    let (last, body) = tokens.split_last()?;
    if *last != Token::Any {
        return None;
    }
    body.iter()
        .map(|t| {
            if let Token::Lit(c) = t {
                Some(*c)
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_like_postgres() {
        let cases = [
            ("abc", "a%", true),
            ("abc", "a_c", true),
            ("abc", "%b%", true),
            ("abc", "%d%", false),
            ("a%c", "a\\%c", true),
            ("abc", "a\\%c", false),
            ("", "%", true),
            ("aaa", "%a%a%a%", true),
            ("aa", "%a%a%a%", false),
            ("héllo", "h_llo", true),
        ];
        for (text, pattern, want) in cases {
            assert_eq!(
                like(text, pattern, None, false).unwrap(),
                want,
                "{text} LIKE {pattern}"
            );
        }
        assert!(like("ABC", "a%", None, true).unwrap());
        assert!(!like("É", "é", None, true).unwrap());
        assert!(like("a_c", "a#_c", Some("#"), false).unwrap());
        assert!(like("abc", "ab\\", None, false).is_err());
    }

    #[test]
    fn finds_literal_prefixes() {
        assert_eq!(literal_prefix("abc%").as_deref(), Some("abc"));
        assert_eq!(literal_prefix("a\\%b%").as_deref(), Some("a%b"));
        assert_eq!(literal_prefix("a_b%"), None);
        assert_eq!(literal_prefix("abc"), None);
    }
}

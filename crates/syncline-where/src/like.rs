//! `LIKE` / `ILIKE` matching as Postgres does it under the "C" collation: `%` matches any run
//! of characters, `_` one character, the escape character (default `\`) makes the next one
//! literal; ILIKE folds ASCII letters only.

use crate::error::EvalError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// A compiled LIKE / ILIKE pattern, kept with its source for rendering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    tokens: Vec<Token>,
    /// ILIKE.
    pub insensitive: bool,
    /// The pattern text.
    pub source: String,
    /// The ESCAPE string, if one was given.
    pub escape: Option<String>,
}

impl Pattern {
    /// Compiles a pattern; `escape` is the ESCAPE string (`None` for the default backslash).
    pub fn compile(
        pattern: &str,
        escape: Option<&str>,
        insensitive: bool,
    ) -> Result<Pattern, EvalError> {
        Ok(Pattern {
            tokens: tokens(pattern, escape, insensitive)?,
            insensitive,
            source: pattern.to_string(),
            escape: escape.map(str::to_string),
        })
    }

    /// Whether `text` matches: wildcard matching with one backtrack point per `%`, on the
    /// UTF-8 bytes without copying (linear in practice, O(n·m) at worst).
    pub fn matches(&self, text: &str) -> bool {
        let fold = |c: char| fold_char(c, self.insensitive);
        let char_at = |t: usize| text[t..].chars().next();
        let (mut t, mut p) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while let Some(c) = char_at(t) {
            match self.tokens.get(p) {
                Some(Token::Any) => {
                    star = Some((p, t));
                    p += 1;
                    continue;
                }
                Some(Token::One) => {
                    t += c.len_utf8();
                    p += 1;
                    continue;
                }
                Some(Token::Lit(l)) if *l == fold(c) => {
                    t += c.len_utf8();
                    p += 1;
                    continue;
                }
                _ => {}
            }
            match star {
                Some((sp, st)) => {
                    let skipped = char_at(st).map_or(1, char::len_utf8);
                    p = sp + 1;
                    t = st + skipped;
                    star = Some((sp, t));
                }
                None => return false,
            }
        }
        self.tokens[p..].iter().all(|t| *t == Token::Any)
    }

    /// The literal text before a single trailing `%`, when the pattern is exactly that
    /// (case-sensitive LIKE only); used by the router.
    pub fn literal_prefix(&self) -> Option<String> {
        if self.insensitive {
            return None;
        }
        let (last, body) = self.tokens.split_last()?;
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
}

/// Whether `text` matches `pattern`.
pub fn like(
    text: &str,
    pattern: &str,
    escape: Option<&str>,
    insensitive: bool,
) -> Result<bool, EvalError> {
    Ok(Pattern::compile(pattern, escape, insensitive)?.matches(text))
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
        let prefix = |p: &str| Pattern::compile(p, None, false).unwrap().literal_prefix();
        assert_eq!(prefix("abc%").as_deref(), Some("abc"));
        assert_eq!(prefix("a\\%b%").as_deref(), Some("a%b"));
        assert_eq!(prefix("a_b%"), None);
        assert_eq!(prefix("abc"), None);
    }
}

//! `LIKE` / `ILIKE` matching as Postgres does it under the "C" collation: `%` matches any run
//! of characters, `_` one character, the escape character (default `\`) makes the next one
//! literal; ILIKE folds ASCII letters only.
//!
//! Matching follows Postgres's `MatchText` step by step, because a pattern ending with its escape
//! character is an error only when matching reaches that end: `'xyz' LIKE 'ab\'` is false,
//! `'abc' LIKE 'ab\'` fails.

use crate::error::EvalError;

/// Postgres's message for a pattern ending with its escape character.
pub(crate) const DANGLING_ESCAPE: &str = "LIKE pattern must not end with escape character";
/// Postgres's message for an `ESCAPE` string of more than one character.
pub(crate) const INVALID_ESCAPE: &str = "invalid escape string";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// `%`.
    Any,
    /// `_`.
    One,
    /// A character that must match itself (folded for ILIKE).
    Lit(char),
    /// The escape character as the pattern's last character.
    DanglingEscape,
}

/// The escape character an `ESCAPE` string gives (`None` for the default backslash, `''` for
/// none), or Postgres's error for a longer string.
pub(crate) fn escape_char(escape: Option<&str>) -> Result<Option<char>, EvalError> {
    match escape {
        None => Ok(Some('\\')),
        Some("") => Ok(None),
        Some(e) => {
            let mut chars = e.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Ok(Some(c)),
                _ => Err(EvalError::Other(INVALID_ESCAPE.into())),
            }
        }
    }
}

/// Compiles a pattern; `escape` is the ESCAPE string (`None` for the default backslash).
fn tokens(pattern: &str, escape: Option<&str>, fold: bool) -> Result<Vec<Token>, EvalError> {
    let escape = escape_char(escape)?;
    let mut out = Vec::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        out.push(if Some(c) == escape {
            match chars.next() {
                Some(next) => Token::Lit(fold_char(next, fold)),
                None => Token::DanglingEscape,
            }
        } else if c == '%' {
            if out.last() == Some(&Token::Any) {
                continue;
            }
            Token::Any
        } else if c == '_' {
            Token::One
        } else {
            Token::Lit(fold_char(c, fold))
        });
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

/// What one `MatchText` call returns: `Abort` means no later start position can match either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    True,
    False,
    Abort,
}

/// How a run of the main matching loop ends.
enum Step {
    Done(Outcome),
    /// At a `%`: find a text position from `from` whose character is `first`, where the
    /// pattern from token `p` matches.
    Scan {
        from: usize,
        p: usize,
        first: char,
    },
}

/// A compiled LIKE / ILIKE pattern, kept with its source for rendering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pattern {
    tokens: Vec<Token>,
    /// ILIKE.
    pub(crate) insensitive: bool,
    /// The pattern text.
    pub(crate) source: String,
    /// The ESCAPE string, if one was given.
    pub(crate) escape: Option<String>,
}

impl Pattern {
    /// Compiles a pattern; `escape` is the ESCAPE string (`None` for the default backslash).
    pub(crate) fn compile(
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

    /// Whether the pattern ends with its escape character, which Postgres reports as an error
    /// whenever matching gets there.
    pub(crate) fn ends_with_escape(&self) -> bool {
        self.tokens.last() == Some(&Token::DanglingEscape)
    }

    /// Whether `text` matches, as Postgres's `MatchText` decides it (and fails when it reaches
    /// a dangling escape): the main loop runs until a `%`, which tries each later text position
    /// starting with the next literal; a failed try moves on, a match or an abort ends it all.
    /// Tries are kept on a stack rather than recursion, so no pattern can exhaust the stack.
    pub(crate) fn matches(&self, text: &str) -> Result<bool, EvalError> {
        let mut tries: Vec<(usize, usize, char)> = Vec::new();
        let (mut t, mut p) = (0, 0);
        loop {
            let mut outcome = match self.run(text, t, p)? {
                Step::Done(outcome) => outcome,
                Step::Scan { from, p: at, first } => match self.candidate(text, from, first) {
                    Some(start) => {
                        tries.push((start, at, first));
                        (t, p) = (start, at);
                        continue;
                    }
                    None => Outcome::Abort,
                },
            };
            loop {
                let Some(&(start, at, first)) = tries.last() else {
                    return Ok(outcome == Outcome::True);
                };
                if outcome != Outcome::False {
                    tries.pop();
                    continue;
                }
                let next = start + text[start..].chars().next().map_or(1, char::len_utf8);
                match self.candidate(text, next, first) {
                    Some(start) => {
                        if let Some(last) = tries.last_mut() {
                            *last = (start, at, first);
                        }
                        (t, p) = (start, at);
                        break;
                    }
                    None => {
                        tries.pop();
                        outcome = Outcome::Abort;
                    }
                }
            }
        }
    }

    /// The first text position from byte `from` whose character (folded for ILIKE) is `first`.
    fn candidate(&self, text: &str, from: usize, first: char) -> Option<usize> {
        text[from..]
            .char_indices()
            .find(|(_, c)| fold_char(*c, self.insensitive) == first)
            .map(|(i, _)| from + i)
    }

    /// The main loop of `MatchText` from text byte `t` and token `p`.
    fn run(&self, text: &str, mut t: usize, mut p: usize) -> Result<Step, EvalError> {
        let dangling = || EvalError::Other(DANGLING_ESCAPE.into());
        while let (Some(c), Some(token)) = (text[t..].chars().next(), self.tokens.get(p)) {
            match *token {
                Token::DanglingEscape => return Err(dangling()),
                Token::Lit(l) if l != fold_char(c, self.insensitive) => {
                    return Ok(Step::Done(Outcome::False))
                }
                Token::Lit(_) | Token::One => {
                    t += c.len_utf8();
                    p += 1;
                }
                Token::Any => {
                    p += 1;
                    while let Some(token) = self.tokens.get(p) {
                        match token {
                            Token::Any => p += 1,
                            Token::One => {
                                let Some(c) = text[t..].chars().next() else {
                                    return Ok(Step::Done(Outcome::Abort));
                                };
                                t += c.len_utf8();
                                p += 1;
                            }
                            _ => break,
                        }
                    }
                    return match self.tokens.get(p) {
                        None => Ok(Step::Done(Outcome::True)),
                        Some(Token::DanglingEscape) => Err(dangling()),
                        Some(Token::Lit(first)) => Ok(Step::Scan {
                            from: t,
                            p,
                            first: *first,
                        }),
                        Some(Token::Any | Token::One) => {
                            unreachable!("wildcards after % are skipped")
                        }
                    };
                }
            }
        }
        if t < text.len() {
            return Ok(Step::Done(Outcome::False));
        }
        let rest = self.tokens.get(p..).unwrap_or_default();
        Ok(Step::Done(if rest.iter().all(|t| *t == Token::Any) {
            Outcome::True
        } else {
            Outcome::Abort
        }))
    }

    /// The literal text before a single trailing `%`, when the pattern is exactly that
    /// (case-sensitive LIKE only); used by the router.
    pub(crate) fn literal_prefix(&self) -> Option<String> {
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
pub(crate) fn like(
    text: &str,
    pattern: &str,
    escape: Option<&str>,
    insensitive: bool,
) -> Result<bool, EvalError> {
    Pattern::compile(pattern, escape, insensitive)?.matches(text)
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
            ("abcbc", "%bc", true),
            ("abcb", "a%%_b", true),
            ("ab", "a__", false),
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
        assert_eq!(
            like("a", "a", Some("ab"), false).unwrap_err().to_string(),
            INVALID_ESCAPE
        );
    }

    /// A dangling escape fails only where Postgres's `MatchText` reaches it (each case checked
    /// against Postgres 15).
    #[test]
    fn dangling_escape_fails_only_when_reached() {
        let cases = [
            ("xyz", "ab\\", Ok(false)),
            ("abc", "ab\\", Err(())),
            ("ab", "ab\\", Ok(false)),
            ("%", "%\\", Err(())),
            ("x", "%\\", Err(())),
            ("x", "_\\", Ok(false)),
            ("", "\\", Ok(false)),
            ("a", "a%\\", Ok(false)),
            ("ab", "%b\\", Ok(false)),
            ("abc", "a%c\\", Ok(false)),
            ("abcd", "a%c\\", Err(())),
            ("xyz", "ab#", Ok(false)),
        ];
        for (text, pattern, want) in cases {
            let escape = pattern.ends_with('#').then_some("#");
            let got = like(text, pattern, escape, false).map_err(|e| {
                assert_eq!(e.to_string(), DANGLING_ESCAPE);
            });
            assert_eq!(got, want, "{text} LIKE {pattern}");
        }
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

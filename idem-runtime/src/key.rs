//! The idempotency key carried by the `Idempotency-Key` header.
//!
//! The IETF draft defines the header as an RFC 9651 sf-string (`"abc"`,
//! with `\"` and `\\` escapes); Stripe's clients send a bare value (`abc`).
//! Both are accepted and both mean the key `abc`. After unquoting, a key is
//! 1 to [`IdempotencyKey::MAX_LEN`] (255) visible ASCII characters (`!` to `~`).
//!
//! RFC 9651 parameters may follow the closing quote and are ignored:
//! `"abc";foo=1` and `"abc"; a; b=?0` are the key `abc`. They must be
//! well-formed (`"abc";` or `"abc";A=1` is a 400).
//!
//! A bare value may not contain `;`. RFC 9651 would read `abc;x=1` as the
//! token `abc` with a parameter, while a client that sends an opaque key
//! (as Stripe's do) may mean `abc;x=1` whole. Either guess can go wrong
//! silently (`user1;order1` and `user1;order2` merged into one key, or one
//! operation split into two keys by a changing parameter), so such a value
//! is refused with 400: the client quotes the key (`"abc";x=1`, or
//! `"a;b"` for a key that holds `;`).

mod params;

use std::fmt;

use sha2::{Digest, Sha256};

/// Longest accepted key, in characters (after unquoting).
const MAX_KEY_LEN: usize = 255;

/// A validated idempotency key.
///
/// Its `Debug` and `Display` forms print a short hash, never the key itself:
/// keys are bearer-like secrets that must not land in logs.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

/// Why a header value is not an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The header is absent.
    #[error("the `{header}` header is missing")]
    Missing {
        /// Name of the header that should carry the key.
        header: String,
    },
    /// The header is present more than once.
    #[error("the `{header}` header appears more than once")]
    Repeated {
        /// Name of the header.
        header: String,
    },
    /// The key is empty after unquoting.
    #[error("the idempotency key is empty")]
    Empty,
    /// The key is longer than [`IdempotencyKey::MAX_LEN`].
    #[error("the idempotency key has {len} characters; at most {MAX_KEY_LEN} are allowed")]
    TooLong {
        /// Length of the refused key.
        len: usize,
    },
    /// The value is neither a valid sf-string nor a bare token.
    #[error("the idempotency key is malformed: {reason}")]
    Malformed {
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl IdempotencyKey {
    /// Longest accepted key, in characters (after unquoting).
    pub const MAX_LEN: usize = MAX_KEY_LEN;

    /// Parses a header value (as raw bytes) into a key.
    ///
    /// Surrounding spaces and tabs are ignored, as HTTP allows. A quoted
    /// key may be followed by RFC 9651 parameters, which are checked and
    /// ignored. A bare key may not contain `;`: it could be one key or a key
    /// with parameters, so the client must quote it.
    pub fn parse(value: &[u8]) -> Result<Self, KeyError> {
        let value = trim_ows(value);
        let key = match value.first() {
            Some(b'"') => {
                let (key, parameters) = unquote(value)?;
                params::check(parameters).map_err(|reason| KeyError::Malformed { reason })?;
                key
            }
            _ => bare(value)?,
        };
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong { len: key.len() });
        }
        Ok(Self(key))
    }

    /// A natural key: a value the request already carries (a path
    /// parameter, a string or integer in the body), taken as it is. The
    /// rules of a header key hold: 1 to 255 visible ASCII characters.
    pub fn natural(value: &str) -> Result<Self, KeyError> {
        if value.is_empty() {
            return Err(KeyError::Empty);
        }
        visible_within_limit(value.as_bytes())?;
        Ok(Self(value.to_owned()))
    }

    /// A key a route's key function made: any text but the empty one
    /// (`None`), which the function means as no key. Only its hash is
    /// ever stored or logged.
    #[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
    pub(crate) fn computed(text: String) -> Option<Self> {
        (!text.is_empty()).then_some(Self(text))
    }

    /// A composite key: `parts`, each written `<length>:<part>`, one after
    /// the other, so that no two different tuples join into one key
    /// (`a:b` + `c` and `a` + `b:c` are `3:a:b1:c` and `1:a3:b:c`).
    #[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
    pub(crate) fn joined(parts: &[IdempotencyKey]) -> Self {
        let mut text = String::with_capacity(parts.iter().map(|part| part.0.len() + 4).sum());
        for part in parts {
            text.push_str(&part.0.len().to_string());
            text.push(':');
            text.push_str(&part.0);
        }
        Self(text)
    }

    /// The key as the client meant it (unquoted, unescaped).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A short, stable hash of the key, for logs and traces.
    pub fn short_hash(&self) -> String {
        hex::encode(&Sha256::digest(self.0.as_bytes())[..6])
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey(#{})", self.short_hash())
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.short_hash())
    }
}

fn trim_ows(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}

fn is_visible(byte: u8) -> bool {
    (0x21..=0x7e).contains(&byte)
}

/// A bare value: visible ASCII only, as Stripe clients send, without `;`.
fn bare(value: &[u8]) -> Result<String, KeyError> {
    if value.contains(&b';') {
        return Err(KeyError::Malformed {
            reason: "a bare key may not contain `;`, which RFC 9651 reads as the start of parameters; \
                     quote the key (`\"abc\";x=1`, or `\"a;b\"` for a key holding `;`)",
        });
    }
    visible_within_limit(value)?;
    Ok(value.iter().map(|&b| char::from(b)).collect())
}

/// Visible ASCII only, at most [`MAX_KEY_LEN`] bytes: the rule of every
/// key, bare header keys and natural keys alike.
fn visible_within_limit(value: &[u8]) -> Result<(), KeyError> {
    if let Some(&byte) = value.iter().find(|&&b| !is_visible(b)) {
        return Err(KeyError::Malformed {
            reason: if byte.is_ascii() {
                "it contains a space or a control character"
            } else {
                "it contains a non-ASCII byte"
            },
        });
    }
    if value.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong { len: value.len() });
    }
    Ok(())
}

/// An RFC 9651 sf-string: `"` chars `"`, with `\"` and `\\` escapes; the
/// key and what follows the closing quote.
fn unquote(value: &[u8]) -> Result<(String, &[u8]), KeyError> {
    let mut out = String::with_capacity(value.len());
    let mut bytes = value[1..].iter();
    loop {
        match bytes.next() {
            None => {
                return Err(KeyError::Malformed { reason: "the quoted string is not closed" });
            }
            Some(b'"') => break,
            Some(b'\\') => match bytes.next() {
                Some(&escaped @ (b'"' | b'\\')) => out.push(char::from(escaped)),
                _ => {
                    return Err(KeyError::Malformed { reason: "only \\\" and \\\\ may be escaped in a quoted key" });
                }
            },
            Some(&byte) if is_visible(byte) => out.push(char::from(byte)),
            Some(b' ') => {
                return Err(KeyError::Malformed { reason: "a key may not contain spaces" });
            }
            Some(_) => {
                return Err(KeyError::Malformed { reason: "it contains a control character or a non-ASCII byte" });
            }
        }
        if out.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong { len: out.len() });
        }
    }
    Ok((out, bytes.as_slice()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(value: &str) -> Result<String, KeyError> {
        IdempotencyKey::parse(value.as_bytes()).map(|k| k.as_str().to_owned())
    }

    #[test]
    fn composite_keys_join_injectively() {
        let join = |parts: &[&str]| {
            let parts: Vec<IdempotencyKey> = parts.iter().map(|part| IdempotencyKey::natural(part).unwrap()).collect();
            IdempotencyKey::joined(&parts).as_str().to_owned()
        };
        assert_eq!(join(&["ord_1", "ln_22"]), "5:ord_15:ln_22");
        assert_ne!(join(&["a:b", "c"]), join(&["a", "b:c"]));
        assert_ne!(join(&["1:a", "b"]), join(&["1", "a1:b"]));
        assert_ne!(join(&["ab", "c"]), join(&["a", "bc"]));
        assert_ne!(join(&["a", "b", "c"]), join(&["a", "1:b1:c"]));
        let long = "k".repeat(IdempotencyKey::MAX_LEN);
        assert_eq!(join(&[&long, &long]).len(), 2 * (IdempotencyKey::MAX_LEN + 4), "parts keep their full length");
    }

    #[test]
    fn a_computed_key_is_any_text_but_the_empty_one() {
        assert_eq!(IdempotencyKey::computed(String::new()), None);
        let key = IdempotencyKey::computed("tenant 7/invoice é".to_owned()).unwrap();
        assert_eq!(key.as_str(), "tenant 7/invoice é");
        assert!(!format!("{key} {key:?}").contains("tenant"), "logged as a hash");
    }

    #[test]
    fn quoted_and_bare_forms_mean_the_same_key() {
        assert_eq!(parse("\"abc\""), Ok("abc".into()));
        assert_eq!(parse("abc"), Ok("abc".into()));
        assert_eq!(parse("  abc\t"), Ok("abc".into()));
        assert_eq!(parse("8e03978e-40d5-43e8-bc93-6894a57f9324"), Ok("8e03978e-40d5-43e8-bc93-6894a57f9324".into()));
    }

    #[test]
    fn escapes_are_unescaped() {
        assert_eq!(parse(r#""a\"b""#), Ok("a\"b".into()));
        assert_eq!(parse(r#""a\\b""#), Ok("a\\b".into()));
        assert!(matches!(parse(r#""a\nb""#), Err(KeyError::Malformed { .. })));
        assert!(matches!(parse(r#""a\"#), Err(KeyError::Malformed { .. })));
    }

    #[test]
    fn refuses_bad_values() {
        assert_eq!(parse(""), Err(KeyError::Empty));
        assert_eq!(parse("\"\""), Err(KeyError::Empty));
        assert!(matches!(parse("\"abc"), Err(KeyError::Malformed { .. })));
        assert!(matches!(parse("\"abc\"x"), Err(KeyError::Malformed { .. })));
        assert!(matches!(parse("a b"), Err(KeyError::Malformed { .. })));
        assert!(matches!(parse("\"a b\""), Err(KeyError::Malformed { .. })));
        assert!(matches!(parse("clé"), Err(KeyError::Malformed { .. })));
        assert!(matches!(parse("a\u{7f}"), Err(KeyError::Malformed { .. })));
    }

    #[test]
    fn parameters_after_a_quoted_key_are_ignored() {
        for value in [
            r#""abc";foo=1"#,
            r#""abc"; a; b=?0"#,
            r#""abc";a;a=2"#,
            r#""abc";n=-12;d=1.5;s="x \"y\" z";t=tok/en:1;b=:aGk=:;at=@1700000000;ds=%"caf%c3%a9";*w"#,
            " \"abc\";x=1\t",
        ] {
            assert_eq!(parse(value), Ok("abc".into()), "{value}");
        }
    }

    #[test]
    fn malformed_parameters_are_refused() {
        for value in [
            r#""abc";"#,
            r#""abc";;a"#,
            r#""abc" ;a"#,
            r#""abc";A=1"#,
            r#""abc";1a"#,
            r#""abc";a="#,
            r#""abc";a=1.2345"#,
            r#""abc";a=1."#,
            r#""abc";a=-"#,
            r#""abc";a=1234567890123456"#,
            r#""abc";a=1234567890123.5"#,
            r#""abc";a=?2"#,
            r#""abc";a="open"#,
            r#""abc";a="bad\escape""#,
            r#""abc";a=@1.5"#,
            r#""abc";a=%"%C3%A9""#,
            r#""abc";a=%"%ff""#,
            r#""abc";a=:not base64:"#,
            r#""abc";a=:aGk"#,
            r#""abc";a=b c"#,
            r#""abc",b"#,
            r#""abc"x"#,
        ] {
            assert!(matches!(parse(value), Err(KeyError::Malformed { .. })), "{value}: {:?}", parse(value));
        }
    }

    #[test]
    fn a_bare_key_with_a_semicolon_is_refused() {
        // RFC 9651 would read `x=1` as a parameter of the token `abc`; a
        // client sending an opaque key may mean `abc;x=1` whole. Guessing
        // could merge two keys or split one: the client must quote it.
        for value in ["abc;x=1", "abc;", "a;b", ";"] {
            let error = parse(value).expect_err(value);
            assert!(error.to_string().contains("quote"), "{value}: {error}");
        }
        assert_eq!(parse(r#""a;b""#), Ok("a;b".into()), "a quoted key may hold `;`");
    }

    #[test]
    fn length_limits_apply_after_unquoting() {
        let max = "k".repeat(MAX_KEY_LEN);
        assert_eq!(parse(&max), Ok(max.clone()));
        assert_eq!(parse(&format!("\"{max}\"")), Ok(max.clone()));
        assert!(matches!(parse(&format!("{max}k")), Err(KeyError::TooLong { .. })));
        assert!(matches!(parse(&format!("\"{max}k\"")), Err(KeyError::TooLong { .. })));
        // 255 escaped quotes unquote to 255 characters.
        let escaped = "\\\"".repeat(MAX_KEY_LEN);
        assert_eq!(parse(&format!("\"{escaped}\"")), Ok("\"".repeat(MAX_KEY_LEN)));
    }

    #[test]
    fn debug_and_display_hide_the_key() {
        let key = IdempotencyKey::parse(b"secret-key-123").unwrap();
        assert!(!format!("{key:?} {key}").contains("secret"));
        assert_eq!(key.short_hash().len(), 12);
    }
}

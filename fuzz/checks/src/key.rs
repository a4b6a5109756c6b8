//! Target `key`: the `Idempotency-Key` header value, an RFC 9651 sf-string
//! (with parameters, ignored) or a bare token (§4.1 of the contract).
//!
//! Properties, for any bytes:
//!
//! - a key is 1 to 255 visible ASCII characters, is a valid natural key,
//!   and comes back whole from its own quoted form;
//! - a quoted value means what an independent RFC 9651 parser (`sfv`)
//!   reads: a string item, its parameters well-formed, the same string;
//!   what `sfv` refuses is refused (the one latitude RFC 9651 leaves, a
//!   byte sequence with incomplete `=` padding, may be refused too);
//! - a bare value is the trimmed bytes themselves when they are 1 to 255
//!   visible ASCII characters without `;`, and refused otherwise.

use idem_runtime::store::{IdempotencyKey, KeyError};

/// Checks one header value.
pub fn check(data: &[u8]) {
    let parsed = IdempotencyKey::parse(data);
    if let Ok(key) = &parsed {
        well_formed(key);
    }
    let value = trim_ows(data);
    match value.first() {
        Some(b'"') => agrees_with_rfc_9651(value, &parsed),
        _ => bare(value, &parsed),
    }
}

fn well_formed(key: &IdempotencyKey) {
    let text = key.as_str();
    assert!((1..=IdempotencyKey::MAX_LEN).contains(&text.len()), "key of {} characters: {text:?}", text.len());
    assert!(text.bytes().all(is_visible), "key with an invisible character: {text:?}");
    let natural = IdempotencyKey::natural(text);
    assert_eq!(natural.as_ref().map(IdempotencyKey::as_str), Ok(text), "a header key is not a natural key");
    let quoted = quote(text);
    let again = IdempotencyKey::parse(quoted.as_bytes());
    assert_eq!(again.as_ref().map(IdempotencyKey::as_str), Ok(text), "{quoted} does not give the key back");
    assert_eq!(format!("{key:?}"), format!("IdempotencyKey(#{})", key.short_hash()), "Debug shows more than a hash");
}

/// A quoted value against `sfv`, RFC 9651 item parsing.
fn agrees_with_rfc_9651(value: &[u8], parsed: &Result<IdempotencyKey, KeyError>) {
    let item = sfv::Parser::new(value).parse::<sfv::Item>();
    let string = item.as_ref().ok().map(|item| {
        let string = item.bare_item.as_string().expect("a value starting with `\"` is a string item");
        string.as_str().to_owned()
    });
    let shown = String::from_utf8_lossy(value);
    match (string, parsed) {
        (Some(expected), Ok(key)) => assert_eq!(key.as_str(), expected, "{shown}"),
        // An sf-string may hold spaces or be empty or long; a key may not.
        (Some(expected), Err(error)) => assert!(
            expected.is_empty()
                || expected.len() > IdempotencyKey::MAX_LEN
                || !expected.bytes().all(is_visible)
                || (incomplete_padding(value) && error.to_string().contains("not base64")),
            "{shown}: RFC 9651 reads the key {expected:?}, refused with {parsed:?}"
        ),
        (None, Ok(key)) => panic!("{shown}: not an RFC 9651 item ({:?}), yet read as {:?}", item.err(), key.as_str()),
        (None, Err(_)) => {}
    }
}

/// A bare value (trimmed): the bytes themselves when they can be a key.
fn bare(value: &[u8], parsed: &Result<IdempotencyKey, KeyError>) {
    let shown = String::from_utf8_lossy(value);
    let expected = match value {
        [] => Err(KeyError::Empty),
        _ if value.contains(&b';') || !value.iter().copied().all(is_visible) => {
            assert!(matches!(parsed, Err(KeyError::Malformed { .. })), "{shown}: {parsed:?}, expected malformed");
            return;
        }
        _ if value.len() > IdempotencyKey::MAX_LEN => Err(KeyError::TooLong { len: value.len() }),
        _ => Ok(std::str::from_utf8(value).expect("visible ASCII")),
    };
    assert_eq!(parsed.as_ref().map(IdempotencyKey::as_str).map_err(Clone::clone), expected, "{shown}");
}

/// Whether `value` has a byte sequence parameter whose `=` padding is
/// incomplete (`:YQ=:`). RFC 9651 (section 4.2.7) leaves it to parsers to
/// refuse one: the key parser does, `sfv` does not.
fn incomplete_padding(value: &[u8]) -> bool {
    let is_base64 = |b: &u8| b.is_ascii_alphanumeric() || b"+/=".contains(b);
    value
        .split(|&b| b == b':')
        .skip(1)
        .any(|part| part.contains(&b'=') && part.len() % 4 != 0 && part.iter().all(is_base64))
}

fn quote(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted
}

fn trim_ows(value: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = value.iter().position(|b| !is_ows(b)).unwrap_or(value.len());
    let end = value.iter().rposition(|b| !is_ows(b)).map_or(start, |end| end + 1);
    &value[start..end]
}

fn is_visible(byte: u8) -> bool {
    (0x21..=0x7e).contains(&byte)
}

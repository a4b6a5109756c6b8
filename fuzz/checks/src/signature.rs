//! Target `signature`: the order service's `Provider-Signature` header
//! (`t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`, 300 s
//! tolerance; §13 of the contract), in `order_service::signature`.
//!
//! The input is a delivery made by `arbitrary`: a secret, a body, a clock,
//! and a header either of raw bytes or of items (timestamps, signatures
//! good and bad, other schemes, stray text). Properties:
//!
//! - never a panic;
//! - a delivery passes only if the header carries the MAC of its body for
//!   its one timestamp, within the tolerance (checked apart from the
//!   parser, from the header's text);
//! - a header made of well-formed items passes exactly when it has one
//!   valid timestamp, a good signature, and the clock is within the
//!   tolerance;
//! - a delivery that passes fails once its body changes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arbitrary::{Arbitrary, Unstructured};
use hmac::{Hmac, KeyInit, Mac};
use order_service::signature::{SignatureError, TOLERANCE, verify};
use sha2::Sha256;

/// Checks one delivery.
pub fn check(data: &[u8]) {
    let Ok(delivery) = Delivery::arbitrary_take_rest(Unstructured::new(data)) else { return };
    let Delivery { secret, body, signed_at, skew, header } = delivery;
    let signed_at = u64::from(signed_at);
    let now = UNIX_EPOCH + Duration::from_secs(signed_at.saturating_add_signed(i64::from(skew)));
    let (text, expected) = match &header {
        Header::Raw(bytes) => (bytes.clone(), None),
        Header::Items(items) => render(items, &secret, &body, signed_at, now),
    };
    let result = verify(Some(&text), &body, &secret, now);
    let shown = String::from_utf8_lossy(&text);
    if let Some(expected) = expected {
        assert_eq!(result.is_ok(), expected, "{shown}: {result:?}");
    }
    if result.is_ok() {
        assert!(carries_the_mac(&text, &secret, &body, now), "{shown}: accepted without the MAC of the body");
        let mut other = body.clone();
        match other.first_mut() {
            Some(first) => *first ^= 1,
            None => other.push(b'x'),
        }
        assert_eq!(verify(Some(&text), &other, &secret, now), Err(SignatureError::Mismatch), "{shown}: body changed");
    }
}

/// One delivery as the fuzzer makes it.
#[derive(Debug, Arbitrary)]
struct Delivery {
    secret: Vec<u8>,
    body: Vec<u8>,
    /// When the good signatures were made, in unix seconds (a `u32`: the
    /// range a real clock shows).
    signed_at: u32,
    /// The receiver's clock, from `signed_at`.
    skew: i16,
    header: Header,
}

#[derive(Debug, Arbitrary)]
enum Header {
    Raw(Vec<u8>),
    Items(Vec<Item>),
}

/// One comma-separated item of a header.
#[derive(Debug, Arbitrary)]
enum Item {
    /// `t=<signed_at>`, as the provider writes it.
    Timestamp,
    /// `t=<text>`: leading zeros, signs, letters, overflow.
    OddTimestamp(String),
    /// `v1=` the MAC for the header's first timestamp.
    Good,
    /// `v1=` the MAC for the header's first timestamp in upper case.
    GoodUpper,
    /// `v1=` the hex of arbitrary bytes.
    Hex(Vec<u8>),
    /// Another scheme (`v0`, `v2`, `T`), ignored.
    Scheme(u8, Vec<u8>),
    /// A trailing or doubled comma.
    Empty,
    /// Anything at all.
    Stray(String),
    /// Spaces around an item, which are ignored.
    Padded(Box<Item>),
}

/// The header's text, and whether it must pass when every item is
/// well-formed (`None` when a stray item makes that unknowable here).
fn render(items: &[Item], secret: &[u8], body: &[u8], signed_at: u64, now: SystemTime) -> (Vec<u8>, Option<bool>) {
    let stamps: Vec<String> = items.iter().filter_map(|item| timestamp(item, signed_at)).collect();
    let first = stamps.first().cloned().unwrap_or_else(|| signed_at.to_string());
    let mut known = true;
    let mut good = false;
    let parts: Vec<String> =
        items.iter().map(|item| item_text(item, secret, body, &first, &mut known, &mut good)).collect();
    let text = parts.join(",").into_bytes();
    let valid = |stamp: &str| !stamp.is_empty() && stamp.len() <= 19 && stamp.bytes().all(|b| b.is_ascii_digit());
    let expected = match stamps.as_slice() {
        [stamp] if valid(stamp) => {
            let t: u64 = stamp.parse().expect("19 digits fit");
            good && within(now, t)
        }
        _ => false,
    };
    (text, known.then_some(expected))
}

fn timestamp(item: &Item, signed_at: u64) -> Option<String> {
    match item {
        Item::Timestamp => Some(signed_at.to_string()),
        Item::OddTimestamp(text) => Some(text.clone()),
        Item::Padded(inner) => timestamp(inner, signed_at),
        _ => None,
    }
}

fn item_text(item: &Item, secret: &[u8], body: &[u8], stamp: &str, known: &mut bool, good: &mut bool) -> String {
    match item {
        Item::Timestamp | Item::OddTimestamp(_) => {
            let value = timestamp(item, 0).unwrap_or_default();
            let value = if matches!(item, Item::Timestamp) { stamp.to_owned() } else { value };
            // A value with a comma or surrounding spaces is another header.
            if value.contains(',') || value.trim() != value {
                *known = false;
            }
            format!("t={value}")
        }
        Item::Good => {
            *good = true;
            format!("v1={}", mac(secret, stamp, body))
        }
        Item::GoodUpper => {
            *good = true;
            format!("v1={}", mac(secret, stamp, body).to_ascii_uppercase())
        }
        Item::Hex(bytes) => format!("v1={}", hex::encode(bytes)),
        Item::Scheme(scheme, value) => {
            let name = ["v0", "v2", "T", "V1", "t1"][usize::from(*scheme) % 5];
            format!("{name}={}", hex::encode(value))
        }
        Item::Empty => String::new(),
        Item::Stray(text) => {
            *known = false;
            text.clone()
        }
        Item::Padded(inner) => format!(" {} ", item_text(inner, secret, body, stamp, known, good)),
    }
}

fn mac(secret: &[u8], stamp: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key");
    mac.update(stamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

fn within(now: SystemTime, t: u64) -> bool {
    let now = now.duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs());
    now.abs_diff(t) <= TOLERANCE.as_secs()
}

/// Whether `header`, read plainly, has one `t` and a `v1` with the MAC of
/// `body` for it, within the tolerance.
fn carries_the_mac(header: &[u8], secret: &[u8], body: &[u8], now: SystemTime) -> bool {
    let Ok(header) = std::str::from_utf8(header) else { return false };
    let items: Vec<(&str, &str)> = header.split(',').filter_map(|item| item.trim().split_once('=')).collect();
    let stamps: Vec<&str> = items.iter().filter(|(name, _)| *name == "t").map(|(_, value)| *value).collect();
    let [stamp] = stamps.as_slice() else { return false };
    let Ok(t) = stamp.parse::<u64>() else { return false };
    let expected = mac(secret, stamp, body);
    within(now, t) && items.iter().any(|(name, value)| *name == "v1" && value.eq_ignore_ascii_case(&expected))
}

//! The provider's signature, checked like Stripe's: a header
//! `Provider-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>[,v1=..]`,
//! the MAC taken with the webhook secret over `"<t>.<raw body>"`, the
//! timestamp within [`TOLERANCE`] of now.
//!
//! The service's `Verified` extractor runs it: under `#[idempotent]`
//! extractors run before the key is claimed, so a forged request with a
//! real event id is refused before it can touch that id, and the genuine
//! event still runs. It is self-contained on purpose (no actix-web, no
//! service types): copy it into your service. It is the service's library
//! so that its fuzz target (`fuzz/`, target `signature`) reaches it too.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The header that carries the signature.
pub const HEADER: &str = "provider-signature";

/// How far the signed timestamp may be from now, either way.
pub const TOLERANCE: Duration = Duration::from_secs(300);

/// The secret the service starts with when none is given: for tests and
/// the README's examples only.
pub const DEFAULT_SECRET: &str = "whsec_test";

/// The shared webhook secret, registered as `web::Data<WebhookSecret>`.
#[derive(Clone)]
pub struct WebhookSecret(Vec<u8>);

impl WebhookSecret {
    /// The secret, as the provider shows it (`whsec_...`), used as bytes.
    pub fn new(secret: &str) -> Self {
        Self(secret.as_bytes().to_vec())
    }

    /// Reads `--webhook-secret`: an empty one would let anyone sign.
    pub fn read(secret: &str) -> Result<Self, &'static str> {
        if secret.trim().is_empty() {
            return Err("the webhook secret is empty: anyone could sign deliveries");
        }
        Ok(Self::new(secret))
    }

    /// Whether this is the public default, `whsec_test`.
    pub fn is_default(&self) -> bool {
        self.0 == DEFAULT_SECRET.as_bytes()
    }

    /// Checks a delivery's signature header against its body with this
    /// secret at `now`: [`verify`] with the secret's bytes.
    pub fn verify(&self, header: Option<&[u8]>, body: &[u8], now: SystemTime) -> Result<(), SignatureError> {
        verify(header, body, &self.0, now)
    }
}

/// Never print the secret.
impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(<hidden>)")
    }
}

/// Why a delivery is refused (400).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// No signature header.
    #[error("the Provider-Signature header is missing")]
    Missing,
    /// The header is not `t=..,v1=..`.
    #[error("the Provider-Signature header is malformed: {0}")]
    Malformed(&'static str),
    /// The timestamp is too far from now (a replayed or delayed delivery).
    #[error("the signature's timestamp is outside the {} s tolerance", TOLERANCE.as_secs())]
    Stale,
    /// No `v1` value is the MAC of this body with the secret.
    #[error("no signature matches the body")]
    Mismatch,
}

/// Checks `header` against `body` and `secret` at `now`.
pub fn verify(header: Option<&[u8]>, body: &[u8], secret: &[u8], now: SystemTime) -> Result<(), SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?;
    let header = std::str::from_utf8(header).map_err(|_| SignatureError::Malformed("not ASCII"))?;
    let mut timestamp = None;
    let mut signatures = Vec::new();
    // Empty items (a trailing comma) are skipped, as Stripe's libraries do.
    for item in header.split(',').map(str::trim).filter(|item| !item.is_empty()) {
        let (name, value) = item.split_once('=').ok_or(SignatureError::Malformed("an item is not name=value"))?;
        match name {
            "t" if timestamp.is_some() => return Err(SignatureError::Malformed("two timestamps")),
            // Digits only, and signed as sent: `+T` or `0T` is not `T`.
            "t" if value.is_empty() || value.len() > 19 || !value.bytes().all(|b| b.is_ascii_digit()) => {
                return Err(SignatureError::Malformed("the timestamp is not unix seconds"));
            }
            "t" => timestamp = Some(value),
            // A value that is not hex matches nothing; other schemes (v0) are ignored.
            "v1" => signatures.extend(hex::decode(value).ok()),
            _ => {}
        }
    }
    let signed = timestamp.ok_or(SignatureError::Malformed("no timestamp"))?;
    let timestamp: u64 = signed.parse().map_err(|_| SignatureError::Malformed("the timestamp is not unix seconds"))?;
    if signatures.is_empty() {
        return Err(SignatureError::Malformed("no v1 signature"));
    }
    let now = now.duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs());
    if now.abs_diff(timestamp) > TOLERANCE.as_secs() {
        return Err(SignatureError::Stale);
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).map_err(|_| SignatureError::Mismatch)?;
    mac.update(signed.as_bytes());
    mac.update(b".");
    mac.update(body);
    // Several v1 values while the secret rotates: any one may match. Each
    // comparison is constant-time.
    if signatures.iter().any(|signature| mac.clone().verify_slice(signature).is_ok()) {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"whsec_test";

    fn sign(secret: &[u8], t: u64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
        mac.update(format!("{t}.").as_bytes());
        mac.update(body);
        hex::encode(mac.finalize().into_bytes())
    }

    fn at(t: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(t)
    }

    #[test]
    fn a_good_signature_passes_within_the_tolerance() {
        let (t, body) = (1_700_000_000, br#"{"id":"evt_1"}"#.as_slice());
        let header = format!("t={t},v1={}", sign(SECRET, t, body));
        assert_eq!(verify(Some(header.as_bytes()), body, SECRET, at(t)), Ok(()));
        assert_eq!(verify(Some(header.as_bytes()), body, SECRET, at(t + 300)), Ok(()));
        assert_eq!(verify(Some(header.as_bytes()), body, SECRET, at(t + 301)), Err(SignatureError::Stale));
        assert_eq!(verify(Some(header.as_bytes()), body, SECRET, at(t - 301)), Err(SignatureError::Stale));
    }

    #[test]
    fn an_empty_secret_is_refused() {
        assert!(WebhookSecret::read("").is_err());
        assert!(WebhookSecret::read("  ").is_err());
        assert!(WebhookSecret::read(DEFAULT_SECRET).is_ok_and(|secret| secret.is_default()));
        assert!(WebhookSecret::read("whsec_live").is_ok_and(|secret| !secret.is_default()));
    }

    #[test]
    fn rotation_accepts_any_v1() {
        let (t, body) = (1_700_000_000, b"{}".as_slice());
        let header = format!("t={t},v1={},v0=zz,v1={}", sign(b"old", t, body), sign(SECRET, t, body));
        assert_eq!(verify(Some(header.as_bytes()), body, SECRET, at(t)), Ok(()));
    }

    #[test]
    fn anything_else_is_refused() {
        let (t, body) = (1_700_000_000, br#"{"id":"evt_1"}"#.as_slice());
        let good = sign(SECRET, t, body);
        let refused =
            |header: Option<String>, body: &[u8]| verify(header.as_deref().map(str::as_bytes), body, SECRET, at(t));
        assert_eq!(refused(None, body), Err(SignatureError::Missing));
        assert_eq!(refused(Some(format!("t={t},v1={good}")), br#"{"id":"evt_2"}"#), Err(SignatureError::Mismatch));
        assert_eq!(refused(Some(format!("t={},v1={good}", t + 1)), body), Err(SignatureError::Mismatch));
        assert_eq!(refused(Some(format!("t={t},v1={}", sign(b"other", t, body))), body), Err(SignatureError::Mismatch));
        assert_eq!(refused(Some(format!("t={t},v1={}", &good[..62])), body), Err(SignatureError::Mismatch));
        assert!(matches!(refused(Some(format!("v1={good}")), body), Err(SignatureError::Malformed(_))));
        assert!(matches!(refused(Some(format!("t={t}")), body), Err(SignatureError::Malformed(_))));
        assert!(matches!(refused(Some(format!("t={t},t={t},v1={good}")), body), Err(SignatureError::Malformed(_))));
        assert!(matches!(refused(Some("garbage".into()), body), Err(SignatureError::Malformed(_))));
        // The timestamp is signed as sent: digits only.
        for t in [format!("+{t}"), format!("{t}.0"), String::new(), "9".repeat(25)] {
            let header = format!("t={t},v1={good}");
            assert!(matches!(refused(Some(header), body), Err(SignatureError::Malformed(_))), "t={t}");
        }
        assert_eq!(refused(Some(format!("t=0{t},v1={good}")), body), Err(SignatureError::Mismatch));
        // A trailing comma is nothing.
        assert_eq!(refused(Some(format!("t={t},v1={good},")), body), Ok(()));
    }
}

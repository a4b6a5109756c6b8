//! Key scopes and the storage keys built from them.
//!
//! A storage key is built from the tuple (format version, scope, subject,
//! method, route, key). Each part is written as `<byte length>:<bytes>`, so
//! the encoding is injective: no two different tuples produce the same
//! storage key, whatever `:` or `|` the subject or the key contain (a naive
//! `format!("{scope}:{subject}:{key}")` lets subject `a:b` + key `c` meet
//! subject `a` + key `b:c`).
//!
//! The storage key itself is `idem:v1:{<tag>}:<rest>`, where tag and rest
//! are the two halves of the hex SHA-256 of that encoding: stores never see
//! the raw subject or key (secrets, NUL bytes, unbounded lengths), every key
//! has the same small size, and two tuples meet only through a SHA-256
//! collision. The `{tag}` is the Redis Cluster hash tag, placed first so
//! that every key a store derives for one record (by appending to the
//! storage key) lands in one cluster slot.

use std::fmt;

use sha2::{Digest, Sha256};

use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;

/// Version of the storage key encoding; bumped if the layout ever changes.
const FORMAT_VERSION: u32 = 1;

/// The namespace an idempotency key lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scope {
    /// The route and the authenticated subject: two users never share a key.
    User,
    /// The method and route pattern: the same key on two routes is two keys.
    Route,
    /// The key alone, across every route that uses this scope.
    Global,
}

impl Scope {
    /// The name used in the attribute (`"user"`, `"route"`, `"global"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Route => "route",
            Self::Global => "global",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where one idempotency record lives in a store.
///
/// Built only by [`StorageKey::new`], whose encoding is injective.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct StorageKey {
    /// `idem:v1:{<tag>}:<rest>`, ASCII, kept inline: no allocation per key.
    encoded: [u8; ENCODED_LEN],
    /// The SHA-256 the encoded key spells in hex.
    digest: [u8; 32],
}

/// Bytes of every encoded key: the prefix, the braced tag (16 bytes of the
/// digest in hex), `:` and the rest of the digest in hex.
const ENCODED_LEN: usize = PREFIX.len() + 1 + 32 + 2 + 32;

impl StorageKey {
    /// Version of the encoding, part of every key (`idem:v1:...`); bumped if
    /// the layout ever changes.
    pub const FORMAT_VERSION: u32 = FORMAT_VERSION;

    /// Builds the storage key of `key` in `scope`.
    ///
    /// `subject` is used only by [`Scope::User`], `method` and `route` (the
    /// route *pattern*, such as `/orders/{id}`) by `User` and `Route`; the
    /// parts a scope does not use are left out, so `global` keys really are
    /// shared across routes.
    pub fn new(scope: Scope, subject: Option<&str>, method: &str, route: &str, key: &IdempotencyKey) -> Self {
        let (subject, method, route) = match scope {
            Scope::User => (subject.unwrap_or(""), method, route),
            Scope::Route => ("", method, route),
            Scope::Global => ("", "", ""),
        };
        Self::from_parts(scope.as_str(), subject, method, route, key.as_str())
    }

    fn from_parts(scope: &str, subject: &str, method: &str, route: &str, key: &str) -> Self {
        // The hash of `encode(..)`, fed part by part (no intermediate string).
        let mut hasher = Sha256::new();
        hasher.update(b"v");
        hasher.update(decimal(FORMAT_VERSION as usize, &mut [0; 20]));
        for part in [scope, subject, method, route, key] {
            hasher.update(b"|");
            hasher.update(decimal(part.len(), &mut [0; 20]));
            hasher.update(b":");
            hasher.update(part.as_bytes());
        }
        Self::from_digest(hasher.finalize().into())
    }

    /// The key whose SHA-256 is `digest`.
    pub(crate) fn from_digest(digest: [u8; 32]) -> Self {
        let mut encoded = [0; ENCODED_LEN];
        let (prefix, rest) = encoded.split_at_mut(PREFIX.len());
        prefix.copy_from_slice(PREFIX.as_bytes());
        rest[0] = b'{';
        write_hex(&mut rest[1..33], &digest[..16]);
        rest[33..35].copy_from_slice(b"}:");
        write_hex(&mut rest[35..], &digest[16..]);
        Self { encoded, digest }
    }

    /// The 32 bytes [`StorageKey::as_str`] spells in hex: a compact form of
    /// the key for in-process stores and caches.
    pub(crate) fn digest(&self) -> &[u8; 32] {
        &self.digest
    }

    /// The full encoded key, as stores should use it.
    pub fn as_str(&self) -> &str {
        // ASCII by construction (the prefix, braces and hex digits). Never
        // a fallback: an empty key would be every record's key.
        std::str::from_utf8(&self.encoded).expect("a storage key is ASCII by construction")
    }

    /// A stable key derived from this one, the request's `fingerprint` and
    /// `label`: 64 lower-case hex digits, the same in every execution of
    /// that request under this key, different for every other key, request
    /// or label. Given to a downstream service that deduplicates by key (a
    /// payment provider), it keeps even an execution repeated after a lost
    /// lease from repeating the downstream effect; and a key reused for
    /// another request after its TTL never meets the first one's effects.
    pub fn derive(&self, fingerprint: &Fingerprint, label: &str) -> String {
        let mut hash = Sha256::new();
        for part in [b"idem-derived-key/v1".as_slice(), &self.encoded, fingerprint.as_bytes(), label.as_bytes()] {
            hash.update(part.len().to_string().as_bytes());
            hash.update(b":");
            hash.update(part);
        }
        hex::encode(hash.finalize())
    }

    /// The Redis Cluster hash tag, braces included (`{3f2a...}`).
    pub fn hash_tag(&self) -> &str {
        &self.as_str()[PREFIX.len()..PREFIX.len() + 34]
    }

    /// The record's id for operators and logs: the hash tag without its
    /// braces, 32 hex digits (half the key's SHA-256). The span of every
    /// idempotent request carries it as `record`, and the `idem` tool finds
    /// a record by it.
    pub fn record_id(&self) -> &str {
        &self.as_str()[PREFIX.len() + 1..PREFIX.len() + 33]
    }

    /// A storage key as a store wrote it ([`StorageKey::as_str`]), read
    /// back; `None` for anything else.
    pub fn from_stored(stored: &str) -> Option<Self> {
        let rest = stored.strip_prefix(PREFIX)?.strip_prefix('{')?;
        let (tag, rest) = rest.split_at_checked(32)?;
        let rest = rest.strip_prefix("}:")?;
        let mut digest = [0; 32];
        hex::decode_to_slice(format!("{tag}{rest}"), &mut digest).ok()?;
        // Upper-case digits decode too: only the key as written is one.
        Some(Self::from_digest(digest)).filter(|key| key.as_str() == stored)
    }
}

/// What every storage key starts with.
const PREFIX: &str = "idem:v1:";
const _: () = assert!(FORMAT_VERSION == 1, "PREFIX names the format version");

/// `n` in decimal, written into `buf`.
fn decimal(mut n: usize, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

/// Writes `bytes` in lower-case hex into `out` (twice as long).
fn write_hex(out: &mut [u8], bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0xf)];
    }
}

/// The injective encoding of the tuple: each part as `<byte length>:<bytes>`
/// (what [`StorageKey::from_parts`] hashes).
#[cfg_attr(not(test), allow(dead_code))]
fn encode(scope: &str, subject: &str, method: &str, route: &str, key: &str) -> String {
    let mut body = format!("v{FORMAT_VERSION}");
    for part in [scope, subject, method, route, key] {
        body.push('|');
        body.push_str(&part.len().to_string());
        body.push(':');
        body.push_str(part);
    }
    body
}

impl fmt::Debug for StorageKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The tag identifies the record without printing the raw key.
        write!(f, "StorageKey({})", self.hash_tag())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_key_is_the_hash_of_the_encoding_as_written_before() {
        use sha2::{Digest, Sha256};
        let long = "k".repeat(255);
        for (scope, subject, method, route, key) in [
            ("user", "alice", "POST", "/orders", "abc"),
            ("route", "", "PUT", "/orders/{id}", long.as_str()),
            ("global", "", "", "", "1"),
            ("user", "a:b|c", "POST", "/x", "é"),
        ] {
            let digest = hex::encode(Sha256::digest(encode(scope, subject, method, route, key).as_bytes()));
            let (tag, rest) = digest.split_at(32);
            let expected = format!("idem:v1:{{{tag}}}:{rest}");
            assert_eq!(StorageKey::from_parts(scope, subject, method, route, key).as_str(), expected);
        }
    }

    #[test]
    fn a_stored_key_reads_back_and_nothing_else_does() {
        let key = StorageKey::from_parts("user", "alice", "POST", "/orders", "abc");
        let read = StorageKey::from_stored(key.as_str()).expect("a stored key");
        assert_eq!(read, key);
        assert_eq!(read.digest(), key.digest());
        assert_eq!(key.record_id().len(), 32);
        assert_eq!(format!("{{{}}}", key.record_id()), key.hash_tag());
        let text = key.as_str();
        for bad in [
            String::new(),
            text[1..].to_owned(),
            text.replacen("idem:v1", "idem:v2", 1),
            text.to_uppercase(),
            text.replacen('{', "(", 1),
            format!("{}g", &text[..text.len() - 1]),
        ] {
            assert!(StorageKey::from_stored(&bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn derived_keys_depend_on_the_key_the_request_and_the_label() {
        use crate::fingerprint::{Fingerprint, RequestParts};
        let request = |body: &'static [u8]| {
            Fingerprint::of(&RequestParts {
                method: "POST",
                path: "/p",
                query: "",
                headers: &[],
                host: None,
                content_type: None,
                body,
            })
        };
        let key =
            |k: &[u8]| StorageKey::new(Scope::User, Some("alice"), "POST", "/p", &IdempotencyKey::parse(k).unwrap());
        let derived = key(b"k").derive(&request(b"a"), "charge");
        assert_eq!(derived, key(b"k").derive(&request(b"a"), "charge"), "stable");
        assert_eq!(derived.len(), 64);
        assert_ne!(derived, key(b"k").derive(&request(b"b"), "charge"), "another request under the key");
        assert_ne!(derived, key(b"j").derive(&request(b"a"), "charge"), "another key");
        assert_ne!(derived, key(b"k").derive(&request(b"a"), "refund"), "another label");
        let bob = StorageKey::new(Scope::User, Some("bob"), "POST", "/p", &IdempotencyKey::parse(b"k").unwrap());
        assert_ne!(derived, bob.derive(&request(b"a"), "charge"), "another subject");
    }

    use proptest::prelude::*;

    use super::*;

    fn key(text: &str) -> IdempotencyKey {
        IdempotencyKey::parse(text.as_bytes()).unwrap()
    }

    #[test]
    fn scopes_share_or_separate_keys() {
        let k = key("abc");
        let user_a = StorageKey::new(Scope::User, Some("alice"), "POST", "/orders", &k);
        let user_b = StorageKey::new(Scope::User, Some("bob"), "POST", "/orders", &k);
        assert_ne!(user_a, user_b);
        let route_1 = StorageKey::new(Scope::Route, Some("alice"), "POST", "/orders", &k);
        let route_2 = StorageKey::new(Scope::Route, Some("bob"), "POST", "/orders", &k);
        assert_eq!(route_1, route_2, "route scope ignores the subject");
        assert_ne!(route_1, StorageKey::new(Scope::Route, None, "POST", "/refunds", &k));
        assert_ne!(route_1, StorageKey::new(Scope::Route, None, "PUT", "/orders", &k));
        let global_1 = StorageKey::new(Scope::Global, None, "POST", "/orders", &k);
        let global_2 = StorageKey::new(Scope::Global, Some("x"), "PUT", "/refunds", &k);
        assert_eq!(global_1, global_2, "global scope is the key alone");
        assert_ne!(global_1, route_1);
    }

    #[test]
    fn the_naive_encoding_collides_and_ours_does_not() {
        let naive = |subject: &str, key: &str| format!("user:{subject}:{key}");
        assert_eq!(naive("a:b", "c"), naive("a", "b:c"));
        let ours = |subject: &str, k: &str| StorageKey::new(Scope::User, Some(subject), "POST", "/o", &key(k));
        assert_ne!(ours("a:b", "c"), ours("a", "b:c"));
        assert_ne!(ours("1:a", "b"), ours("1", "a:b"));
    }

    #[test]
    fn hash_tag_comes_first_and_is_stable() {
        let k = StorageKey::new(Scope::User, Some("{evil}"), "POST", "/o/{id}", &key("}{"));
        let tag = k.hash_tag();
        assert_eq!(tag.len(), 34);
        assert!(tag.starts_with('{') && tag.ends_with('}'));
        assert!(tag[1..33].bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(k.as_str().starts_with(&format!("idem:v1:{tag}:")));
        assert!(!format!("{k:?}").contains("evil"));
    }

    #[test]
    fn stores_never_see_the_raw_subject_or_key() {
        let long = "s".repeat(10_000);
        for subject in ["alice", "nul\0byte", long.as_str()] {
            let k = StorageKey::new(Scope::User, Some(subject), "POST", "/orders", &key("secret-key"));
            assert_eq!(k.as_str().len(), "idem:v1:{}:".len() + 64, "fixed size");
            assert!(k.as_str().is_ascii() && !k.as_str().contains("secret") && !k.as_str().contains(subject));
        }
    }

    /// Subjects and keys drawn from an alphabet rich in separators.
    fn tricky() -> impl Strategy<Value = String> {
        proptest::string::string_regex("[a:|{}0-9]{0,6}").unwrap()
    }

    fn tricky_key() -> impl Strategy<Value = String> {
        proptest::string::string_regex("[a:|{}0-9]{1,6}").unwrap()
    }

    fn scope() -> impl Strategy<Value = Scope> {
        prop_oneof![Just(Scope::User), Just(Scope::Route), Just(Scope::Global)]
    }

    type Tuple = (Scope, String, String, String, String);

    fn tuple() -> impl Strategy<Value = Tuple> {
        (scope(), tricky(), prop_oneof![Just("POST".to_owned()), Just("PUT".to_owned())], tricky(), tricky_key())
    }

    /// The parts of a tuple that its scope actually uses.
    fn significant(t: &Tuple) -> Tuple {
        let (scope, subject, method, route, key) = t.clone();
        match scope {
            Scope::User => (scope, subject, method, route, key),
            Scope::Route => (scope, String::new(), method, route, key),
            Scope::Global => (scope, String::new(), String::new(), String::new(), key),
        }
    }

    fn storage_key(t: &Tuple) -> StorageKey {
        StorageKey::new(t.0, Some(&t.1), &t.2, &t.3, &key(&t.4))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Different significant tuples never share a storage key.
        #[test]
        fn storage_keys_are_injective(a in tuple(), b in tuple()) {
            prop_assert_eq!(
                significant(&a) == significant(&b),
                storage_key(&a) == storage_key(&b),
                "{:?} vs {:?}", a, b
            );
        }

        /// One text split at two different separators into (subject, key)
        /// gives two storage keys: a naive `subject:key` join would not.
        #[test]
        fn splitting_at_a_separator_never_collides(
            pieces in proptest::collection::vec("[a{}|0-9:]{1,3}", 2..6),
            cut_a in 0usize..6,
            shift in 1usize..6,
            sep in "[:|]",
        ) {
            let cut_a = cut_a % pieces.len();
            let cut_b = (cut_a + 1 + shift % (pieces.len() - 1)) % pieces.len();
            let split = |cut: usize| (pieces[..cut].join(&sep), pieces[cut..].join(&sep));
            let (subject_a, key_a) = split(cut_a);
            let (subject_b, key_b) = split(cut_b);
            prop_assert_ne!((&subject_a, &key_a), (&subject_b, &key_b));
            // The encoding itself is injective (a naive join is not)...
            prop_assert_ne!(encode("user", &subject_a, "POST", "/o", &key_a), encode("user", &subject_b, "POST", "/o", &key_b));
            // ...and so are the storage keys hashed from it.
            let a = StorageKey::new(Scope::User, Some(&subject_a), "POST", "/o", &key(&key_a));
            let b = StorageKey::new(Scope::User, Some(&subject_b), "POST", "/o", &key(&key_b));
            prop_assert_ne!(a, b);
        }
    }
}

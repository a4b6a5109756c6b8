//! Request fingerprints: what makes a retry "the same request".
//!
//! A fingerprint is SHA-256 over the method, the path as requested (path
//! parameters included), the query string, the host name, the media type
//! and the body.
//! JSON bodies (`application/json` and any `*/*+json` type) are
//! canonicalized first, so a client that re-serializes the same payload with
//! other key order or whitespace is still recognized; every other body
//! (and a JSON body that does not parse) counts byte for byte.
//!
//! The media type is the `Content-Type` without its parameters, lower-cased
//! (`type/subtype`): `application/json; charset=utf-8` and
//! `Application/JSON` are `application/json`, while
//! `application/merge-patch+json` is another request, as `text/plain` and a
//! form are. A missing `Content-Type` counts as an empty media type.
//!
//! A route's `fingerprint_headers` count too, each with all its values in
//! order: an absent header differs from an empty one.
//!
//! The host name is the `Host` as received, lower-cased and without its
//! port (`Shop.Example:8443` is `shop.example`), so that two tenants told
//! apart by host name are two requests, and one can never be replayed the
//! other's response. It is hashed last; left out when the configuration
//! says so, it is not hashed at all: such fingerprints are those of
//! earlier versions. A request that names no host (HTTP/1.0 without
//! `Host`) hashes an empty host name: a host of its own.
//!
//! Each part is length-prefixed before hashing, so no two different
//! requests can feed the hash the same bytes (`/a` + `b=1` vs `/ab` + `=1`).

use std::borrow::Cow;
use std::fmt;

use sha2::{Digest, Sha256};

use crate::canonical_json;

/// The SHA-256 fingerprint of a request.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

/// The parts of a request that a fingerprint covers.
#[derive(Debug, Clone, Copy)]
pub struct RequestParts<'a> {
    /// HTTP method, such as `POST`.
    pub method: &'a str,
    /// The path as requested, such as `/orders/A/payments`.
    pub path: &'a str,
    /// The query string without the `?`, empty if none.
    pub query: &'a str,
    /// The route's `fingerprint_headers`, each with its values in order
    /// (none when absent, which differs from one empty value).
    pub headers: &'a [(&'a str, Vec<&'a [u8]>)],
    /// The host the request was sent to, as received (the `Host` header,
    /// or the URI's authority), port and case as they come (empty when the
    /// request names none); `None` leaves the host out of the fingerprint.
    pub host: Option<&'a str>,
    /// The `Content-Type` header, if any.
    pub content_type: Option<&'a str>,
    /// The request body.
    pub body: &'a [u8],
}

impl Fingerprint {
    /// Computes the fingerprint of a request.
    pub fn of(parts: &RequestParts<'_>) -> Self {
        Hashed::of(parts, &[]).fingerprint
    }

    /// Builds a fingerprint from its 32 raw bytes (as a store keeps them).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The 32 raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lower-case hexadecimal form (64 characters).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses the hexadecimal form produced by [`Fingerprint::to_hex`].
    pub fn from_hex(text: &str) -> Option<Self> {
        let mut bytes = [0; 32];
        hex::decode_to_slice(text, &mut bytes).ok()?;
        Some(Self(bytes))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", &self.to_hex()[..16])
    }
}

/// A request's fingerprint, and the hash state it had before its host name
/// was added: the fingerprint the same request had without the host (as an
/// earlier version, or `fingerprint_host(false)`, kept it), for one more
/// SHA-256 block only when it is asked for.
pub(crate) struct Hashed {
    pub(crate) fingerprint: Fingerprint,
    #[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
    without_host: Option<Sha256>,
}

impl Hashed {
    /// Hashes `parts`, leaving the values at the JSON pointers `exclude`
    /// out of a JSON body (a route's `fingerprint_exclude`).
    pub(crate) fn of(parts: &RequestParts<'_>, exclude: &[&str]) -> Self {
        let mut hasher = Sha256::new();
        let mut field = |bytes: &[u8]| {
            hasher.update((bytes.len() as u64).to_be_bytes());
            hasher.update(bytes);
        };
        field(b"idem-fingerprint-v1");
        field(parts.method.as_bytes());
        field(parts.path.as_bytes());
        field(parts.query.as_bytes());
        // Only routes with fingerprint headers hash this part: the
        // fingerprints of every other route stay what they were.
        if !parts.headers.is_empty() {
            field(b"headers");
            for (name, values) in parts.headers {
                field(name.as_bytes());
                field(&(values.len() as u64).to_be_bytes());
                for value in values {
                    field(value);
                }
            }
        }
        // The media type tells what the bytes mean, JSON or not: the same
        // bytes as text and as a form, or the same document as
        // `application/json` and as `application/merge-patch+json`, are two
        // requests.
        let media_type = media_type(parts.content_type.unwrap_or(""));
        let mut body = |canonical: Option<&[u8]>| match canonical {
            Some(json) => {
                field(b"json");
                field(media_type.as_bytes());
                field(json);
            }
            None => {
                field(b"raw");
                field(media_type.as_bytes());
                field(parts.body);
            }
        };
        if is_json(&media_type) && !exclude.is_empty() {
            canonical_json::with_canonical(parts.body, |canonical| match canonical {
                Some(canonical) => body(Some(&excluded(canonical, exclude).unwrap_or_else(|| canonical.to_vec()))),
                None => body(None),
            })
        } else if is_json(&media_type) {
            canonical_json::with_canonical(parts.body, body)
        } else {
            body(None)
        }
        // The host last, and only when asked for: a configuration that
        // leaves it out keeps the fingerprints of earlier versions, and the
        // state before it is that fingerprint, kept for a record made
        // without it. A request that names no host hashes an empty one:
        // one host of its own, never the fingerprint without a host.
        let Some(host) = parts.host else {
            return Self { fingerprint: Fingerprint(hasher.finalize().into()), without_host: None };
        };
        let host = host_name(host);
        let without_host = hasher.clone();
        let mut field = |bytes: &[u8]| {
            hasher.update((bytes.len() as u64).to_be_bytes());
            hasher.update(bytes);
        };
        field(b"host");
        field(host.as_bytes());
        Self { fingerprint: Fingerprint(hasher.finalize().into()), without_host: Some(without_host) }
    }

    /// The fingerprint the request had without its host name, if its host
    /// was part of [`Hashed::fingerprint`] (once).
    #[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
    pub(crate) fn take_without_host(&mut self) -> Option<Fingerprint> {
        self.without_host.take().map(|hasher| Fingerprint(hasher.finalize().into()))
    }
}

/// The canonical document `canonical` without the values at `exclude`;
/// `None` (the whole document counts) if a pointer is malformed, which the
/// attribute and the layer's builder refuse before any request.
fn excluded(canonical: &[u8], exclude: &[&str]) -> Option<Vec<u8>> {
    let exclusions = match canonical_json::Exclusions::parse(exclude) {
        Ok(exclusions) => exclusions,
        Err(error) => {
            tracing::error!(%error, "a fingerprint_exclude pointer is malformed; the whole body counts");
            return None;
        }
    };
    let mut out = Vec::new();
    exclusions.apply(canonical, &mut out).then_some(out)
}

/// The essence of a `Content-Type` (`type/subtype`, lower case, no
/// parameters).
fn media_type(content_type: &str) -> Cow<'_, str> {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if essence.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(essence.to_ascii_lowercase())
    } else {
        Cow::Borrowed(essence)
    }
}

/// The host name of a `Host` value (or authority): without its port or a
/// trailing dot (`shop.example.` is `shop.example`), lower-cased. An IPv6
/// literal keeps its brackets.
fn host_name(host: &str) -> Cow<'_, str> {
    let host = host.trim();
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.find(']').map_or(host, |end| &host[..end + 2]),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(name.to_ascii_lowercase())
    } else {
        Cow::Borrowed(name)
    }
}

/// Whether a media type (as [`media_type`] gives it) is JSON:
/// `application/json` or `*/*+json`.
fn is_json(media_type: &str) -> bool {
    let Some((kind, subtype)) = media_type.split_once('/') else {
        return false;
    };
    (kind == "application" && subtype == "json") || subtype.ends_with("+json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts<'a>(path: &'a str, query: &'a str, ct: Option<&'a str>, body: &'a [u8]) -> RequestParts<'a> {
        RequestParts { method: "POST", path, query, headers: &[], host: None, content_type: ct, body }
    }

    #[test]
    fn the_host_name_counts_without_its_port_or_case() {
        let base = parts("/orders", "", None, b"x");
        let with = |host| Fingerprint::of(&RequestParts { host: Some(host), ..base });
        let shop = with("shop.example");
        assert_ne!(shop, with("other.example"), "two tenants are two requests");
        assert_ne!(shop, Fingerprint::of(&base), "a host differs from none");
        for same in ["Shop.Example", "shop.example:8443", "SHOP.EXAMPLE:80", " shop.example ", "shop.example.:443"] {
            assert_eq!(shop, with(same), "{same}");
        }
        assert_eq!(with("[::1]:8080"), with("[::1]"));
        assert_ne!(with("[::1]"), with("[::2]"));
        assert_eq!(host_name("[::1]:8080"), "[::1]");
        let mut hashed = Hashed::of(&RequestParts { host: Some("shop.example"), ..base }, &[]);
        assert_eq!(hashed.fingerprint, shop);
        assert_eq!(hashed.take_without_host(), Some(Fingerprint::of(&base)), "the fingerprint as it was without");
        assert_eq!(hashed.take_without_host(), None, "once");
        assert_eq!(Hashed::of(&base, &[]).take_without_host(), None, "no host, nothing else");
        // A request that names no host is a host of its own: never the
        // fingerprint without a host, which a record of an earlier version has.
        assert_ne!(with(""), Fingerprint::of(&base));
        assert_ne!(with(""), shop);
        assert_eq!(host_name("[::1"), "[::1", "a broken literal is kept as it is");
    }

    #[test]
    fn json_bodies_are_canonicalized() {
        let ct = Some("application/json; charset=utf-8");
        let a = Fingerprint::of(&parts("/orders", "", ct, br#"{"a":1,"b":[1,2]}"#));
        let b = Fingerprint::of(&parts("/orders", "", ct, b"{ \"b\": [1, 2],\n \"a\": 1 }"));
        assert_eq!(a, b);
        let c = Fingerprint::of(&parts("/orders", "", ct, br#"{"a":2,"b":[1,2]}"#));
        assert_ne!(a, c);
        let d = Fingerprint::of(&parts("/orders", "", ct, br#"{"a":1.0,"b":[1,2]}"#));
        assert_ne!(a, d, "numbers count as written");
    }

    #[test]
    fn the_media_type_of_json_counts() {
        let body = br#"{"a":1}"#;
        let json = Fingerprint::of(&parts("/orders", "", Some("application/json"), body));
        let patch = Fingerprint::of(&parts("/orders", "", Some("application/merge-patch+json"), body));
        assert_ne!(json, patch, "a merge patch is not the document it patches");
        let problem = Fingerprint::of(&parts("/orders", "", Some("application/problem+json"), body));
        assert_ne!(patch, problem);
        // The media type without its parameters, lower-cased, is what counts.
        for same in [
            "application/json; charset=utf-8",
            "Application/JSON",
            "application/json;profile=\"x\"",
            " application/json ",
        ] {
            assert_eq!(json, Fingerprint::of(&parts("/orders", "", Some(same), body)), "{same}");
        }
        // JSON bytes sent as text count byte for byte, apart from JSON.
        let text = Fingerprint::of(&parts("/orders", "", Some("text/plain"), body));
        assert_ne!(json, text);
    }

    #[test]
    fn other_bodies_count_byte_for_byte() {
        let ct = Some("text/plain");
        let a = Fingerprint::of(&parts("/orders", "", ct, br#"{"a":1,"b":2}"#));
        let b = Fingerprint::of(&parts("/orders", "", ct, br#"{"b":2,"a":1}"#));
        assert_ne!(a, b);
        let form =
            Fingerprint::of(&parts("/orders", "", Some("application/x-www-form-urlencoded"), br#"{"a":1,"b":2}"#));
        assert_ne!(a, form, "the same bytes as another media type are another request");
        let charset = Fingerprint::of(&parts("/orders", "", Some("Text/Plain; charset=utf-8"), br#"{"a":1,"b":2}"#));
        assert_eq!(a, charset, "only the media type's essence counts");
    }

    #[test]
    fn path_query_and_method_matter() {
        let base = parts("/orders/A/payments", "", None, b"x");
        let fp = Fingerprint::of(&base);
        assert_ne!(fp, Fingerprint::of(&RequestParts { path: "/orders/B/payments", ..base }));
        assert_ne!(fp, Fingerprint::of(&RequestParts { query: "a=1", ..base }));
        assert_ne!(fp, Fingerprint::of(&RequestParts { method: "PUT", ..base }));
        assert_ne!(fp, Fingerprint::of(&RequestParts { body: b"y", ..base }));
        // Length prefixes keep field boundaries apart.
        let a = Fingerprint::of(&parts("/a", "b=1", None, b""));
        let b = Fingerprint::of(&parts("/ab", "=1", None, b""));
        assert_ne!(a, b);
    }

    #[test]
    fn fingerprint_headers_count_absent_empty_and_order() {
        let with =
            |headers: &[(&str, Vec<&[u8]>)]| Fingerprint::of(&RequestParts { headers, ..parts("/o", "", None, b"x") });
        let none = Fingerprint::of(&parts("/o", "", None, b"x"));
        let absent = with(&[("x-account-id", vec![])]);
        let empty = with(&[("x-account-id", vec![b""])]);
        let a = with(&[("x-account-id", vec![b"a"])]);
        let b = with(&[("x-account-id", vec![b"b"])]);
        let ab = with(&[("x-account-id", vec![b"a", b"b"])]);
        let ba = with(&[("x-account-id", vec![b"b", b"a"])]);
        let all = [none, absent, empty, a, b, ab, ba];
        for (i, x) in all.iter().enumerate() {
            for y in &all[i + 1..] {
                assert_ne!(x, y);
            }
        }
        assert_eq!(a, with(&[("x-account-id", vec![b"a"])]));
        // Names and values stay apart.
        assert_ne!(with(&[("x-a", vec![b"b"])]), with(&[("x-ab", vec![])]));
    }

    /// Known answers, computed apart from this code (Python's hashlib over
    /// the length-prefixed fields): stored records keep matching across
    /// versions, and a route without fingerprint headers hashes exactly
    /// what it hashed before they existed.
    #[test]
    fn known_answers_are_pinned() {
        let body = br#"{ "b": [true, null], "a": 1 }"#;
        let base = RequestParts { query: "a=1", ..parts("/orders", "", Some("application/json"), body) };
        let plain = Fingerprint::of(&base);
        assert_eq!(plain.to_hex(), "f11ead52f34e9f39c7308694b64653815f4288aeceec57b3f0846072ab761092");
        let headers: &[(&str, Vec<&[u8]>)] = &[("x-account-id", vec![b"a", b""])];
        let with = Fingerprint::of(&RequestParts { headers, ..base });
        assert_eq!(with.to_hex(), "b71aeab4679ef01a27229262fdfbdc53acec3c70b922c9faf1917383b64484cb");
    }

    /// Long fields and large bodies hash as their length-prefixed bytes.
    #[test]
    fn long_fields_hash_as_fed_one_by_one() {
        let reference = |fields: &[&[u8]]| {
            let mut hasher = Sha256::new();
            for field in fields {
                hasher.update((field.len() as u64).to_be_bytes());
                hasher.update(field);
            }
            hex::encode(hasher.finalize())
        };
        for (path, body) in [(200, 10), (250, 300), (300, 1000), (40, 255), (1, 5000)] {
            let path = format!("/{}", "p".repeat(path));
            let body = vec![b'x'; body];
            let fp = Fingerprint::of(&parts(&path, "q=1", Some("text/plain"), &body));
            let fields: [&[u8]; 7] =
                [b"idem-fingerprint-v1", b"POST", path.as_bytes(), b"q=1", b"raw", b"text/plain", &body];
            assert_eq!(fp.to_hex(), reference(&fields), "path {} body {}", path.len(), body.len());
        }
    }

    #[test]
    fn invalid_json_falls_back_to_raw_bytes() {
        let ct = Some("application/json");
        let a = Fingerprint::of(&parts("/o", "", ct, b"{not json"));
        let b = Fingerprint::of(&parts("/o", "", ct, b"{not json "));
        assert_ne!(a, b);
        assert_eq!(a, Fingerprint::of(&parts("/o", "", ct, b"{not json")));
    }

    #[test]
    fn hex_round_trips() {
        let fp = Fingerprint::of(&parts("/o", "", None, b""));
        assert_eq!(Fingerprint::from_hex(&fp.to_hex()), Some(fp));
        assert_eq!(Fingerprint::from_hex("zz"), None);
    }
}

//! Target `canonical_json`: the JSON canonicalizer behind fingerprints
//! (§4.4 of the contract), against serde_json.
//!
//! Properties, for any bytes `x`:
//!
//! - **differential**: `x` canonicalizes if and only if serde_json reads it
//!   (apart from documents nested deeper than the canonicalizer's limit),
//!   and then to the same bytes as serde_json's re-serialization of `x`
//!   (strings decoded and re-escaped by serde_json, members in their order,
//!   numbers as written: the canonical form keeps `1.10` apart from `1.1`);
//! - **idempotent**: `canonical(canonical(x)) == canonical(x)`;
//! - **meaning kept**: serde_json reads `canonical(x)` as the same value as
//!   `x`, and every object in it has its members sorted by key.

use idem_runtime::__fuzzing::{MAX_DEPTH, canonicalize};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// Checks one body.
pub fn check(data: &[u8]) {
    let canonical = canonicalize(data);
    let shown = String::from_utf8_lossy(data);
    let read = std::str::from_utf8(data).ok().and_then(|text| serde_json::from_str::<&RawValue>(text).ok());
    let reserialized = match read {
        Some(raw) if depth(raw.get().as_bytes()) > MAX_DEPTH => {
            assert!(canonical.is_none(), "{shown}: nested deeper than {MAX_DEPTH}, yet canonicalized");
            return;
        }
        // `None` when a string in it does not decode (a lone surrogate).
        Some(raw) => reserialize(raw),
        None => None,
    };
    match (&canonical, &reserialized) {
        (Some(canonical), Some(reserialized)) => {
            let again = canonicalize(reserialized.as_bytes());
            assert_eq!(again.as_deref(), Some(canonical.as_slice()), "{shown}: serde_json writes it {reserialized}");
        }
        (Some(_), None) => panic!("{shown}: canonicalized, but serde_json does not read it"),
        (None, Some(reserialized)) => panic!("{shown}: serde_json reads it ({reserialized}), not canonicalized"),
        (None, None) => {}
    }
    let Some(canonical) = canonical else { return };
    assert_eq!(canonicalize(&canonical).as_deref(), Some(canonical.as_slice()), "{shown}: not idempotent");
    if let (Ok(before), Ok(after)) =
        (serde_json::from_slice::<serde_json::Value>(data), serde_json::from_slice::<serde_json::Value>(&canonical))
    {
        assert_eq!(before, after, "{shown}: the canonical form means something else");
    }
    if let Ok(raw) = serde_json::from_slice::<&RawValue>(&canonical) {
        assert!(sorted(raw), "{shown}: members out of order in {}", String::from_utf8_lossy(&canonical));
    }
}

/// `body` as serde_json reads and writes it (compact, strings re-escaped
/// its way, numbers as written), if serde_json reads it.
pub(crate) fn reserialized(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    reserialize(serde_json::from_str(text).ok()?)
}

/// The document as serde_json reads and writes it, numbers kept as
/// written; `None` if a string in it does not decode.
fn reserialize(raw: &RawValue) -> Option<String> {
    let mut out = String::with_capacity(raw.get().len());
    write(raw, &mut out).ok()?;
    Some(out)
}

/// Writes one value: members in their order, strings as serde_json
/// escapes them, everything else as written (serde_json has checked it).
fn write(raw: &RawValue, out: &mut String) -> serde_json::Result<()> {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'{') => {
            let Members(members) = serde_json::from_str(text)?;
            out.push('{');
            for (index, (name, value)) in members.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(&name)?);
                out.push(':');
                write(value, out)?;
            }
            out.push('}');
        }
        Some(b'[') => {
            let items: Vec<&RawValue> = serde_json::from_str(text)?;
            out.push('[');
            for (index, item) in items.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write(item, out)?;
            }
            out.push(']');
        }
        Some(b'"') => out.push_str(&serde_json::to_string(&serde_json::from_str::<String>(text)?)?),
        _ => out.push_str(text),
    }
    Ok(())
}

/// Whether every object in `raw` has its members in key order.
fn sorted(raw: &RawValue) -> bool {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'{') => serde_json::from_str::<Members>(text).is_ok_and(|Members(members)| {
            members.windows(2).all(|pair| pair[0].0 <= pair[1].0) && members.iter().all(|(_, value)| sorted(value))
        }),
        Some(b'[') => serde_json::from_str::<Vec<&RawValue>>(text).is_ok_and(|items| items.into_iter().all(sorted)),
        _ => true,
    }
}

/// Nesting depth of a JSON text (one that serde_json or the canonicalizer read).
fn depth(json: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0, false, false);
    for &byte in json {
        match (in_string, escaped, byte) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (true, false, b'"') | (false, _, b'"') => in_string = !in_string,
            (false, _, b'[' | b'{') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (false, _, b']' | b'}') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// An object's members in order, duplicates kept.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Members<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor<'a>(std::marker::PhantomData<&'a ()>);

        impl<'de: 'a, 'a> Visitor<'de> for MembersVisitor<'a> {
            type Value = Members<'a>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'a>, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, &'de RawValue>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }

        deserializer.deserialize_map(MembersVisitor(std::marker::PhantomData))
    }
}

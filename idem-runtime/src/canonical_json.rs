//! JSON canonicalization for fingerprints.
//!
//! Two bodies that a JSON parser reads as the same document produce the same
//! canonical bytes: object members are sorted by key, insignificant
//! whitespace is dropped, strings are re-escaped one way. Numbers are kept
//! exactly as written (`1.10` stays `1.10`): for money, `1.1` and `1.10` may
//! well be meant differently, and nothing here rounds through `f64`.
//!
//! Anything that is not one JSON document (or nests deeper than
//! [`MAX_DEPTH`]) yields `None`, and the caller hashes the raw bytes instead.

use std::cell::RefCell;

mod exclude;

pub(crate) use exclude::Exclusions;
#[cfg(feature = "axum")]
pub(crate) use exclude::check as check_exclusions;

/// Deepest nesting canonicalized; deeper documents are hashed as raw bytes.
pub const MAX_DEPTH: usize = 128;

/// Canonical form of `body`, or `None` if it is not a single JSON document.
#[cfg_attr(
    not(any(test, feature = "fuzzing")),
    allow(dead_code, reason = "the tests' and fuzz targets' entry point; requests use with_canonical")
)]
pub fn canonicalize(body: &[u8]) -> Option<Vec<u8>> {
    with_canonical(body, |canonical| canonical.map(<[u8]>::to_vec))
}

/// Calls `use_it` with the canonical form of `body` (`None` if it is not a
/// single JSON document), written into this thread's reused buffers: no
/// allocation per request once they have grown.
pub(crate) fn with_canonical<R>(body: &[u8], use_it: impl FnOnce(Option<&[u8]>) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => {
            let result = use_it(scratch.canonicalize(body));
            scratch.trim();
            result
        }
        // Only if `use_it` itself canonicalizes: fresh buffers then.
        Err(_) => use_it(Scratch::default().canonicalize(body)),
    })
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Buffers kept by a thread between canonicalizations.
#[derive(Default)]
struct Scratch {
    out: Vec<u8>,
    members: Vec<Member>,
    /// Where an object's members wait while they are written again in key
    /// order; used as a stack, like `members`.
    moved: Vec<u8>,
    /// Decoded keys (those with escapes), as [`Key::Decoded`] ranges.
    keys: String,
}

/// Largest buffer a thread keeps between two requests; a larger one (a
/// large body) is freed after use.
const KEPT_CAPACITY: usize = 64 << 10;

impl Scratch {
    fn canonicalize(&mut self, body: &[u8]) -> Option<&[u8]> {
        std::str::from_utf8(body).ok()?;
        self.out.clear();
        self.out.reserve(body.len());
        self.members.clear();
        self.moved.clear();
        self.keys.clear();
        let mut parser = Parser {
            bytes: body,
            pos: 0,
            run: 0,
            out: &mut self.out,
            members: &mut self.members,
            moved: &mut self.moved,
            keys: &mut self.keys,
        };
        parser.skip_ws();
        parser.value(0)?;
        parser.skip_ws();
        parser.flush();
        (parser.pos == body.len()).then_some(self.out.as_slice())
    }

    fn trim(&mut self) {
        if self.out.capacity() > KEPT_CAPACITY
            || self.moved.capacity() > KEPT_CAPACITY
            || self.keys.capacity() > KEPT_CAPACITY
        {
            *self = Self::default();
        }
        self.members.clear();
        self.members.shrink_to(KEPT_CAPACITY / 64);
    }
}

/// An object member as written in the canonical form: its key, and where
/// the whole member (`"key":value`) starts and ends, relative to the
/// object's start.
#[derive(Clone, Copy)]
struct Member {
    key: Key,
    /// The key's first eight bytes (see [`prefix`]), compared first.
    prefix: u64,
    text: (usize, usize),
}

/// A member's key, decoded: a slice of the body when it has no escapes,
/// else a range of the decoded keys.
#[derive(Clone, Copy)]
enum Key {
    Raw(usize, usize),
    Decoded(usize, usize),
}

impl Key {
    #[inline]
    fn get<'t>(self, body: &'t [u8], keys: &'t str) -> &'t [u8] {
        match self {
            Self::Raw(start, end) => &body[start..end],
            Self::Decoded(start, end) => &keys.as_bytes()[start..end],
        }
    }
}

/// A key's first eight bytes as a big-endian word, zero-padded: the order
/// of two prefixes is the order of the keys unless they are equal.
#[inline]
fn prefix(key: &[u8]) -> u64 {
    match key.first_chunk::<8>() {
        Some(word) => u64::from_be_bytes(*word),
        // Byte by byte: a copy of a length not known here would be a
        // library call, and its result read back through memory.
        None => key.iter().enumerate().fold(0, |word, (i, &b)| word | u64::from(b) << (56 - 8 * i)),
    }
}

/// Byte-wise order of two members' keys, as `<[u8]>::cmp` gives it: their
/// prefixes first, without a library call for the short keys most objects
/// have.
#[inline]
fn key_order(a: &Member, b: &Member, body: &[u8], keys: &str) -> std::cmp::Ordering {
    match a.prefix.cmp(&b.prefix) {
        std::cmp::Ordering::Equal => {
            let (a, b) = (a.key.get(body, keys), b.key.get(body, keys));
            // Zero padding makes `ab` and `ab\0` equal prefixes; the longer
            // one comes after, as a proper prefix does.
            if a.len() > 8 && b.len() > 8 { a[8..].cmp(&b[8..]) } else { a.len().cmp(&b.len()) }
        }
        order => order,
    }
}

/// Objects with at most this many members are sorted by insertion.
const INSERTION_SORTED: usize = 16;

/// Bytes that end the plain run of a string: the quote, a backslash, and
/// the control characters JSON requires escaped.
static STRING_STOP: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Reads a document and writes its canonical form.
///
/// What is already canonical as written (every token but a string with
/// escapes, and the punctuation between them) is not copied token by
/// token: the bytes from `run` to `pos` are, whenever something else must
/// be written (a string re-escaped, an object reordered) or skipped
/// (whitespace), and at the end. Positions in the canonical form are
/// therefore counted as [`Parser::written`] gives them.
struct Parser<'a, 's> {
    bytes: &'a [u8],
    pos: usize,
    /// Where the body's bytes not yet copied to `out` start; all of them
    /// up to `pos` are canonical as they are.
    run: usize,
    /// The canonical form, as written so far.
    out: &'s mut Vec<u8>,
    /// The members of the objects being read, innermost last: each object
    /// uses the part above where it started (no buffer per object).
    members: &'s mut Vec<Member>,
    moved: &'s mut Vec<u8>,
    keys: &'s mut String,
}

impl Parser<'_, '_> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    /// Length of the canonical form so far, the pending run included.
    #[inline]
    fn written(&self) -> usize {
        self.out.len() + (self.pos - self.run)
    }

    /// Copies the pending run to `out`.
    #[inline]
    fn flush(&mut self) {
        self.out.extend_from_slice(&self.bytes[self.run..self.pos]);
        self.run = self.pos;
    }

    #[inline]
    fn skip_ws(&mut self) {
        if let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.flush();
            self.pos += 1;
            while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
                self.pos += 1;
            }
            self.run = self.pos;
        }
    }

    #[inline]
    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.pos += 1)
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => self.string().map(drop),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number(),
        }
    }

    #[inline]
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.bytes[self.pos..].starts_with(word).then_some(())?;
        self.pos += word.len();
        Some(())
    }

    /// Reads the members as they come, then, unless their keys already
    /// come in order, lays them out again in key order.
    fn object(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        let start = self.written();
        self.pos += 1; // `{`
        let first = self.members.len();
        let mut sorted = true;
        self.skip_ws();
        if self.eat(b'}').is_none() {
            loop {
                self.skip_ws();
                let from = self.written() - start;
                if self.peek()? != b'"' {
                    return None;
                }
                let key = self.string()?;
                self.skip_ws();
                self.eat(b':')?;
                self.skip_ws();
                self.value(depth)?;
                let member = Member {
                    key,
                    prefix: prefix(key.get(self.bytes, self.keys)),
                    text: (from, self.written() - start),
                };
                if sorted && let Some(last) = self.members[first..].last() {
                    sorted = key_order(last, &member, self.bytes, self.keys).is_le();
                }
                self.members.push(member);
                self.skip_ws();
                if self.eat(b',').is_none() {
                    self.eat(b'}')?;
                    break;
                }
            }
        }
        if !sorted {
            self.flush();
            self.reorder(start, first);
        }
        self.members.truncate(first);
        Some(())
    }

    /// Writes the object at `start` of the canonical form again, its members
    /// (from `first` on) in key order; equal keys keep their order.
    fn reorder(&mut self, start: usize, first: usize) {
        let (bytes, keys) = (self.bytes, &*self.keys);
        let members = &mut self.members[first..];
        if members.len() <= INSERTION_SORTED {
            for i in 1..members.len() {
                let mut j = i;
                while j > 0 && key_order(&members[j - 1], &members[j], bytes, keys).is_gt() {
                    members.swap(j - 1, j);
                    j -= 1;
                }
            }
        } else {
            members.sort_by(|a, b| key_order(a, b, bytes, keys));
        }
        let base = self.moved.len();
        self.moved.extend_from_slice(&self.out[start..]);
        self.out.truncate(start + 1);
        for (index, member) in members.iter().enumerate() {
            if index > 0 {
                self.out.push(b',');
            }
            self.out.extend_from_slice(&self.moved[base + member.text.0..base + member.text.1]);
        }
        self.out.push(b'}');
        self.moved.truncate(base);
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.pos += 1; // `[`
        self.skip_ws();
        if self.eat(b']').is_none() {
            loop {
                self.skip_ws();
                self.value(depth)?;
                self.skip_ws();
                if self.eat(b',').is_none() {
                    self.eat(b']')?;
                    break;
                }
            }
        }
        Some(())
    }

    /// Reads a JSON string token and writes it in canonical form: as it
    /// is when it has no escapes (nothing in it needs one), else decoded
    /// (by serde_json) and escaped again the way serde_json escapes.
    /// Answers its decoded contents, as a key.
    #[inline]
    fn string(&mut self) -> Option<Key> {
        let start = self.pos;
        self.pos += 1; // `"`
        let mut escaped = false;
        loop {
            let rest = self.bytes.get(self.pos..)?;
            self.pos += rest.iter().position(|&b| STRING_STOP[usize::from(b)])?;
            match self.bytes[self.pos] {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    self.pos += 2;
                }
                // Control characters must be escaped in JSON.
                _ => return None,
            }
        }
        self.pos += 1;
        if !escaped {
            return Some(Key::Raw(start + 1, self.pos - 1));
        }
        let token = &self.bytes[start..self.pos];
        let decoded = serde_json::from_slice::<String>(token).ok()?;
        // What came before the string, then the string re-escaped.
        let end = self.pos;
        self.pos = start;
        self.flush();
        self.pos = end;
        self.run = end;
        write_string(self.out, &decoded);
        let from = self.keys.len();
        self.keys.push_str(&decoded);
        Some(Key::Decoded(from, self.keys.len()))
    }

    /// A JSON number, validated against the grammar and kept as written.
    #[inline]
    fn number(&mut self) -> Option<()> {
        let _ = self.eat(b'-');
        match self.peek()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat(b'.').is_some() {
            self.peek().filter(u8::is_ascii_digit)?;
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.peek().filter(u8::is_ascii_digit)?;
            self.digits();
        }
        Some(())
    }

    #[inline]
    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
    }
}

/// Writes `value` as a JSON string, escaped the way serde_json escapes.
fn write_string(out: &mut Vec<u8>, value: &str) {
    if !value.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        // Nothing to escape: serde_json would write the same bytes.
        out.push(b'"');
        out.extend_from_slice(value.as_bytes());
        out.push(b'"');
    } else if let Ok(encoded) = serde_json::to_vec(value) {
        // Serializing a `&str` cannot fail.
        out.extend_from_slice(&encoded);
    }
}

#[cfg(test)]
#[path = "canonical_json_stability.rs"]
mod stability_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(text: &str) -> Option<String> {
        canonicalize(text.as_bytes()).map(|bytes| String::from_utf8(bytes).unwrap())
    }

    #[test]
    fn sorts_keys_and_drops_whitespace() {
        assert_eq!(
            canon(" { \"b\" : [1, 2, {\"z\":null,\"a\":true}], \"a\": \"x\" }\n"),
            Some(r#"{"a":"x","b":[1,2,{"a":true,"z":null}]}"#.into())
        );
    }

    #[test]
    fn keeps_numbers_as_written() {
        assert_eq!(
            canon("[1.10, 1e3, -0, 12345678901234567890123]").as_deref(),
            Some("[1.10,1e3,-0,12345678901234567890123]")
        );
    }

    #[test]
    fn plain_and_escaped_strings_agree_with_serde_json() {
        for text in [r#""plain""#, r#""tab\tquote\"""#, r#""\u00e9t\u00e9""#, r#""été""#, r#""a/b""#, r#""\/""#] {
            let value: String = serde_json::from_str(text).unwrap();
            assert_eq!(canon(text), Some(serde_json::to_string(&value).unwrap()), "{text}");
        }
        assert_eq!(canon("\"raw\ttab\""), None, "a raw control character is not JSON");
    }

    #[test]
    fn normalizes_string_escapes() {
        assert_eq!(canon(r#""\u0041\/""#), canon(r#""A/""#));
        assert_eq!(canon(r#"{"\u0062":1,"a":2}"#), Some(r#"{"a":2,"b":1}"#.into()));
    }

    #[test]
    fn refuses_what_is_not_one_document() {
        for bad in ["", "{", "[1,]", "{\"a\"}", "01", "1.", "-", "tru", "1 2", "\"\\x\"", "{} x"] {
            assert_eq!(canon(bad), None, "{bad:?}");
        }
        assert_eq!(canonicalize(&[0xff, b'1']), None);
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let deep = "[".repeat(100_000);
        assert_eq!(canon(&deep), None);
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(canon(&ok).is_some());
        let too_deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(canon(&too_deep), None);
    }

    /// A JSON value with integer numbers (kept as written either way) and
    /// members written in a shuffled order, with whitespace.
    pub(super) fn written(value: &serde_json::Value, seed: &mut u64) -> String {
        let mut next = || {
            *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (*seed >> 33) as usize
        };
        match value {
            serde_json::Value::Object(map) => {
                let mut members: Vec<_> = map.iter().collect();
                for i in (1..members.len()).rev() {
                    members.swap(i, next() % (i + 1));
                }
                let parts: Vec<String> = members
                    .into_iter()
                    .map(|(k, v)| format!("{} : {}", serde_json::to_string(k).unwrap(), written(v, seed)))
                    .collect();
                format!("{{ {} }}", parts.join(" ,\n"))
            }
            serde_json::Value::Array(items) => {
                format!("[ {} ]", items.iter().map(|v| written(v, seed)).collect::<Vec<_>>().join(", "))
            }
            other => serde_json::to_string(other).unwrap(),
        }
    }

    pub(super) fn json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(|n| serde_json::json!(n)),
            "\\PC{0,8}".prop_map(serde_json::Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
                proptest::collection::btree_map("\\PC{0,6}", inner, 0..6)
                    .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Any member order and whitespace gives serde_json's sorted,
        /// compact form (integers only: serde_json rewrites other numbers).
        #[test]
        fn any_order_and_spacing_is_the_sorted_compact_form(value in json(), seed in proptest::prelude::any::<u64>()) {
            let mut seed = seed;
            let text = written(&value, &mut seed);
            proptest::prop_assert_eq!(canon(&text), Some(serde_json::to_string(&value).unwrap()), "{}", text);
        }
    }
}

//! Members left out of a canonical document (`fingerprint_exclude`): the
//! values at a route's JSON pointers, removed from the canonical form
//! before it is hashed.
//!
//! The walk reads the canonical form, never the body as sent: it is compact
//! and each string in it has one spelling, so a pointer's token matches a
//! member's key by comparing the key with the token written the same way.
//! A pointer that names nothing in a document removes nothing: a document
//! without the excluded members hashes as it did before they were excluded.

use super::write_string;

/// Most pointers one route may exclude (the walk tracks them as bits).
pub(crate) const MAX_EXCLUDED: usize = 64;

/// One step of a pointer: an object member's key, as the canonical form
/// writes it (quoted), and the array index it also names, if it is one.
struct Token {
    key: Vec<u8>,
    index: Option<usize>,
}

/// Parsed JSON pointers, to be left out of canonical documents.
pub(crate) struct Exclusions {
    pointers: Vec<Vec<Token>>,
}

/// Why a text is not a pointer that can be excluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PointerError {
    /// The empty pointer names the whole document: every body would be
    /// one request.
    Whole,
    /// A pointer starts with `/`.
    NoSlash,
    /// `~` is followed by something other than `0` or `1`.
    BadEscape,
    /// More than [`MAX_EXCLUDED`] pointers.
    TooMany,
}

impl std::fmt::Display for PointerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Whole => "the empty pointer names the whole body, which would make every body the same request",
            Self::NoSlash => "a JSON pointer starts with `/` (\"/attempt\", \"/meta/sent_at\")",
            Self::BadEscape => "in a JSON pointer `~` must be followed by `0` (for `~`) or `1` (for `/`)",
            Self::TooMany => "a route may exclude at most 64 pointers",
        })
    }
}

impl Exclusions {
    /// Parses `pointers` (RFC 6901, each naming a member or an element).
    pub(crate) fn parse(pointers: &[&str]) -> Result<Self, PointerError> {
        if pointers.len() > MAX_EXCLUDED {
            return Err(PointerError::TooMany);
        }
        let pointers = pointers.iter().map(|pointer| tokens(pointer)).collect::<Result<_, _>>()?;
        Ok(Self { pointers })
    }

    /// The canonical document `canonical` without the excluded values,
    /// written to `out`; `false` (and `out` unspecified) if `canonical` is
    /// not a canonical document, which does not happen.
    pub(crate) fn apply(&self, canonical: &[u8], out: &mut Vec<u8>) -> bool {
        out.clear();
        out.reserve(canonical.len());
        let live = if self.pointers.len() == MAX_EXCLUDED { u64::MAX } else { (1 << self.pointers.len()) - 1 };
        let mut walk = Walk { bytes: canonical, pos: 0, out, pointers: &self.pointers };
        walk.value(live, 0).is_some() && walk.pos == canonical.len()
    }
}

/// Checks a route's `fingerprint_exclude` as the attribute does: each a
/// pointer, at most [`MAX_EXCLUDED`], none twice or inside another.
#[cfg_attr(not(any(test, feature = "axum")), allow(dead_code, reason = "the layer's builder checks with it"))]
pub(crate) fn check(pointers: &[&str]) -> Result<(), String> {
    for (at, pointer) in pointers.iter().enumerate() {
        tokens(pointer).map_err(|error| format!("`{pointer}`: {error}"))?;
        for earlier in &pointers[..at] {
            if earlier == pointer {
                return Err(format!("`{pointer}` is excluded twice"));
            }
            let (outer, inner) = if pointer.len() < earlier.len() { (pointer, earlier) } else { (earlier, pointer) };
            if inner.strip_prefix(*outer).is_some_and(|rest| rest.starts_with('/')) {
                return Err(format!("`{inner}` is inside `{outer}`, which is excluded whole"));
            }
        }
    }
    if pointers.len() > MAX_EXCLUDED {
        return Err(PointerError::TooMany.to_string());
    }
    Ok(())
}

/// The tokens of one pointer.
fn tokens(pointer: &str) -> Result<Vec<Token>, PointerError> {
    if pointer.is_empty() {
        return Err(PointerError::Whole);
    }
    let rest = pointer.strip_prefix('/').ok_or(PointerError::NoSlash)?;
    rest.split('/')
        .map(|raw| {
            let mut decoded = String::with_capacity(raw.len());
            let mut chars = raw.chars();
            while let Some(ch) = chars.next() {
                match (ch, ch == '~') {
                    (_, false) => decoded.push(ch),
                    (_, true) => match chars.next() {
                        Some('0') => decoded.push('~'),
                        Some('1') => decoded.push('/'),
                        _ => return Err(PointerError::BadEscape),
                    },
                }
            }
            // RFC 6901: an index is `0` or digits without a leading zero.
            let index = (decoded == "0" || (!decoded.starts_with('0') && decoded.bytes().all(|b| b.is_ascii_digit())))
                .then(|| decoded.parse().ok())
                .flatten();
            let mut key = Vec::with_capacity(decoded.len() + 2);
            write_string(&mut key, &decoded);
            Ok(Token { key, index })
        })
        .collect()
}

/// A walk over a canonical document, copying what is kept.
struct Walk<'a> {
    bytes: &'a [u8],
    pos: usize,
    out: &'a mut Vec<u8>,
    pointers: &'a [Vec<Token>],
}

impl Walk<'_> {
    /// Copies the value at `pos`; `live` holds the pointers whose first
    /// `depth` tokens name the path to it.
    fn value(&mut self, live: u64, depth: usize) -> Option<()> {
        match self.bytes.get(self.pos)? {
            b'{' if live != 0 => self.object(live, depth),
            b'[' if live != 0 => self.array(live, depth),
            _ => {
                let start = self.pos;
                self.skip()?;
                self.out.extend_from_slice(&self.bytes[start..self.pos]);
                Some(())
            }
        }
    }

    fn object(&mut self, live: u64, depth: usize) -> Option<()> {
        self.pos += 1;
        self.out.push(b'{');
        let mut first = true;
        while *self.bytes.get(self.pos)? != b'}' {
            let start = self.pos;
            self.string()?;
            let key = &self.bytes[start..self.pos];
            self.expect(b':')?;
            let (gone, deeper) = self.split(live, depth, |token| token.key == key);
            if gone {
                self.skip()?;
            } else {
                if !first {
                    self.out.push(b',');
                }
                first = false;
                self.out.extend_from_slice(key);
                self.out.push(b':');
                self.value(deeper, depth + 1)?;
            }
            if self.bytes.get(self.pos) == Some(&b',') {
                self.pos += 1;
            }
        }
        self.pos += 1;
        self.out.push(b'}');
        Some(())
    }

    fn array(&mut self, live: u64, depth: usize) -> Option<()> {
        self.pos += 1;
        self.out.push(b'[');
        let mut first = true;
        let mut index = 0;
        while *self.bytes.get(self.pos)? != b']' {
            let (gone, deeper) = self.split(live, depth, |token| token.index == Some(index));
            if gone {
                self.skip()?;
            } else {
                if !first {
                    self.out.push(b',');
                }
                first = false;
                self.value(deeper, depth + 1)?;
            }
            index += 1;
            if self.bytes.get(self.pos) == Some(&b',') {
                self.pos += 1;
            }
        }
        self.pos += 1;
        self.out.push(b']');
        Some(())
    }

    /// Of the `live` pointers whose token at `depth` names this member:
    /// whether one ends here (the member goes), and those that go deeper.
    fn split(&self, live: u64, depth: usize, names: impl Fn(&Token) -> bool) -> (bool, u64) {
        let (mut gone, mut deeper) = (false, 0);
        for (bit, pointer) in self.pointers.iter().enumerate() {
            if live & (1 << bit) == 0 || !pointer.get(depth).is_some_and(&names) {
                continue;
            }
            if pointer.len() == depth + 1 {
                gone = true;
            } else {
                deeper |= 1 << bit;
            }
        }
        (gone, deeper)
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (*self.bytes.get(self.pos)? == byte).then(|| self.pos += 1)
    }

    /// Moves past a string token.
    fn string(&mut self) -> Option<()> {
        self.expect(b'"')?;
        loop {
            match *self.bytes.get(self.pos)? {
                b'"' => break,
                b'\\' => self.pos += 2,
                _ => self.pos += 1,
            }
        }
        self.pos += 1;
        Some(())
    }

    /// Moves past one value (canonical: no whitespace).
    fn skip(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match *self.bytes.get(self.pos)? {
                b'"' => self.string()?,
                b'{' | b'[' => {
                    depth += 1;
                    self.pos += 1;
                }
                b'}' | b']' => {
                    depth = depth.checked_sub(1)?;
                    self.pos += 1;
                }
                _ => {
                    // A number or a literal, or the `,` and `:` inside a
                    // container.
                    let end = self.bytes[self.pos..].iter().position(|b| matches!(b, b',' | b'}' | b']' | b':'));
                    let end = end.map_or(self.bytes.len(), |end| self.pos + end);
                    self.pos = if depth == 0 { end } else { end.max(self.pos + 1) };
                }
            }
            if depth == 0 {
                return Some(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn without(body: &str, pointers: &[&str]) -> String {
        let canonical = super::super::canonicalize(body.as_bytes()).expect("a JSON document");
        let mut out = Vec::new();
        assert!(Exclusions::parse(pointers).expect("pointers").apply(&canonical, &mut out), "{body}");
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn removes_members_and_elements() {
        let body = r#"{"amount":5,"attempt":3,"meta":{"sent_at":"x","id":1},"items":[1,{"n":2},3]}"#;
        assert_eq!(without(body, &["/attempt"]), r#"{"amount":5,"items":[1,{"n":2},3],"meta":{"id":1,"sent_at":"x"}}"#);
        assert_eq!(
            without(body, &["/meta/sent_at", "/attempt"]),
            r#"{"amount":5,"items":[1,{"n":2},3],"meta":{"id":1}}"#
        );
        assert_eq!(without(body, &["/meta"]), r#"{"amount":5,"attempt":3,"items":[1,{"n":2},3]}"#);
        assert_eq!(
            without(body, &["/items/1/n"]),
            r#"{"amount":5,"attempt":3,"items":[1,{},3],"meta":{"id":1,"sent_at":"x"}}"#
        );
        assert_eq!(
            without(body, &["/items/0"]),
            r#"{"amount":5,"attempt":3,"items":[{"n":2},3],"meta":{"id":1,"sent_at":"x"}}"#
        );
        assert_eq!(without(r#"{"a":1}"#, &["/a"]), "{}");
        assert_eq!(without(r#"[1,2]"#, &["/0", "/1"]), "[]");
    }

    #[test]
    fn a_pointer_that_names_nothing_changes_nothing() {
        for (body, pointers) in [
            (r#"{"a":{"b":1}}"#, &["/x"][..]),
            (r#"{"a":{"b":1}}"#, &["/a/b/c"]),
            (r#"{"a":[1,2]}"#, &["/a/2", "/a/01", "/a/-", "/a/x"]),
            (r#""text""#, &["/a"]),
            ("12.50", &["/a"]),
            (r#"{"a":"}{]["}"#, &["/b"]),
        ] {
            let canonical = String::from_utf8(super::super::canonicalize(body.as_bytes()).unwrap()).unwrap();
            assert_eq!(without(body, pointers), canonical, "{body} {pointers:?}");
        }
    }

    #[test]
    fn keys_match_as_decoded() {
        // `~1` is `/`, `~0` is `~`; a key written with escapes is the same key.
        let body = r#"{"a/b":1,"c~d":2,"\u00e9":3,"q\"t":4,"k":5}"#;
        assert_eq!(without(body, &["/a~1b", "/c~0d", "/é", "/q\"t"]), r#"{"k":5}"#);
        assert_eq!(without(r#"{"\/x":1,"y":2}"#, &["/~1x"]), r#"{"y":2}"#);
        // Members and elements named by digits: a key "0" is a member.
        assert_eq!(without(r#"{"0":1,"1":2}"#, &["/0"]), r#"{"1":2}"#);
    }

    #[test]
    fn strings_with_brackets_and_escapes_are_skipped_whole() {
        let body = r#"{"drop":{"x":"]}\"\\","y":[[],{}]},"keep":"a,b:c"}"#;
        assert_eq!(without(body, &["/drop"]), r#"{"keep":"a,b:c"}"#);
        assert_eq!(without(body, &["/drop/x"]), r#"{"drop":{"y":[[],{}]},"keep":"a,b:c"}"#);
    }

    #[test]
    fn pointers_are_checked() {
        assert_eq!(Exclusions::parse(&[""]).err(), Some(PointerError::Whole));
        assert_eq!(Exclusions::parse(&["a"]).err(), Some(PointerError::NoSlash));
        assert_eq!(Exclusions::parse(&["/a~2"]).err(), Some(PointerError::BadEscape));
        assert_eq!(Exclusions::parse(&["/a~"]).err(), Some(PointerError::BadEscape));
        assert!(Exclusions::parse(&["/", "/a~0~1"]).is_ok(), "the empty key, and escapes");
        let many = vec!["/a"; MAX_EXCLUDED + 1];
        assert_eq!(Exclusions::parse(&many).err(), Some(PointerError::TooMany));
    }

    #[test]
    fn lists_are_checked_whole() {
        assert_eq!(check(&["/attempt", "/meta/sent_at"]), Ok(()));
        assert_eq!(check(&["/a", "/ab"]), Ok(()), "a longer name is another member");
        assert!(check(&["/a", "/a"]).unwrap_err().contains("twice"));
        assert!(check(&["/meta", "/meta/sent_at"]).unwrap_err().contains("inside `/meta`"));
        assert!(check(&["/meta/sent_at", "/meta"]).unwrap_err().contains("inside `/meta`"));
        assert!(check(&["/a", "b"]).unwrap_err().contains("starts with `/`"));
        assert!(check(&[""]).unwrap_err().contains("whole body"));
    }

    #[test]
    fn the_empty_key_is_a_member_like_any_other() {
        assert_eq!(without(r#"{"":1,"a":2}"#, &["/"]), r#"{"a":2}"#);
    }

    #[test]
    fn every_one_of_the_most_pointers_counts() {
        let names: Vec<String> = (0..MAX_EXCLUDED).map(|i| format!("/k{i}")).collect();
        let pointers: Vec<&str> = names.iter().map(String::as_str).collect();
        let body = format!(
            "{{{},\"kept\":true}}",
            (0..MAX_EXCLUDED).map(|i| format!("\"k{i}\":{i}")).collect::<Vec<_>>().join(",")
        );
        assert_eq!(without(&body, &pointers), r#"{"kept":true}"#);
    }

    /// The values at `pointers` (as decoded tokens) removed from `value`, by
    /// their indices in the document as it was.
    fn removed(value: &serde_json::Value, pointers: &[Vec<String>]) -> serde_json::Value {
        let split = |name: &str| -> (bool, Vec<Vec<String>>) {
            let named: Vec<&Vec<String>> =
                pointers.iter().filter(|p| p.first().map(String::as_str) == Some(name)).collect();
            (
                named.iter().any(|p| p.len() == 1),
                named.iter().filter(|p| p.len() > 1).map(|p| p[1..].to_vec()).collect(),
            )
        };
        match value {
            serde_json::Value::Object(map) => serde_json::Value::Object(
                map.iter()
                    .filter_map(|(key, member)| {
                        let (gone, deeper) = split(key);
                        (!gone).then(|| (key.clone(), removed(member, &deeper)))
                    })
                    .collect(),
            ),
            serde_json::Value::Array(items) => serde_json::Value::Array(
                items
                    .iter()
                    .enumerate()
                    .filter_map(|(index, item)| {
                        let (gone, deeper) = split(&index.to_string());
                        (!gone).then(|| removed(item, &deeper))
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// Every path in `value`, as decoded tokens.
    fn paths(value: &serde_json::Value, prefix: &mut Vec<String>, all: &mut Vec<Vec<String>>) {
        let children: Vec<(String, &serde_json::Value)> = match value {
            serde_json::Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v)).collect(),
            serde_json::Value::Array(items) => items.iter().enumerate().map(|(i, v)| (i.to_string(), v)).collect(),
            _ => return,
        };
        for (token, child) in children {
            prefix.push(token);
            all.push(prefix.clone());
            paths(child, prefix, all);
            prefix.pop();
        }
    }

    proptest::proptest! {
        /// Whatever the document and the pointers (present, nested, absent),
        /// the walk over the canonical form removes what removing the
        /// values from the parsed document removes.
        #[test]
        fn removes_what_the_document_loses(
            value in super::super::tests::json(),
            seed in proptest::prelude::any::<u64>(),
            picks in proptest::collection::vec(proptest::prelude::any::<usize>(), 0..4),
            absent in proptest::collection::vec("\\PC{0,4}", 0..2),
        ) {
            let mut seed = seed;
            let text = super::super::tests::written(&value, &mut seed);
            let mut all = Vec::new();
            paths(&value, &mut Vec::new(), &mut all);
            let mut chosen: Vec<Vec<String>> = Vec::new();
            if !all.is_empty() {
                chosen.extend(picks.iter().map(|pick| all[pick % all.len()].clone()));
            }
            chosen.extend(absent.into_iter().map(|name| vec![name, "nowhere".to_owned()]));
            let written: Vec<String> = chosen
                .iter()
                .map(|tokens| tokens.iter().map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1"))).collect())
                .collect();
            let pointers: Vec<&str> = written.iter().map(String::as_str).collect();
            let expected = serde_json::to_string(&removed(&value, &chosen)).unwrap();
            proptest::prop_assert_eq!(without(&text, &pointers), expected, "{} {:?}", text, pointers);
        }
    }
}

//! The canonical form is part of every stored fingerprint: a change to it,
//! however small, makes retries of requests stored before the change 422
//! instead of replays. These tests pin it, over documents generated from a
//! fixed seed (whitespace, every kind of escape, unicode, duplicate keys,
//! keys that share their first eight bytes or differ by NUL bytes, nested
//! objects to reorder, numbers of every form, and broken documents), over
//! every short string of a JSON-like alphabet, and over chosen documents.
//! The digests were computed with the canonicalizer of the first release
//! and checked against serde_json by the fuzz target `canonical_json`.

use sha2::{Digest, Sha256};

use super::canonicalize;

/// SHA-256 over the outcome for each body: whether it canonicalized, and
/// the canonical bytes.
fn digest(bodies: impl IntoIterator<Item = Vec<u8>>) -> String {
    let mut hash = Sha256::new();
    for body in bodies {
        match canonicalize(&body) {
            None => hash.update([0]),
            Some(canonical) => {
                hash.update([1]);
                hash.update((canonical.len() as u64).to_be_bytes());
                hash.update(&canonical);
            }
        }
    }
    hex::encode(hash.finalize())
}

#[test]
fn generated_documents_keep_their_canonical_forms() {
    let mut generator = Gen(0x1de3_5eed);
    let documents: Vec<Vec<u8>> = (0..20_000).map(|_| generator.document()).collect();
    let valid = documents.iter().filter(|body| canonicalize(body).is_some()).count();
    // Both kinds are there: documents, and bytes that are not one.
    assert!(valid * 10 > documents.len() && valid < documents.len(), "{valid} of {} are JSON", documents.len());
    assert_eq!(digest(documents), "21848c770c999692543892cca9c1b0af974aecfe313a9f5fb52b962bec98a9a8");
}

#[test]
fn short_byte_strings_keep_their_canonical_forms() {
    // Every string of up to three bytes of a JSON-like alphabet, then
    // random ones of up to 15: mostly not JSON.
    const ALPHABET: &[u8] = b"{}[]\",:\\ \n0-1.eEtrufalsn\x00\x1f\xc3\xa9";
    let mut bodies = Vec::new();
    for len in 0..=3u32 {
        for mut index in 0..ALPHABET.len().pow(len) {
            let mut body = Vec::new();
            for _ in 0..len {
                body.push(ALPHABET[index % ALPHABET.len()]);
                index /= ALPHABET.len();
            }
            bodies.push(body);
        }
    }
    let mut generator = Gen(7);
    for _ in 0..200_000 {
        bodies.push((0..generator.below(16)).map(|_| generator.pick(ALPHABET)).collect());
    }
    assert_eq!(digest(bodies), "5af4469337e044cd608484af5454dc4140cbe2948421b299cca7cafd40471c56");
}

#[test]
fn chosen_documents_keep_their_canonical_forms() {
    for (body, canonical) in [
        // Keys that differ by NUL bytes, or where one is a prefix of another,
        // shorter and longer than eight bytes.
        (r#"{"ab\u0000":1,"ab":2}"#, Some(r#"{"ab":2,"ab\u0000":1}"#)),
        (
            r#"{"ab":1,"ab\u0000":2,"ab\u0000\u0000":3,"a":4}"#,
            Some(r#"{"a":4,"ab":1,"ab\u0000":2,"ab\u0000\u0000":3}"#),
        ),
        (
            r#"{"abcdefgh\u0000":1,"abcdefgh":2,"abcdefghi":3,"abcdefg":4}"#,
            Some(r#"{"abcdefg":4,"abcdefgh":2,"abcdefgh\u0000":1,"abcdefghi":3}"#),
        ),
        (
            r#"{"\u0000\u0000\u0000\u0000\u0000\u0000\u0000\u0000\u0000":1,"\u0000\u0000\u0000\u0000\u0000\u0000\u0000\u0000":2,"":3}"#,
            Some(
                r#"{"":3,"\u0000\u0000\u0000\u0000\u0000\u0000\u0000\u0000":2,"\u0000\u0000\u0000\u0000\u0000\u0000\u0000\u0000\u0000":1}"#,
            ),
        ),
        (r#"{"abcdefghabcdefgi":1,"abcdefghabcdefgh":2}"#, Some(r#"{"abcdefghabcdefgh":2,"abcdefghabcdefgi":1}"#)),
        // Duplicate keys keep their order, written raw or escaped.
        (r#"{"b":1,"a":2,"b":3,"a":4,"\u0061":5,"\u0062":6}"#, Some(r#"{"a":2,"a":4,"a":5,"b":1,"b":3,"b":6}"#)),
        (
            r#"{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"a":0}"#,
            Some(
                r#"{"a":1,"a":0,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17}"#,
            ),
        ),
        // Whitespace and escapes inside objects reordered at every level.
        (
            r#"{ "z" : { "y" : "\n" , "x" : [ 1 , { "b" : 2 , "a" : "\u00e9" } ] } , "a" : "q" }"#,
            Some(r#"{"a":"q","z":{"x":[1,{"a":"é","b":2}],"y":"\n"}}"#),
        ),
        (
            r#"{"z":{"y":1,"x":2},"a":{"d":"\t","c":{"f":1,"e":2}},"m":0}"#,
            Some(r#"{"a":{"c":{"e":2,"f":1},"d":"\t"},"m":0,"z":{"x":2,"y":1}}"#),
        ),
        (r#"  {"é":1,"e":2,"\u00e9":3,"😀":4,"\ud83d\ude00":5}  "#, Some(r#"{"e":2,"é":1,"é":3,"😀":4,"😀":5}"#)),
        (r#"{"b" :1 ,"a":"x\"y" ,"c":[ "\/" ]}"#, Some(r#"{"a":"x\"y","b":1,"c":["/"]}"#)),
        // Not one document: a lone surrogate, trailing bytes, a BOM.
        (r#"["\ud800"]"#, None),
        (r#"{"\ud800":1}"#, None),
        ("{\"a\":1}\u{0}", None),
        ("\u{feff}{}", None),
    ] {
        let canonical = canonical.map(str::as_bytes);
        assert_eq!(canonicalize(body.as_bytes()).as_deref(), canonical, "{body}");
    }
}

/// A small, seeded generator (no dependency: the same documents on every
/// platform and in every version).
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        // SplitMix64.
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    fn ws(&mut self, out: &mut String) {
        if self.chance(30) {
            out.push_str(self.pick(&[" ", "\n", "\t", "\r\n", "  ", " \t\n ", "\r"]));
        }
    }

    /// One character of a string's contents, as written: raw, or escaped
    /// any of the ways JSON allows.
    fn char_written(&mut self, c: char, out: &mut String) {
        let must = c == '"' || c == '\\' || (c as u32) < 0x20;
        match self.below(if must { 2 } else { 4 }) {
            0 if c == '"' => out.push_str("\\\""),
            0 if c == '\\' => out.push_str("\\\\"),
            0 if c == '\n' => out.push_str("\\n"),
            0 if c == '\t' => out.push_str("\\t"),
            0 if c == '\r' => out.push_str("\\r"),
            0 if c == '\u{8}' => out.push_str("\\b"),
            0 if c == '\u{c}' => out.push_str("\\f"),
            0 | 1 if must => {
                let upper = self.chance(50);
                push_u(out, c as u32, upper);
            }
            1 if c == '/' => out.push_str("\\/"),
            1 => {
                let mut units = [0u16; 2];
                let upper = self.chance(50);
                for unit in c.encode_utf16(&mut units) {
                    push_u(out, u32::from(*unit), upper);
                }
            }
            _ => out.push(c),
        }
    }

    fn string_written(&mut self, text: &str, out: &mut String) {
        out.push('"');
        // Mostly all raw (no escapes) or all as they come.
        let raw = self.chance(40);
        for c in text.chars() {
            if raw && !(c == '"' || c == '\\' || (c as u32) < 0x20) {
                out.push(c);
            } else {
                self.char_written(c, out);
            }
        }
        out.push('"');
    }

    fn text(&mut self, max: usize) -> String {
        const CHARS: &[char] = &[
            'a',
            'b',
            'z',
            'A',
            '0',
            ' ',
            '/',
            '"',
            '\\',
            '\u{0}',
            '\u{1}',
            '\n',
            '\t',
            '\u{1f}',
            '\u{7f}',
            'é',
            '\u{80}',
            '\u{2028}',
            '\u{ffff}',
            '😀',
            '\u{10ffff}',
            '~',
            '{',
            '}',
            ',',
            ':',
        ];
        (0..self.below(max + 1)).map(|_| self.pick(CHARS)).collect()
    }

    /// A key, often one of a pool that shares prefixes of up to and past
    /// eight bytes, differs by NUL bytes, or is a prefix of another.
    fn key(&mut self) -> String {
        const POOL: &[&str] = &[
            "",
            "a",
            "ab",
            "ab\0",
            "ab\0\0",
            "ab\0c",
            "abc",
            "abcdefg",
            "abcdefg\0",
            "abcdefgh",
            "abcdefgh\0",
            "abcdefghi",
            "abcdefghij",
            "abcdefgha",
            "abcdefgh\u{1}",
            "abcdefgh\0\0\0\0\0\0\0\0\0",
            "abcdefghabcdefgh",
            "abcdefghabcdefgi",
            "\0",
            "\0\0\0\0\0\0\0\0",
            "\0\0\0\0\0\0\0\0\0",
            "\u{ff}",
            "é",
            "éé",
            "\u{7f}",
            "😀",
            "\u{10ffff}",
            "\u{ffff}",
            "Z",
            "amount",
            "amount_minor",
            "currency",
            "id",
            "\"",
            "\\",
            "a\"b",
        ];
        match self.below(10) {
            0..=6 => self.pick(POOL).to_owned(),
            7 => {
                let mut key = self.pick(POOL).to_owned();
                key.push_str(&self.text(3));
                key
            }
            _ => self.text(12),
        }
    }

    fn number(&mut self, out: &mut String) {
        if self.chance(30) {
            out.push('-');
        }
        if self.chance(20) {
            out.push('0');
        } else {
            out.push(char::from(b'1' + self.below(9) as u8));
            for _ in 0..self.below(25) {
                out.push(char::from(b'0' + self.below(10) as u8));
            }
        }
        if self.chance(30) {
            out.push('.');
            for _ in 0..1 + self.below(6) {
                out.push(char::from(b'0' + self.below(10) as u8));
            }
        }
        if self.chance(20) {
            out.push_str(self.pick(&["e", "E", "e+", "E-", "e-"]));
            for _ in 0..1 + self.below(3) {
                out.push(char::from(b'0' + self.below(10) as u8));
            }
        }
    }

    fn value(&mut self, depth: usize, out: &mut String) {
        let leaf = depth >= 4 || self.chance(30 + 15 * depth);
        match if leaf { self.below(6) } else { 6 + self.below(2) } {
            0 => out.push_str("true"),
            1 => out.push_str("false"),
            2 => out.push_str("null"),
            3 | 4 => self.number(out),
            5 => {
                let text = self.text(10);
                self.string_written(&text, out);
            }
            6 => {
                out.push('[');
                let n = self.below(5);
                self.ws(out);
                for i in 0..n {
                    if i > 0 {
                        out.push(',');
                    }
                    self.ws(out);
                    self.value(depth + 1, out);
                    self.ws(out);
                }
                out.push(']');
            }
            _ => {
                out.push('{');
                let n = match self.below(10) {
                    0 if depth <= 1 => 17 + self.below(24),
                    1 => 0,
                    _ => 1 + self.below(8),
                };
                self.ws(out);
                for i in 0..n {
                    if i > 0 {
                        out.push(',');
                    }
                    self.ws(out);
                    let key = self.key();
                    self.string_written(&key, out);
                    self.ws(out);
                    out.push(':');
                    self.ws(out);
                    self.value(depth + 1, out);
                    self.ws(out);
                }
                out.push('}');
            }
        }
    }

    fn document(&mut self) -> Vec<u8> {
        let mut out = String::new();
        self.ws(&mut out);
        self.value(0, &mut out);
        self.ws(&mut out);
        let mut bytes = out.into_bytes();
        // Often a mutation: where each answers `None` must agree too.
        if self.chance(25) {
            for _ in 0..1 + self.below(3) {
                let at = self.below(bytes.len() + 1);
                match self.below(4) {
                    0 if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    1 if at < bytes.len() => bytes[at] = self.pick(b"{}[]\",:\\ 0-.eEu\x00\x1f\xff\xc3a"),
                    _ => bytes.insert(at, self.pick(b"{}[]\",:\\ 0-.eEu\x00\x1f\xff\xc3a")),
                }
            }
        }
        bytes
    }
}

fn push_u(out: &mut String, unit: u32, upper: bool) {
    if upper {
        out.push_str(&format!("\\u{unit:04X}"));
    } else {
        out.push_str(&format!("\\u{unit:04x}"));
    }
}

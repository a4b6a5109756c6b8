//! Masking passwords in connection URLs, for logs, errors and `Debug`
//! output: the one redaction every store uses.

use std::ops::Range;

/// What replaces a password.
const MASK: &str = "***";

/// A connection URL with its secrets masked, plus the secrets themselves,
/// kept only to scrub them out of client error messages (never shown).
#[derive(Clone)]
pub(crate) struct Redacted {
    display: String,
    secrets: Vec<String>,
}

impl Redacted {
    /// Masks every password of `url`.
    ///
    /// Handles URLs (`postgres://user:secret@host/db`, `redis://:secret@h`,
    /// `?password=secret`, `?pass=secret`) and key/value connection strings
    /// (`host=db password='se cret'`). Text that is neither (no `://`, and
    /// no `=` or an `@` as in `:secret@host`) is not echoed at all, since it
    /// might hold a password in a shape this does not recognise. When in
    /// doubt it masks more, never less.
    pub(crate) fn new(url: &str) -> Self {
        let is_url = url.contains("://");
        if !is_url && (!url.contains('=') || url.contains('@')) {
            return Self::hidden(url);
        }
        let mut secrets = Vec::new();
        let ranges = password_ranges(url, is_url, &mut secrets);
        let mut display = String::with_capacity(url.len());
        let mut done = 0;
        for range in ranges {
            display.push_str(&url[done..range.start]);
            display.push_str(MASK);
            done = range.end;
        }
        display.push_str(&url[done..]);
        Self::with_secrets(display, secrets)
    }

    fn hidden(text: &str) -> Self {
        Self::with_secrets("<not a URL>".to_owned(), vec![text.to_owned()])
    }

    /// Keeps the non-empty secrets, longest first, so that scrubbing a
    /// secret never leaves the tail of a longer one that starts with it.
    fn with_secrets(display: String, mut secrets: Vec<String>) -> Self {
        secrets.retain(|secret| !secret.is_empty());
        secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
        secrets.dedup();
        Self { display, secrets }
    }

    /// The URL, passwords masked.
    pub(crate) fn as_str(&self) -> &str {
        &self.display
    }

    /// `text` (a client's error message, say) with every secret of the URL
    /// masked.
    pub(crate) fn scrub(&self, text: &str) -> String {
        self.secrets.iter().fold(text.to_owned(), |text, secret| text.replace(secret.as_str(), MASK))
    }

    /// Whether `text` quotes a secret of the URL.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn leaks_into(&self, text: &str) -> bool {
        self.secrets.iter().any(|secret| text.contains(secret.as_str()))
    }
}

/// The byte ranges of the passwords in `url`, in order, not overlapping;
/// each password, as written, is added to `secrets`.
///
/// In a URL (`is_url`) a parameter's value ends at `&` or `#`, as the Redis
/// and Postgres clients read it; in a key/value string at white space, with
/// libpq's quoting.
fn password_ranges(url: &str, is_url: bool, secrets: &mut Vec<String>) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    // URL user info: everything between the first `:` after `scheme://` and
    // the last `@` (a password holding `@`, `/`, `?` or `#` is still covered;
    // an `@` further on, in a query, masks too much: the safe mistake).
    if let Some(scheme_end) = url.find("://").map(|i| i + 3)
        && let Some(at) = url[scheme_end..].rfind('@').map(|i| scheme_end + i)
        && let Some(colon) = url[scheme_end..at].find(':').map(|i| scheme_end + i)
    {
        ranges.push(colon + 1..at);
    }
    // `pass=` and `password=` parameters, in a URL query or a key/value
    // string, wherever they are.
    let mut scan_from = 0;
    while let Some(name_start) = find_ignore_case(&url[scan_from..], "pass").map(|i| scan_from + i) {
        scan_from = name_start + "pass".len();
        if !starts_a_name(url, name_start) {
            continue;
        }
        let mut after = &url[scan_from..];
        if after.get(..4).is_some_and(|word| word.eq_ignore_ascii_case("word")) {
            after = &after[4..];
        }
        let Some(value) = after.trim_start().strip_prefix('=') else {
            continue;
        };
        let trimmed = value.trim_start();
        let start = url.len() - trimmed.len();
        let len = match trimmed.strip_prefix('\'') {
            Some(quoted) if !is_url => 1 + quoted_len(quoted),
            _ if is_url => trimmed.find(['&', '#']).unwrap_or(trimmed.len()),
            _ => trimmed.find(char::is_whitespace).unwrap_or(trimmed.len()),
        };
        ranges.push(start..start + len);
        scan_from = start + len;
    }
    secrets.extend(ranges.iter().map(|range| url[range.clone()].to_owned()));
    ranges.sort_by_key(|range| range.start);
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
            _ => merged.push(range),
        }
    }
    merged
}

/// Length of a libpq-quoted value after its opening quote, closing quote
/// included: backslash escapes, ends at the next bare quote.
fn quoted_len(quoted: &str) -> usize {
    let mut chars = quoted.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '\'' => return i + 1,
            _ => {}
        }
    }
    quoted.len()
}

/// Whether a parameter name may start at `at`: the start of the text, or
/// after a separator (so `bypass=` is not a password).
fn starts_a_name(text: &str, at: usize) -> bool {
    text[..at].chars().next_back().is_none_or(|c| matches!(c, '?' | '&' | ';') || c.is_whitespace())
}

fn find_ignore_case(haystack: &str, needle: &str) -> Option<usize> {
    haystack.as_bytes().windows(needle.len()).position(|window| window.eq_ignore_ascii_case(needle.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(url: &str) -> String {
        Redacted::new(url).as_str().to_owned()
    }

    #[test]
    fn masks_postgres_urls_and_connection_strings() {
        let cases = [
            ("postgres://idem:hunter2@db:5432/app", "postgres://idem:***@db:5432/app"),
            ("postgresql://idem:p%40ss@db/app?sslmode=disable", "postgresql://idem:***@db/app?sslmode=disable"),
            ("postgres://idem:pa@ss/w:rd@db/app", "postgres://idem:***@db/app"),
            (
                "postgres://idem@db/app?password=hunter2&sslmode=require",
                "postgres://idem@db/app?password=***&sslmode=require",
            ),
            ("postgres://db/app?user=u&PASSWORD=hunter2", "postgres://db/app?user=u&PASSWORD=***"),
            ("host=db user=idem password=hunter2 dbname=app", "host=db user=idem password=*** dbname=app"),
            ("host=db password = 'hun ter\\'2' dbname=app", "host=db password = *** dbname=app"),
            ("postgres://idem@db:5432/app", "postgres://idem@db:5432/app"),
            ("postgres://db/app", "postgres://db/app"),
        ];
        for (url, expected) in cases {
            assert_eq!(shown(url), expected, "{url}");
        }
    }

    #[test]
    fn masks_redis_urls() {
        assert_eq!(shown("redis://:hunter2@127.0.0.1:6379/0"), "redis://:***@127.0.0.1:6379/0");
        assert_eq!(shown("rediss://app:s3cr%40t@cache.example:6380"), "rediss://app:***@cache.example:6380");
        // An `@` inside the password: the user info ends at the last one.
        assert_eq!(shown("redis://app:p@ss@host/1"), "redis://app:***@host/1");
        assert_eq!(shown("valkey://user:pw:with:colons@h"), "valkey://user:***@h");
        // `/`, `?` or `#` inside the password do not end the user info early.
        assert_eq!(shown("redis://:pa/ss@host/1"), "redis://:***@host/1");
        assert_eq!(shown("redis://u:a?b#c@host:6379"), "redis://u:***@host:6379");
        assert_eq!(Redacted::new("redis://:pa/ss@host/1").secrets, ["pa/ss"]);
    }

    #[test]
    fn masks_pass_and_password_parameters() {
        assert_eq!(
            shown("redis+unix:///run/redis.sock?db=2&pass=hunter2"),
            "redis+unix:///run/redis.sock?db=2&pass=***"
        );
        assert_eq!(shown("redis://h/?Password=x&protocol=resp3#f"), "redis://h/?Password=***&protocol=resp3#f");
        // A parameter whose value holds an `@` is masked whole, not taken for user info.
        assert!(!shown("redis://h/?password=sec@ret").contains("sec"));
        // Only whole parameter names count.
        assert_eq!(shown("redis://h/?bypass=1&passive=2"), "redis://h/?bypass=1&passive=2");
    }

    #[test]
    fn a_url_parameter_ends_only_at_ampersand_or_fragment() {
        // The clients split URL queries on `&` alone: `;`, spaces and quotes
        // are part of the password.
        for (url, expected) in [
            ("redis+unix:///run/redis.sock?db=2&pass=abc;def", "redis+unix:///run/redis.sock?db=2&pass=***"),
            ("postgres://app@db/app?password=abc;def&x=1", "postgres://app@db/app?password=***&x=1"),
            ("redis://h/?pass=hun ter2", "redis://h/?pass=***"),
            ("redis://h/?pass='ab'cd#f", "redis://h/?pass=***#f"),
        ] {
            assert_eq!(shown(url), expected, "{url}");
        }
        // In a key/value string, white space of any kind ends a value.
        assert_eq!(shown("host=db user=idem\rpassword=hunter2"), "host=db user=idem\rpassword=***");
    }

    #[test]
    fn scrubs_overlapping_and_prefix_secrets_whole() {
        let redacted = Redacted::new("redis://u:abc@h/?password=abcdef");
        assert_eq!(redacted.scrub("auth abcdef then abc"), "auth *** then ***");
    }

    #[test]
    fn an_empty_url_masks_nothing_else() {
        let redacted = Redacted::new("");
        assert_eq!(redacted.scrub("connection refused"), "connection refused");
        assert!(!redacted.leaks_into("connection refused"));
    }

    #[test]
    fn leaves_urls_without_secrets_alone() {
        for url in ["redis://127.0.0.1:6379/", "redis://user@host", "redis://host?db=1", "rediss://h:1/2#x"] {
            assert_eq!(shown(url), url);
            assert!(Redacted::new(url).secrets.is_empty());
        }
    }

    #[test]
    fn never_echoes_what_is_not_a_url() {
        assert_eq!(shown("hunter2@localhost"), "<not a URL>");
        // No scheme but a query: still not a key/value string.
        assert_eq!(shown(":hunter2@cache:6379/0?protocol=resp3"), "<not a URL>");
        assert_eq!(shown("redis:/u:hunter2@h/?db=1"), "<not a URL>");
        assert_eq!(Redacted::new("hunter2@localhost").scrub("bad: hunter2@localhost"), "bad: ***");
    }

    #[test]
    fn scrubs_secrets_out_of_messages() {
        let redacted = Redacted::new("redis://u:hunter2@h?password=swordfish");
        assert_eq!(redacted.scrub("auth hunter2 failed, then swordfish"), "auth *** failed, then ***");
        assert!(redacted.leaks_into("x hunter2 y") && !redacted.leaks_into("nothing"));
        assert!(!redacted.as_str().contains("hunter2") && !redacted.as_str().contains("swordfish"));
        // An empty password is nothing to scrub (and must not mask every gap).
        assert_eq!(Redacted::new("redis://u:@h").scrub("abc"), "abc");
    }
}

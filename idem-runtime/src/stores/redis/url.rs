//! Redis URLs as they may appear in logs and errors: without their password.

/// What replaces a secret.
const MASK: &str = "***";

/// Query parameters that carry a password (`redis+unix:///s.sock?pass=...`).
const SECRET_PARAMS: [&str; 2] = ["pass", "password"];

/// A URL with its secrets masked, and the secrets themselves (kept only to
/// scrub them out of client error messages, never shown).
#[derive(Clone)]
pub(super) struct Redacted {
    pub(super) display: String,
    pub(super) secrets: Vec<String>,
}

impl Redacted {
    /// `text` with every secret of the URL masked.
    pub(super) fn scrub(&self, text: &str) -> String {
        self.secrets
            .iter()
            .filter(|secret| !secret.is_empty())
            .fold(text.to_owned(), |text, secret| text.replace(secret.as_str(), MASK))
    }
}

/// Masks the password of a Redis URL: the one after `user:` in the
/// authority (`redis://user:secret@host` → `redis://user:***@host`) and any
/// `pass` / `password` query parameter. Text that is not a URL at all is not
/// echoed, since it might hold a password in a shape we do not recognise.
pub(super) fn redact(url: &str) -> Redacted {
    let Some(scheme_end) = url.find("://") else {
        return Redacted { display: "<not a URL>".to_owned(), secrets: vec![url.to_owned()] };
    };
    let rest_start = scheme_end + 3;
    let rest = &url[rest_start..];
    // The userinfo ends at the last `@`: a password may itself hold `/`, `?`
    // or `#`. Masking too much (an `@` in the query) is the safe mistake.
    let host_start = rest.rfind('@').map_or(0, |at| at + 1);
    let authority_len = host_start + rest[host_start..].find(['/', '?', '#']).unwrap_or(rest.len() - host_start);
    let (authority, tail) = rest.split_at(authority_len);
    let mut secrets = Vec::new();
    let mut display = String::with_capacity(url.len());
    display.push_str(&url[..rest_start]);
    match authority.rfind('@') {
        Some(at) => {
            let (userinfo, host) = authority.split_at(at);
            match userinfo.split_once(':') {
                Some((user, password)) => {
                    secrets.push(password.to_owned());
                    display.push_str(user);
                    display.push(':');
                    display.push_str(MASK);
                }
                None => display.push_str(userinfo),
            }
            display.push_str(host);
        }
        None => display.push_str(authority),
    }
    let (path, query) = match tail.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (tail, None),
    };
    display.push_str(path);
    if let Some(query) = query {
        let (query, fragment) = match query.split_once('#') {
            Some((query, fragment)) => (query, Some(fragment)),
            None => (query, None),
        };
        display.push('?');
        for (i, pair) in query.split('&').enumerate() {
            if i > 0 {
                display.push('&');
            }
            match pair.split_once('=') {
                Some((name, value)) if SECRET_PARAMS.iter().any(|p| name.eq_ignore_ascii_case(p)) => {
                    secrets.push(value.to_owned());
                    display.push_str(name);
                    display.push('=');
                    display.push_str(MASK);
                }
                _ => display.push_str(pair),
            }
        }
        if let Some(fragment) = fragment {
            display.push('#');
            display.push_str(fragment);
        }
    }
    Redacted { display, secrets }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(url: &str) -> String {
        redact(url).display
    }

    #[test]
    fn masks_the_password_of_the_authority() {
        assert_eq!(shown("redis://:hunter2@127.0.0.1:6379/0"), "redis://:***@127.0.0.1:6379/0");
        assert_eq!(shown("rediss://app:s3cr%40t@cache.example:6380"), "rediss://app:***@cache.example:6380");
        // An `@` inside the password: the authority ends at the last one.
        assert_eq!(shown("redis://app:p@ss@host/1"), "redis://app:***@host/1");
        assert_eq!(shown("valkey://user:pw:with:colons@h"), "valkey://user:***@h");
        // `/`, `?` or `#` inside the password do not end the authority early.
        assert_eq!(shown("redis://:pa/ss@host/1"), "redis://:***@host/1");
        assert_eq!(shown("redis://u:a?b#c@host:6379"), "redis://u:***@host:6379");
        assert_eq!(redact("redis://:pa/ss@host/1").secrets, ["pa/ss"]);
    }

    #[test]
    fn masks_password_query_parameters() {
        assert_eq!(
            shown("redis+unix:///run/redis.sock?db=2&pass=hunter2"),
            "redis+unix:///run/redis.sock?db=2&pass=***"
        );
        assert_eq!(shown("redis://h/?Password=x&protocol=resp3#f"), "redis://h/?Password=***&protocol=resp3#f");
    }

    #[test]
    fn leaves_urls_without_secrets_alone() {
        for url in ["redis://127.0.0.1:6379/", "redis://user@host", "redis://host?db=1", "rediss://h:1/2#x"] {
            assert_eq!(shown(url), url);
            assert!(redact(url).secrets.is_empty());
        }
    }

    #[test]
    fn never_echoes_what_is_not_a_url() {
        assert_eq!(shown("hunter2@localhost"), "<not a URL>");
        assert_eq!(redact("hunter2@localhost").scrub("bad: hunter2@localhost"), "bad: ***");
    }

    #[test]
    fn scrubs_secrets_out_of_messages() {
        let redacted = redact("redis://u:hunter2@h?password=swordfish");
        let scrubbed = redacted.scrub("auth hunter2 failed, then swordfish");
        assert_eq!(scrubbed, "auth *** failed, then ***");
        assert!(!redacted.display.contains("hunter2") && !redacted.display.contains("swordfish"));
        // An empty password is nothing to scrub (and must not mask every gap).
        assert_eq!(redact("redis://u:@h").scrub("abc"), "abc");
    }
}

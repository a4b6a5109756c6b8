//! Redis client errors as [`StoreError`]s, and the store's own config error.

use std::time::Duration;

use redis::RedisError;

use crate::store::StoreError;

use crate::redact::Redacted;

/// Error for a key prefix that would move records out of their hash slot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "Redis key prefix {prefix:?} contains `{{` or `}}`: Redis Cluster would hash the prefix instead of the \
     record's own hash tag; use a prefix without braces, such as \"myapp:\""
)]
pub struct InvalidKeyPrefix {
    /// The refused prefix.
    pub prefix: String,
}

/// Where the store connects to, as errors may show it.
#[derive(Clone)]
pub(super) struct Endpoint {
    /// The URL, password masked; `None` for a store built on a
    /// caller-provided connection.
    redacted: Option<Redacted>,
    /// The connection's response timeout, when known.
    pub(super) response_timeout: Option<Duration>,
}

impl Endpoint {
    pub(super) fn new(redacted: Option<Redacted>, response_timeout: Option<Duration>) -> Self {
        Self { redacted, response_timeout }
    }

    /// The URL without its password, if the store knows it.
    pub(super) fn display(&self) -> Option<&str> {
        self.redacted.as_ref().map(Redacted::as_str)
    }

    /// Maps a client error of `operation` to a store error the runtime can
    /// act on: timeouts, a full server (`OOM` under `maxmemory-policy
    /// noeviction`), and everything else as unavailable.
    pub(super) fn error(&self, operation: &str, error: RedisError) -> StoreError {
        if error.is_timeout()
            && let Some(after) = self.response_timeout
        {
            return StoreError::Timeout { store: "redis", after };
        }
        let target = self.display().map(|url| format!(" on {url}")).unwrap_or_default();
        let text = self.scrub(&error.to_string());
        if error.code() == Some("OOM") {
            return StoreError::Full {
                store: "redis",
                detail: format!(
                    "{operation}{target}: {text}; Redis reached maxmemory (raise it: evicting records would \
                     break at-most-once)"
                ),
            };
        }
        let message = format!("{operation}{target}: {text}");
        // A client message that quoted a secret loses its source rather
        // than leak it through the error chain.
        let source = (text == error.to_string()).then(|| Box::new(error) as crate::store::BoxError);
        StoreError::Unavailable { store: "redis", message, source }
    }

    fn scrub(&self, text: &str) -> String {
        match &self.redacted {
            Some(redacted) => redacted.scrub(text),
            None => text.to_owned(),
        }
    }
}

/// Checks a key prefix: it must not contain a brace, since the first `{...}`
/// of a key decides its Redis Cluster slot.
pub(super) fn check_prefix(prefix: String) -> Result<String, InvalidKeyPrefix> {
    if prefix.contains(['{', '}']) { Err(InvalidKeyPrefix { prefix }) } else { Ok(prefix) }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    fn endpoint(url: &str) -> Endpoint {
        Endpoint::new(Some(Redacted::new(url)), Some(Duration::from_secs(2)))
    }

    #[test]
    fn io_errors_are_unavailable_with_the_redacted_url() {
        let error = RedisError::from(io::Error::from(io::ErrorKind::ConnectionRefused));
        let mapped = endpoint("redis://:hunter2@10.0.0.1:6379").error("claim", error);
        let text = mapped.to_string();
        assert!(matches!(mapped, StoreError::Unavailable { source: Some(_), .. }), "{mapped:?}");
        assert!(text.contains("claim on redis://:***@10.0.0.1:6379"), "{text}");
        assert!(!text.contains("hunter2") && !format!("{mapped:?}").contains("hunter2"));
    }

    #[test]
    fn timeouts_report_the_configured_timeout() {
        let error = RedisError::from(io::Error::from(io::ErrorKind::TimedOut));
        let mapped = endpoint("redis://h").error("renew", error);
        assert!(matches!(mapped, StoreError::Timeout { after, .. } if after == Duration::from_secs(2)));
        // Without a known timeout it is still a failure the runtime answers 503 to.
        let error = RedisError::from(io::Error::from(io::ErrorKind::TimedOut));
        let mapped = Endpoint::new(None, None).error("renew", error);
        assert!(matches!(mapped, StoreError::Unavailable { .. }), "{mapped:?}");
    }

    #[test]
    fn messages_quoting_a_secret_are_scrubbed_and_lose_their_source() {
        let error = RedisError::from(io::Error::other("bad password hunter2"));
        let mapped = endpoint("redis://u:hunter2@h").error("get", error);
        assert!(matches!(&mapped, StoreError::Unavailable { source: None, message, .. }
            if message.contains("bad password ***")));
    }

    #[test]
    fn prefixes_with_braces_are_refused() {
        assert_eq!(check_prefix("app:".into()), Ok("app:".into()));
        assert_eq!(check_prefix(String::new()), Ok(String::new()));
        for bad in ["{app}:", "a{b", "}"] {
            let error = check_prefix(bad.into()).unwrap_err();
            assert!(error.to_string().contains("hash tag"), "{error}");
        }
    }
}

//! Where the backend test servers are, and what to do when one is missing.

use std::io::Write;

/// Whether `scripts/test` asked that no backend test skip.
pub fn required() -> bool {
    std::env::var_os("IDEM_REQUIRE_BACKENDS").is_some_and(|v| v == "1")
}

/// The URL in `variable`, or `None` after printing a skip line.
///
/// Under `scripts/test` (`IDEM_REQUIRE_BACKENDS=1`) a missing URL is a test
/// failure with a message saying what is missing.
pub fn url(variable: &str, test: &str) -> Option<String> {
    match std::env::var(variable) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if required() => panic!(
            "{test}: {variable} is not set, but IDEM_REQUIRE_BACKENDS=1 forbids skipping; \
             run the suite through scripts/test, which starts the server"
        ),
        _ => {
            // Written straight to stderr: libtest would swallow `println!`.
            let line = format!("SKIP backend test {test}: {variable} is not set (scripts/test sets it)\n");
            let _ = std::io::stderr().write_all(line.as_bytes());
            None
        }
    }
}

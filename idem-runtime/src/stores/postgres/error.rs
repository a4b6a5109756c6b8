//! From sqlx errors to [`StoreError`], without ever showing a password.

use std::ops::Range;

use sqlx::postgres::PgConnectOptions;

use super::KIND;
use super::sql::TableName;
use crate::store::StoreError;

/// Undefined table: the store was used before [`super::PostgresStore::migrate`].
const UNDEFINED_TABLE: &str = "42P01";

/// What to put in place of a password.
const MASK: &str = "***";

/// `url` with any password replaced by `***`, safe for logs and errors.
///
/// Handles URLs (`postgres://user:secret@host/db`, `?password=secret`) and
/// key/value connection strings (`host=db password=secret`). When in doubt
/// it masks more, never less.
pub fn redact_url(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    let mut done = 0;
    for range in password_ranges(url) {
        out.push_str(&url[done..range.start]);
        out.push_str(MASK);
        done = range.end;
    }
    out.push_str(&url[done..]);
    out
}

/// The byte ranges of the passwords in `url`, in order, not overlapping.
fn password_ranges(url: &str) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    let mut scan_from = 0;
    // URL user info: everything between the first `:` after `scheme://` and
    // the last `@` (a password with a stray `@` or `/` is still covered).
    if let Some(scheme_end) = url.find("://").map(|i| i + 3)
        && let Some(at) = url[scheme_end..].rfind('@').map(|i| scheme_end + i)
    {
        if let Some(colon) = url[scheme_end..at].find(':').map(|i| scheme_end + i) {
            ranges.push(colon + 1..at);
        }
        scan_from = at;
    }
    // `password=` parameters, in a URL query or a key/value string.
    while let Some(found) = find_ignore_case(&url[scan_from..], "password").map(|i| scan_from + i + "password".len()) {
        scan_from = found;
        let after = &url[found..];
        let Some(value) = after.trim_start().strip_prefix('=') else {
            continue;
        };
        let trimmed = value.trim_start();
        let start = url.len() - trimmed.len();
        let len = match trimmed.strip_prefix('\'') {
            // libpq quoting: backslash escapes, ends at the next bare quote.
            Some(quoted) => {
                let mut chars = quoted.char_indices();
                let mut end = quoted.len();
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '\'' => {
                            end = i + 1;
                            break;
                        }
                        _ => {}
                    }
                }
                1 + end
            }
            None => trimmed.find(['&', '#', ' ', '\t', '\n']).unwrap_or(trimmed.len()),
        };
        ranges.push(start..start + len);
        scan_from = start + len;
    }
    ranges
}

fn find_ignore_case(haystack: &str, needle: &str) -> Option<usize> {
    haystack.as_bytes().windows(needle.len()).position(|window| window.eq_ignore_ascii_case(needle.as_bytes()))
}

/// Where the store connects, as `postgres://user@host:port/database`: the
/// password is never part of it.
pub(super) fn describe(options: &PgConnectOptions) -> String {
    format!(
        "postgres://{}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or(options.get_username()),
    )
}

/// Maps an error of an operation on `table` at `server` (a [`describe`]d
/// target, so without password).
pub(super) fn store_error(error: sqlx::Error, server: &str, table: &TableName) -> StoreError {
    match &error {
        sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::Decode(_)
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::TypeNotFound { .. } => {
            StoreError::Corrupt { store: KIND, message: format!("table {table} on {server}: {error}") }
        }
        sqlx::Error::Database(db) if db.code().as_deref() == Some(UNDEFINED_TABLE) => StoreError::Unavailable {
            store: KIND,
            message: format!("{server}: table {table} does not exist; run PostgresStore::migrate() first ({error})"),
            source: Some(Box::new(error)),
        },
        _ => StoreError::Unavailable {
            store: KIND,
            message: format!("{server}: {error}"),
            source: Some(Box::new(error)),
        },
    }
}

/// Maps an error of connecting to `url`, whose password must not leak
/// through the error's message or its source.
pub(super) fn connect_error(error: sqlx::Error, url: &str) -> StoreError {
    let passwords: Vec<&str> =
        password_ranges(url).into_iter().map(|range| &url[range]).filter(|p| !p.is_empty()).collect();
    let leaks = |text: &str| passwords.iter().any(|p| text.contains(p));
    let mut message = format!("{}: {error}", redact_url(url));
    for password in &passwords {
        message = message.replace(password, MASK);
    }
    let source: Option<crate::store::BoxError> = (!leaks(&error.to_string())).then(|| Box::new(error) as _);
    StoreError::Unavailable { store: KIND, message, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords_in_every_form() {
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
            assert_eq!(redact_url(url), expected, "{url}");
            assert!(!redact_url(url).contains("hunter2"));
        }
    }

    #[test]
    fn connect_errors_never_carry_the_password() {
        let url = "postgres://idem:hunter2@db/app";
        let error = connect_error(sqlx::Error::Configuration("bad url postgres://idem:hunter2@db/app".into()), url);
        let StoreError::Unavailable { message, source, .. } = &error else {
            panic!("expected unavailable, got {error:?}");
        };
        assert!(!message.contains("hunter2") && !format!("{error:?}").contains("hunter2"), "{message}");
        assert!(source.is_none(), "a source quoting the password is dropped");
        let error = connect_error(sqlx::Error::PoolTimedOut, url);
        assert!(!format!("{error} {error:?}").contains("hunter2"));
        assert!(error.to_string().contains("postgres://idem:***@db/app"), "{error}");
    }

    #[test]
    fn describes_the_target_without_password() {
        let options: PgConnectOptions = "postgres://idem:hunter2@db:6543/app".parse().unwrap();
        assert_eq!(describe(&options), "postgres://idem@db:6543/app");
    }
}

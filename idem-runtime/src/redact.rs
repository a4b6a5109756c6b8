//! Masking passwords in connection URLs, for logs and errors.

use std::ops::Range;

/// What replaces a password.
pub(crate) const MASK: &str = "***";

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
pub(crate) fn password_ranges(url: &str) -> Vec<Range<usize>> {
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
}

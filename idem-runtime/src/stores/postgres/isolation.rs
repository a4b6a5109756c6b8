//! READ COMMITTED for every connection of the store, whatever the
//! database's or the role's default.
//!
//! The claim statement relies on it: at READ COMMITTED, `INSERT ... ON
//! CONFLICT DO UPDATE` waits for a concurrent claimer and then works on the
//! row it committed. At REPEATABLE READ or SERIALIZABLE the same statement
//! fails with a serialization error instead ("could not serialize access
//! due to concurrent update"), and a burst of retries of one request would
//! turn into 503s. The level is a startup option of each connection
//! (`-c default_transaction_isolation=...`), so it costs no statement.

use sqlx::postgres::PgConnectOptions;

/// The connection setting, as `PgConnectOptions::options` takes it.
const SETTING: (&str, &str) = ("default_transaction_isolation", "read committed");

/// [`SETTING`] as it reads once written into the startup options (the
/// space escaped), to tell whether options already end with it.
const WRITTEN: &str = r"-c default_transaction_isolation=read\ committed";

/// `options` with READ COMMITTED as the default isolation level of every
/// connection opened from them. Options that already end with it are
/// returned as they are, so applying it twice adds nothing.
pub(super) fn read_committed(options: PgConnectOptions) -> PgConnectOptions {
    if options.get_options().is_some_and(|written| written.ends_with(WRITTEN)) {
        options
    } else {
        // Startup options apply in order: ours, last, overrides any earlier
        // `default_transaction_isolation` of the URL.
        options.options([SETTING])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_the_setting_once_and_after_the_callers_own() {
        let options: PgConnectOptions = "postgres://idem@db/app".parse().unwrap();
        let once = read_committed(options);
        assert_eq!(once.get_options(), Some(WRITTEN));
        assert_eq!(read_committed(once).get_options(), Some(WRITTEN));
        let theirs: PgConnectOptions =
            "postgres://idem@db/app?options=-c%20default_transaction_isolation%3Dserializable".parse().unwrap();
        let written = read_committed(theirs).get_options().unwrap().to_owned();
        assert!(written.starts_with("-c default_transaction_isolation=serializable"), "{written}");
        assert!(written.ends_with(WRITTEN), "{written}");
    }
}

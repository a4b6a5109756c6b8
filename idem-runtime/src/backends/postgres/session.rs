//! The settings of every connection of the store, as startup options (so
//! they cost no statement): READ COMMITTED whatever the database's or the
//! role's default, and bounds on how long a session that went silent can
//! hold a row lock.
//!
//! The claim statement relies on it: at READ COMMITTED, `INSERT ... ON
//! CONFLICT DO UPDATE` waits for a concurrent claimer and then works on the
//! row it committed. At REPEATABLE READ or SERIALIZABLE the same statement
//! fails with a serialization error instead ("could not serialize access
//! due to concurrent update"), and a burst of retries of one request would
//! turn into 503s. The level is a startup option of each connection
//! (`-c default_transaction_isolation=...`), so it costs no statement.

//!
//! A session whose client went away in the middle of a transaction (a host
//! that vanished, a process frozen or killed between a transactional
//! completion and its `COMMIT`) keeps the locks of its rows, a record's
//! included, until the server notices: with the operating system's
//! defaults, two hours for a vanished host, and never for a client that is
//! alive but stuck. Claims of that key wait for the lock meanwhile. So the
//! server probes each connection after [`KEEPALIVE_IDLE`] seconds of
//! silence (`tcp_keepalives_*`: a vanished host is found within about half
//! a minute), and ends a session left idle inside a transaction for
//! [`IDLE_IN_TRANSACTION`] (`idle_in_transaction_session_timeout`): a
//! transactional handler that keeps its transaction idle longer than that
//! (a very slow call to another system) has it rolled back. The timeout is
//! set on pools the store opens itself only: a pool handed to the store is
//! the application's too, and its own transactions are its own business.
//! A setting the connection options already carry (from the URL's
//! `options`, say) is kept as given.

use sqlx::postgres::PgConnectOptions;

/// Longest a session may stay idle inside a transaction.
pub(super) const IDLE_IN_TRANSACTION: &str = "5min";

/// Seconds of silence after which the server probes a connection.
pub(super) const KEEPALIVE_IDLE: &str = "15";

/// The bounds on silent sessions, as `PgConnectOptions::options` takes
/// them: a probe every 5 s after [`KEEPALIVE_IDLE`], four unanswered end the
/// connection; and, on the store's own pools, [`IDLE_IN_TRANSACTION`].
const BOUNDS: [(&str, &str); 4] = [
    ("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION),
    ("tcp_keepalives_idle", KEEPALIVE_IDLE),
    ("tcp_keepalives_interval", "5"),
    ("tcp_keepalives_count", "4"),
];

/// Whose pool the settings are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pool {
    /// One the store opens itself: every bound.
    Own,
    /// One the application handed to the store: the keepalives only.
    Given,
}

/// The connection setting, as `PgConnectOptions::options` takes it.
const SETTING: (&str, &str) = ("default_transaction_isolation", "read committed");

/// [`SETTING`] as it reads once written into the startup options (the
/// space escaped), to tell whether options already end with it.
const WRITTEN: &str = r"-c default_transaction_isolation=read\ committed";

/// `options` with the store's settings for every connection opened from
/// them: the [`BOUNDS`] (for `pool`) the options do not set already, and
/// READ COMMITTED as the default isolation level. Options that already end
/// with it are returned as they are, so applying it twice adds nothing.
pub(super) fn session_settings(options: PgConnectOptions, pool: Pool) -> PgConnectOptions {
    if options.get_options().is_some_and(|written| written.ends_with(WRITTEN)) {
        return options;
    }
    let given = options.get_options().unwrap_or("").to_owned();
    let bounds = BOUNDS
        .into_iter()
        .filter(|(name, _)| pool == Pool::Own || *name != "idle_in_transaction_session_timeout")
        .filter(|(name, _)| !given.contains(&format!("-c {name}=")));
    // Startup options apply in order: ours, last, overrides any earlier
    // `default_transaction_isolation` of the URL.
    options.options(bounds).options([SETTING])
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS_WRITTEN: &str = "-c idle_in_transaction_session_timeout=5min -c tcp_keepalives_idle=15 \
                                  -c tcp_keepalives_interval=5 -c tcp_keepalives_count=4";

    #[test]
    fn adds_the_settings_once_and_the_isolation_after_the_callers_own() {
        let options: PgConnectOptions = "postgres://idem@db/app".parse().unwrap();
        let once = session_settings(options.clone(), Pool::Own);
        let expected = format!("{BOUNDS_WRITTEN} {WRITTEN}");
        assert_eq!(once.get_options(), Some(expected.as_str()));
        assert_eq!(session_settings(once, Pool::Own).get_options(), Some(expected.as_str()));
        let given = session_settings(options, Pool::Given);
        let written = given.get_options().unwrap();
        assert!(!written.contains("idle_in_transaction") && written.contains("tcp_keepalives_idle=15"), "{written}");
        let theirs: PgConnectOptions =
            "postgres://idem@db/app?options=-c%20default_transaction_isolation%3Dserializable".parse().unwrap();
        let written = session_settings(theirs, Pool::Own).get_options().unwrap().to_owned();
        assert!(written.starts_with("-c default_transaction_isolation=serializable"), "{written}");
        assert!(written.ends_with(WRITTEN), "{written}");
    }

    #[test]
    fn a_bound_the_caller_set_is_kept() {
        let theirs: PgConnectOptions =
            "postgres://idem@db/app?options=-c%20idle_in_transaction_session_timeout%3D30s".parse().unwrap();
        let written = session_settings(theirs, Pool::Own).get_options().unwrap().to_owned();
        assert!(
            written.starts_with("-c idle_in_transaction_session_timeout=30s -c tcp_keepalives_idle=15"),
            "{written}"
        );
        assert_eq!(written.matches("idle_in_transaction_session_timeout").count(), 1, "{written}");
    }
}

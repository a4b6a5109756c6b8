//! From sqlx errors to [`StoreError`], without ever showing a password.

use sqlx::postgres::PgConnectOptions;

use super::KIND;
use super::sql::TableName;
use crate::redact::Redacted;
use crate::store::StoreError;

/// Undefined table: the store was used before [`super::PostgresStore::migrate`].
const UNDEFINED_TABLE: &str = "42P01";

/// Undefined function: the claim function of a schema made before it.
const UNDEFINED_FUNCTION: &str = "42883";

/// SQLSTATE class 54: program limit exceeded.
const PROGRAM_LIMIT_EXCEEDED: &str = "54";

/// SQLSTATE class 22: data exception (a text with a NUL byte, 22021; a
/// value out of range, 22003).
const DATA_EXCEPTION: &str = "22";

/// Whether the server refused a statement for the values it was given, as
/// it will every time they are sent again (SQLSTATE classes 22 and 54).
fn refused_for_good(code: &str) -> bool {
    code.starts_with(DATA_EXCEPTION) || code.starts_with(PROGRAM_LIMIT_EXCEEDED)
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

/// Undefined column: a table made by an earlier version.
const UNDEFINED_COLUMN: &str = "42703";

/// Whether the server refused a statement for naming a column the table
/// does not have.
pub(super) fn is_undefined_column(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some(UNDEFINED_COLUMN))
}

/// SQLSTATE class 57P: the server is shutting down or starting (57P01
/// `admin_shutdown`, 57P02 `crash_shutdown`, 57P03 `cannot_connect_now`).
const SHUTTING_DOWN: &str = "57P";

/// Whether `error` says the statement's connection was dropped (the server
/// restarted, the link broke), so that the pool gives another one to a
/// statement sent again.
pub(super) fn is_dropped(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| code.starts_with(SHUTTING_DOWN)),
        _ => false,
    }
}

/// Runs `statement()`, and once more if its connection turns out to have
/// been dropped: a pool hands out a connection opened before a server
/// restart until it is used, and only that use finds it dead. For
/// statements safe to run twice (a claim with its token, a renewal, a
/// read): one sent just before the link broke may have run.
pub(super) async fn repeatable<T, Fut>(statement: impl Fn() -> Fut) -> Result<T, sqlx::Error>
where
    Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
{
    match statement().await {
        Err(error) if is_dropped(&error) => statement().await,
        result => result,
    }
}

/// Whether the server refused a statement for calling a function it does
/// not have.
pub(super) fn is_undefined_function(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some(UNDEFINED_FUNCTION))
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
        // Class 54, program limit exceeded (a value over 1 GiB, say), or
        // class 22, data exception (a step's name with a NUL byte, which
        // text cannot hold): the server will never take these values, so
        // they are refused for good, never tried again (the runtime tries
        // again every error but this one, until the record's TTL).
        sqlx::Error::Database(db) if db.code().is_some_and(|code| refused_for_good(&code)) => {
            StoreError::Full { store: KIND, detail: format!("table {table} on {server} refused a value: {error}") }
        }
        // A table an earlier version made: every operation but a claim
        // (which checks first) finds out here.
        sqlx::Error::Database(db) if db.code().as_deref() == Some(UNDEFINED_COLUMN) => StoreError::Misconfigured {
            store: KIND,
            message: format!(
                "table {table} on {server} was made by an earlier version and lacks columns this one reads and \
                 writes: run PostgresStore::migrate() ({error})"
            ),
        },
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
    let redacted = Redacted::new(url);
    let message = redacted.scrub(&format!("{}: {error}", redacted.as_str()));
    let source: Option<crate::store::BoxError> =
        (!redacted.leaks_into(&error.to_string())).then(|| Box::new(error) as _);
    StoreError::Unavailable { store: KIND, message, source }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn data_exceptions_and_program_limits_are_refused_for_good() {
        for code in ["22021", "22P05", "22003", "54000", "54001"] {
            assert!(refused_for_good(code), "{code}");
        }
        // Connection failures, shutdowns, lock and statement timeouts,
        // serialization failures, a missing table: tried again.
        for code in ["08006", "57P01", "55P03", "57014", "40001", "42P01", "XX000"] {
            assert!(!refused_for_good(code), "{code}");
        }
    }

    #[test]
    fn describes_the_target_without_password() {
        let options: PgConnectOptions = "postgres://idem:hunter2@db:6543/app".parse().unwrap();
        assert_eq!(describe(&options), "postgres://idem@db:6543/app");
    }
}

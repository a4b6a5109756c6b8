//! What a failover can lose: the server's standbys and whether they
//! replicate synchronously, read at connect.
//!
//! A standby that replicates asynchronously receives a commit some moments
//! after the primary answered it. Promoted in a failover, it lacks the
//! claims and completions of those moments: a retry then finds a key free
//! (or a lease that never completed) and runs its handler again. Only
//! synchronous replication (`synchronous_standby_names` set, with
//! `synchronous_commit` at `on`, `remote_write` or `remote_apply`) makes a
//! commit wait until a standby has it, and only a failover to such a
//! standby (Patroni's `synchronous_mode`, say) keeps every answered write.

use sqlx::Row;
use sqlx::postgres::PgPool;

use super::KIND;
use crate::store::StoreError;

/// What [`PostgresStore::check_server`](super::PostgresStore::check_server)
/// does when the server has standbys that replicate asynchronously.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnAsyncStandby {
    /// Log a warning naming the risk and the settings, and connect anyway:
    /// the default of [`PostgresStore::connect`](super::PostgresStore::connect),
    /// as asynchronous standbys are the common way to run Postgres.
    #[default]
    Warn,
    /// Refuse with [`StoreError::Misconfigured`]: a failover to such a
    /// standby can lose the writes of its last moments, and a retry then
    /// runs a handler a second time.
    Refuse,
}

/// What the server says about its replication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Replication {
    /// Standbys streaming from this server (`pg_stat_replication`).
    pub(super) standbys: i64,
    /// `synchronous_standby_names`.
    pub(super) synchronous_standby_names: String,
    /// `synchronous_commit`.
    pub(super) synchronous_commit: String,
}

impl Replication {
    /// Whether a commit this server answered may be missing on a standby
    /// that a failover promotes.
    pub(super) fn is_asynchronous(&self) -> bool {
        let waits = !self.synchronous_standby_names.trim().is_empty()
            && matches!(self.synchronous_commit.as_str(), "on" | "remote_write" | "remote_apply");
        self.standbys > 0 && !waits
    }
}

/// Reads the server's replication.
async fn read(pool: &PgPool) -> Result<Replication, sqlx::Error> {
    // Rows of pg_stat_replication are visible to every role (their details
    // need pg_read_all_stats): the count is enough. A sender of a logical
    // replication slot feeds a change stream (a CDC tool), not a standby a
    // failover could promote.
    let row = sqlx::query(
        "SELECT (SELECT count(*) FROM pg_stat_replication AS r \
                 WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots AS s \
                                   WHERE s.active_pid = r.pid AND s.slot_type = 'logical')) AS standbys, \
                current_setting('synchronous_standby_names') AS names, \
                current_setting('synchronous_commit') AS commit",
    )
    .fetch_one(pool)
    .await?;
    Ok(Replication {
        standbys: row.try_get("standbys")?,
        synchronous_standby_names: row.try_get("names")?,
        synchronous_commit: row.try_get("commit")?,
    })
}

/// Reads the replication of the server behind `pool` (`server` names it,
/// without password) and acts on it as `on_async_standby` says. A server
/// that does not answer the check (a restricted role, a proxy) is logged
/// and accepted: its replication is then the operator's to check.
pub(super) async fn check(pool: &PgPool, server: &str, on_async_standby: OnAsyncStandby) -> Result<(), StoreError> {
    let replication = match read(pool).await {
        Ok(replication) => replication,
        Err(error) => {
            tracing::warn!(
                server,
                %error,
                "could not read the Postgres server's replication; a failover to an asynchronous standby can lose \
                 claims and completions"
            );
            return Ok(());
        }
    };
    if !replication.is_asynchronous() {
        return Ok(());
    }
    let message = format!(
        "{server} has {} standby(s) replicating asynchronously (synchronous_standby_names = {:?}, \
         synchronous_commit = {}): a failover to one can lose the claims and completions of its last moments, and \
         a retry then runs its handler a second time; set synchronous_standby_names (with synchronous_commit = on) \
         and fail over to a synchronous standby only",
        replication.standbys, replication.synchronous_standby_names, replication.synchronous_commit
    );
    match on_async_standby {
        OnAsyncStandby::Refuse => Err(StoreError::Misconfigured { store: KIND, message }),
        OnAsyncStandby::Warn => {
            tracing::warn!("{message}");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replication(standbys: i64, names: &str, commit: &str) -> Replication {
        Replication { standbys, synchronous_standby_names: names.to_owned(), synchronous_commit: commit.to_owned() }
    }

    #[test]
    fn standbys_are_asynchronous_unless_commits_wait_for_them() {
        assert!(!replication(0, "", "on").is_asynchronous(), "no standby, nothing to lose at failover");
        assert!(replication(1, "", "on").is_asynchronous());
        assert!(replication(2, " ", "on").is_asynchronous());
        assert!(!replication(1, "*", "on").is_asynchronous());
        assert!(!replication(2, "FIRST 1 (a, b)", "remote_apply").is_asynchronous());
        assert!(!replication(1, "ANY 1 (a)", "remote_write").is_asynchronous());
        for commit in ["local", "off"] {
            assert!(replication(1, "*", commit).is_asynchronous(), "{commit} does not wait for the standby");
        }
    }
}

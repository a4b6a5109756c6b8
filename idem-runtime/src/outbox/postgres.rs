//! The outbox on Postgres: a table written in the business transaction and
//! read with `FOR UPDATE SKIP LOCKED`, so that many consumers share it
//! without waiting for each other, and a visibility deadline per row.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::{PgConnection, PgPool, Row};
use tokio::time::Instant;

use super::{DEFAULT_VISIBILITY, Event, Message, POLL_INTERVAL, RECEIVE_WAIT, Receipt, Transport};
use crate::store::StoreError;

const KIND: &str = "postgres";

/// The table, created if missing by [`PostgresOutbox::migrate`].
const SCHEMA: &str = r"
CREATE TABLE IF NOT EXISTS idem_outbox (
    seq          bigserial PRIMARY KEY,
    id           text NOT NULL,
    topic        text NOT NULL,
    payload      text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    visible_at   timestamptz NOT NULL DEFAULT now(),
    deliveries   integer NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS idem_outbox_visible ON idem_outbox (visible_at);
";

/// Takes up to `$1` visible rows (of topic `$3`, unless null), oldest
/// first, skipping those another receiver holds locked, and hides them for
/// `$2` milliseconds: one statement, so two receivers never get the same
/// row at once.
const RECEIVE: &str = r"
UPDATE idem_outbox AS o
   SET visible_at = now() + $2 * interval '1 millisecond', deliveries = o.deliveries + 1
  FROM (SELECT seq FROM idem_outbox WHERE visible_at <= now() AND ($3::text IS NULL OR topic = $3)
         ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED) AS due
 WHERE o.seq = due.seq
RETURNING o.seq, o.id, o.topic, o.payload, o.deliveries";

/// The outbox table `idem_outbox` of a database.
///
/// A handler [publishes](PostgresOutbox::publish) on its own transaction
/// (the [`Tx`](crate::Tx) of the transactional mode): the event is
/// committed with the business rows, or rolled back with them. Consumers
/// [receive](Transport::receive) rows, which stay hidden for the
/// visibility timeout; an [acknowledged](Transport::ack) row is deleted,
/// any other is delivered again once its timeout lapses.
#[derive(Debug, Clone)]
pub struct PostgresOutbox {
    pool: PgPool,
    visibility: Duration,
    topic: Option<String>,
}

fn fail(error: sqlx::Error) -> StoreError {
    StoreError::unavailable(KIND, error)
}

impl PostgresOutbox {
    /// The outbox of `pool`'s database, with the
    /// [default visibility timeout](DEFAULT_VISIBILITY).
    pub fn new(pool: PgPool) -> Self {
        Self { pool, visibility: DEFAULT_VISIBILITY, topic: None }
    }

    /// How long a received message stays hidden unless acknowledged.
    pub fn visibility(mut self, visibility: Duration) -> Self {
        self.visibility = visibility;
        self
    }

    /// Receives (and counts in the backlog) only events of `topic`: the
    /// table may carry the events of several consumers, and one never
    /// sees, nor acknowledges, another's.
    pub fn topic(mut self, topic: &str) -> Self {
        self.topic = Some(topic.to_owned());
        self
    }

    /// Creates the table if it is missing; safe to run at every start, from
    /// many processes at once (they take turns on an advisory lock).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(fail)?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('idem-runtime migrate idem_outbox'))")
            .execute(&mut *tx)
            .await
            .map_err(fail)?;
        sqlx::raw_sql(SCHEMA).execute(&mut *tx).await.map_err(fail)?;
        tx.commit().await.map_err(fail)
    }

    /// Writes `event` on `connection`: pass the transaction of the write
    /// that causes it, so that both commit or neither does.
    pub async fn publish(connection: &mut PgConnection, event: &Event) -> Result<(), sqlx::Error> {
        sqlx::query("INSERT INTO idem_outbox (id, topic, payload) VALUES ($1, $2, $3)")
            .bind(&event.id)
            .bind(&event.topic)
            .bind(&event.payload)
            .execute(connection)
            .await?;
        Ok(())
    }

    async fn take(&self, max: usize) -> Result<Vec<Message>, StoreError> {
        let limit = i64::try_from(max.max(1)).unwrap_or(i64::MAX);
        let visibility = i64::try_from(self.visibility.as_millis()).unwrap_or(i64::MAX);
        let receive = sqlx::query(RECEIVE).bind(limit).bind(visibility).bind(self.topic.as_deref());
        let mut rows = receive.fetch_all(&self.pool).await.map_err(fail)?;
        // RETURNING follows no order: oldest first, as selected.
        rows.sort_by_key(|row| row.try_get::<i64, _>("seq").unwrap_or_default());
        rows.iter()
            .map(|row| {
                let deliveries: i32 = row.try_get("deliveries")?;
                Ok(Message {
                    id: row.try_get("id")?,
                    topic: row.try_get("topic")?,
                    payload: row.try_get("payload")?,
                    redelivered: deliveries > 1,
                    receipt: Receipt::Sequence(row.try_get("seq")?),
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(fail)
    }
}

#[async_trait]
impl Transport for PostgresOutbox {
    async fn receive(&self, max: usize) -> Result<Vec<Message>, StoreError> {
        let deadline = Instant::now() + RECEIVE_WAIT;
        loop {
            let messages = self.take(max).await?;
            if !messages.is_empty() || Instant::now() >= deadline {
                return Ok(messages);
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    async fn ack(&self, message: &Message) -> Result<(), StoreError> {
        if let Receipt::Sequence(sequence) = message.receipt {
            sqlx::query("DELETE FROM idem_outbox WHERE seq = $1")
                .bind(sequence)
                .execute(&self.pool)
                .await
                .map_err(fail)?;
        }
        Ok(())
    }

    async fn backlog(&self) -> Result<u64, StoreError> {
        let sql = "SELECT count(*) FROM idem_outbox WHERE $1::text IS NULL OR topic = $1";
        let count: i64 =
            sqlx::query_scalar(sql).bind(self.topic.as_deref()).fetch_one(&self.pool).await.map_err(fail)?;
        Ok(count.max(0) as u64)
    }
}

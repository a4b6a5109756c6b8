//! The outbox on Redis: a stream written in the same script (or `MULTI`)
//! as the business write, read through a consumer group: an entry stays
//! pending until acknowledged, and one idle longer than the visibility
//! timeout is claimed by the next receiver (`XAUTOCLAIM`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use redis::aio::ConnectionManager;
use redis::streams::{StreamAutoClaimOptions, StreamAutoClaimReply, StreamId, StreamReadOptions, StreamReadReply};
use redis::{AsyncCommands, Cmd};

use super::{DEFAULT_VISIBILITY, Event, Message, RECEIVE_WAIT, Receipt, Transport};
use crate::redact::Redacted;
use crate::store::StoreError;
use crate::stores::RedisStore;

const KIND: &str = "redis";

/// A Redis Stream and one consumer group reading it, as one consumer.
///
/// Producers append entries with the fields `id`, `topic` and `payload`
/// ([`RedisOutbox::xadd`], or `XADD` in their own Lua script) in the same
/// atomic step as the business write. Consumers of the group share the
/// stream; each [receives](Transport::receive) new entries (`XREADGROUP`)
/// and entries another consumer left pending longer than the visibility
/// timeout (`XAUTOCLAIM`). [Acknowledging](Transport::ack) an entry
/// removes it (`XACK` and `XDEL` in one `MULTI`): the stream belongs to this
/// one group.
///
/// The outbox has a connection of its own: a receive blocks it for up to a
/// second while it waits for entries.
#[derive(Clone)]
pub struct RedisOutbox {
    connection: ConnectionManager,
    stream: String,
    group: String,
    consumer: String,
    visibility: Duration,
    /// Where the next `XAUTOCLAIM` scan starts.
    cursor: Arc<Mutex<String>>,
}

impl std::fmt::Debug for RedisOutbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisOutbox")
            .field("stream", &self.stream)
            .field("group", &self.group)
            .field("consumer", &self.consumer)
            .finish_non_exhaustive()
    }
}

fn fail(error: redis::RedisError) -> StoreError {
    StoreError::unavailable(KIND, error)
}

impl RedisOutbox {
    /// Connects to `url` as `consumer` of `group` on `stream`, creating the
    /// stream and the group if missing, with the
    /// [default visibility timeout](DEFAULT_VISIBILITY). Errors never
    /// contain the URL's password.
    pub async fn connect(url: &str, stream: &str, group: &str, consumer: &str) -> Result<Self, StoreError> {
        let redacted = Redacted::new(url);
        let masked = |error: redis::RedisError| StoreError::Unavailable {
            store: KIND,
            message: format!("{} ({})", redacted.scrub(&error.to_string()), redacted.as_str()),
            source: None,
        };
        let client = redis::Client::open(url).map_err(masked)?;
        let config = RedisStore::default_config().set_response_timeout(Some(RECEIVE_WAIT + Duration::from_secs(2)));
        let mut connection = ConnectionManager::new_with_config(client, config).await.map_err(masked)?;
        let created: redis::RedisResult<()> = connection.xgroup_create_mkstream(stream, group, "0").await;
        match created {
            Ok(()) => {}
            Err(error) if error.code() == Some("BUSYGROUP") => {}
            Err(error) => return Err(fail(error)),
        }
        Ok(Self {
            connection,
            stream: stream.to_owned(),
            group: group.to_owned(),
            consumer: consumer.to_owned(),
            visibility: DEFAULT_VISIBILITY,
            cursor: Arc::new(Mutex::new("0-0".to_owned())),
        })
    }

    /// How long a received message stays pending before another consumer
    /// of the group may claim it.
    pub fn visibility(mut self, visibility: Duration) -> Self {
        self.visibility = visibility;
        self
    }

    /// The stream's key.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The `XADD` that appends `event` to `stream`: put it in the same
    /// `MULTI` pipeline as the business write.
    pub fn xadd(stream: &str, event: &Event) -> Cmd {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(stream)
            .arg("*")
            .arg("id")
            .arg(&event.id)
            .arg("topic")
            .arg(&event.topic)
            .arg("payload")
            .arg(&event.payload);
        cmd
    }

    fn message(&self, entry: &StreamId, redelivered: bool) -> Message {
        let field = |name: &str| entry.get::<String>(name);
        Message {
            // An entry written without an id is still delivered once per
            // entry: its stream id stands in.
            id: field("id").unwrap_or_else(|| format!("{}:{}", self.stream, entry.id)),
            topic: field("topic").unwrap_or_default(),
            payload: field("payload").unwrap_or_default(),
            redelivered,
            receipt: Receipt::Entry(entry.id.clone()),
        }
    }

    /// Entries other consumers left pending longer than the visibility
    /// timeout, now this consumer's.
    async fn claim_idle(&self, max: usize) -> Result<Vec<Message>, StoreError> {
        let start = self.cursor.lock().clone();
        let idle = u64::try_from(self.visibility.as_millis()).unwrap_or(u64::MAX);
        let options = StreamAutoClaimOptions::default().count(max);
        let mut connection = self.connection.clone();
        let reply: StreamAutoClaimReply = connection
            .xautoclaim_options(&self.stream, &self.group, &self.consumer, idle, start, options)
            .await
            .map_err(fail)?;
        *self.cursor.lock() = reply.next_stream_id;
        Ok(reply.claimed.iter().map(|entry| self.message(entry, true)).collect())
    }
}

#[async_trait]
impl Transport for RedisOutbox {
    async fn receive(&self, max: usize) -> Result<Vec<Message>, StoreError> {
        let max = max.max(1);
        let claimed = self.claim_idle(max).await?;
        if !claimed.is_empty() {
            return Ok(claimed);
        }
        let wait = usize::try_from(RECEIVE_WAIT.as_millis()).unwrap_or(usize::MAX);
        let options = StreamReadOptions::default().group(&self.group, &self.consumer).count(max).block(wait);
        let mut connection = self.connection.clone();
        let reply: Option<StreamReadReply> =
            connection.xread_options(&[&self.stream], &[">"], &options).await.map_err(fail)?;
        let entries = reply.into_iter().flat_map(|reply| reply.keys).flat_map(|key| key.ids);
        Ok(entries.map(|entry| self.message(&entry, false)).collect())
    }

    async fn ack(&self, message: &Message) -> Result<(), StoreError> {
        let Receipt::Entry(entry) = &message.receipt else { return Ok(()) };
        let mut connection = self.connection.clone();
        redis::pipe()
            .atomic()
            .xack(&self.stream, &self.group, &[entry])
            .ignore()
            .xdel(&self.stream, &[entry])
            .ignore()
            .query_async::<()>(&mut connection)
            .await
            .map_err(fail)
    }

    async fn backlog(&self) -> Result<u64, StoreError> {
        let mut connection = self.connection.clone();
        connection.xlen(&self.stream).await.map_err(fail)
    }
}

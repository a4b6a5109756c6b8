//! The outbox on Redis: a stream written in the same script (or `MULTI`)
//! as the business write, read through a consumer group: an entry stays
//! pending until acknowledged, and one idle longer than the visibility
//! timeout is claimed by the next receiver (`XAUTOCLAIM`). On one server
//! or a Redis Cluster: every command touches the stream's key alone.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use redis::{AsyncCommands, Cmd, Value};

use super::{DEFAULT_VISIBILITY, Event, Message, RECEIVE_WAIT, Receipt, Transport};
use crate::backends::{RedisConnection, RedisStore};
use crate::redact::Redacted;
use crate::store::StoreError;

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
/// The stream may live on one server or on a Redis Cluster
/// ([`RedisOutbox::connect`] takes a `redis-cluster://` URL too). Every
/// command the outbox sends touches the stream's key alone, the
/// acknowledgement's `MULTI` included, so the cluster routes each to the
/// stream's slot; on a cluster, give the stream a `{hash tag}` shared with
/// the keys of the business write that appends to it (such as
/// `{orders}:events` beside `{orders}:order:<id>`), since that write's
/// script or `MULTI` must touch keys of one slot.
///
/// The outbox has a connection of its own: a receive blocks it for up to a
/// second while it waits for entries.
#[derive(Clone)]
pub struct RedisOutbox {
    connection: RedisConnection,
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
    /// [default visibility timeout](DEFAULT_VISIBILITY). `url` is one server
    /// (`redis://`, `rediss://`) or a Redis Cluster's seed nodes
    /// (`redis-cluster://host:port,host:port,...`), as for
    /// [`RedisStore::connect`]. Errors never contain the URL's password.
    pub async fn connect(url: &str, stream: &str, group: &str, consumer: &str) -> Result<Self, StoreError> {
        let redacted = Redacted::new(url);
        let masked = |error: redis::RedisError| StoreError::Unavailable {
            store: KIND,
            message: format!("{} ({})", redacted.scrub(&error.to_string()), redacted.as_str()),
            source: None,
        };
        // A receive's `BLOCK` holds its reply for up to `RECEIVE_WAIT`.
        let config = RedisStore::default_config().set_response_timeout(Some(RECEIVE_WAIT + Duration::from_secs(2)));
        let mut connection = RedisConnection::open(url, &config).await.map_err(masked)?;
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

    fn message(&self, entry: Entry, redelivered: bool) -> Message {
        let field = |name: &str| {
            let (_, value) = entry.fields.iter().find(|(field, _)| field.as_slice() == name.as_bytes())?;
            String::from_utf8(value.clone()).ok()
        };
        Message {
            // An entry written without a readable id is still delivered
            // once per entry: its stream id stands in.
            id: field("id").unwrap_or_else(|| format!("{}:{}", self.stream, entry.id)),
            topic: field("topic").unwrap_or_default(),
            payload: field("payload").unwrap_or_default(),
            redelivered,
            receipt: Receipt::Entry(entry.id),
        }
    }

    /// Runs `cmd`; if the group is gone (the stream was deleted or the
    /// server lost it), creates it again from the stream's start (whatever
    /// comes again, the inbox absorbs) and runs `cmd` once more.
    async fn query(&self, cmd: &Cmd) -> Result<Value, StoreError> {
        let mut connection = self.connection.clone();
        // Sent again on a connection found dropped (a restarted server):
        // a read or an acknowledgement repeated is harmless, and entries a
        // lost read delivered stay pending, for the next claim of idle ones.
        let sent = self.connection.repeatable(|mut connection| async move { cmd.query_async(&mut connection).await });
        match sent.await {
            Err(error) if error.code() == Some("NOGROUP") => {
                tracing::warn!(stream = %self.stream, group = %self.group, "the consumer group was gone; creating it again");
                let created: redis::RedisResult<()> =
                    connection.xgroup_create_mkstream(&self.stream, &self.group, "0").await;
                match created {
                    Err(error) if error.code() != Some("BUSYGROUP") => return Err(fail(error)),
                    _ => {}
                }
                cmd.query_async(&mut connection).await.map_err(fail)
            }
            result => result.map_err(fail),
        }
    }

    /// Entries other consumers left pending longer than the visibility
    /// timeout, now this consumer's.
    async fn claim_idle(&self, max: usize) -> Result<Vec<Message>, StoreError> {
        let start = self.cursor.lock().clone();
        let idle = u64::try_from(self.visibility.as_millis()).unwrap_or(u64::MAX);
        let mut cmd = redis::cmd("XAUTOCLAIM");
        cmd.arg(&self.stream).arg(&self.group).arg(&self.consumer).arg(idle).arg(start).arg("COUNT").arg(max);
        // [next cursor, [entries], [deleted ids]]
        let reply = self.query(&cmd).await?;
        let Value::Array(parts) = reply else { return Ok(Vec::new()) };
        let next = parts.first().and_then(text).unwrap_or_else(|| "0-0".to_owned());
        *self.cursor.lock() = next;
        let entries = parts.get(1).map(entries).unwrap_or_default();
        Ok(entries.into_iter().map(|entry| self.message(entry, true)).collect())
    }
}

/// One stream entry as the server sent it. Read leniently, value by value:
/// an entry that cannot be read (a field name that is not UTF-8, say)
/// must not keep the entries beside it from being delivered.
struct Entry {
    id: String,
    fields: Vec<(Vec<u8>, Vec<u8>)>,
}

fn bytes(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Some(bytes.clone()),
        Value::SimpleString(text) => Some(text.clone().into_bytes()),
        Value::VerbatimString { text, .. } => Some(text.clone().into_bytes()),
        Value::Int(number) => Some(number.to_string().into_bytes()),
        _ => None,
    }
}

fn text(value: &Value) -> Option<String> {
    bytes(value).and_then(|bytes| String::from_utf8(bytes).ok())
}

/// The entries of an `[[id, [field, value, ...]], ...]` array; deleted
/// entries (nil) and unreadable ones are left out.
fn entries(value: &Value) -> Vec<Entry> {
    let Value::Array(items) = value else { return Vec::new() };
    items.iter().filter_map(entry).collect()
}

fn entry(value: &Value) -> Option<Entry> {
    let Value::Array(pair) = value else { return None };
    let [id, fields] = pair.as_slice() else { return None };
    let fields = match fields {
        Value::Array(flat) => {
            flat.chunks_exact(2).filter_map(|pair| Some((bytes(&pair[0])?, bytes(&pair[1])?))).collect()
        }
        Value::Map(pairs) => pairs.iter().filter_map(|(name, value)| Some((bytes(name)?, bytes(value)?))).collect(),
        _ => Vec::new(),
    };
    Some(Entry { id: text(id)?, fields })
}

/// The entries of an `XREADGROUP` reply: nil, or each stream with its
/// entries (an array of pairs in RESP2, a map in RESP3).
fn read_entries(reply: &Value) -> Vec<Entry> {
    match reply {
        Value::Array(streams) => streams
            .iter()
            .filter_map(|stream| match stream {
                Value::Array(pair) if pair.len() == 2 => Some(entries(&pair[1])),
                _ => None,
            })
            .flatten()
            .collect(),
        Value::Map(streams) => streams.iter().flat_map(|(_, list)| entries(list)).collect(),
        _ => Vec::new(),
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
        let wait = u64::try_from(RECEIVE_WAIT.as_millis()).unwrap_or(u64::MAX);
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP").arg(&self.group).arg(&self.consumer).arg("COUNT").arg(max).arg("BLOCK").arg(wait);
        cmd.arg("STREAMS").arg(&self.stream).arg(">");
        let reply = self.query(&cmd).await?;
        Ok(read_entries(&reply).into_iter().map(|entry| self.message(entry, false)).collect())
    }

    async fn ack(&self, message: &Message) -> Result<(), StoreError> {
        let Receipt::Entry(entry) = &message.receipt else { return Ok(()) };
        let mut pipeline = redis::pipe();
        pipeline.atomic().xack(&self.stream, &self.group, &[entry]).ignore().xdel(&self.stream, &[entry]).ignore();
        let pipeline = &pipeline;
        self.connection
            .repeatable(|mut connection| async move { pipeline.query_async::<()>(&mut connection).await })
            .await
            .map_err(fail)
    }

    async fn backlog(&self) -> Result<u64, StoreError> {
        let stream = &self.stream;
        self.connection.repeatable(|mut connection| async move { connection.xlen(stream).await }).await.map_err(fail)
    }
}

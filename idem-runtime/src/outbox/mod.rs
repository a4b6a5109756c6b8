//! The transactional outbox (§10 of the behaviour contract): the producer's
//! side of "exactly once". An event is written in the same transaction
//! (Postgres) or the same atomic step (Redis) as the business write that
//! causes it, so that it exists if and only if that write does; a consumer
//! then receives it at least once, through the backend the service already
//! uses:
//!
//! | backend | written with the business write by | delivered through |
//! |---|---|---|
//! | Postgres | [`PostgresOutbox::publish`] on the handler's transaction | the outbox table, rows claimed with `FOR UPDATE SKIP LOCKED` and hidden for a visibility timeout |
//! | Redis | `XADD` in the same script or `MULTI` ([`RedisOutbox::stream`]) | a Redis Stream and its consumer group: pending entries, `XAUTOCLAIM` of those idle too long |
//! | memory | [`MemoryOutbox::publish`] | this process, with the same visibility timeout |
//!
//! Every transport has the same contract ([`Transport`]): a received
//! message is hidden from other receivers until its visibility timeout
//! lapses, then received again unless it was acknowledged. A consumer that
//! dies between the two gets the message again, so consumers run each
//! message through the [inbox](crate::inbox), which absorbs the duplicates:
//!
//! ```
//! # async fn demo(outbox: idem_runtime::outbox::MemoryOutbox) -> Result<(), Box<dyn std::error::Error>> {
//! use idem_runtime::MemoryStore;
//! use idem_runtime::inbox::{Delivery, Inbox};
//! use idem_runtime::outbox::Transport;
//!
//! let inbox = Inbox::new(MemoryStore::new(), "notifier");
//! for message in outbox.receive(16).await? {
//!     let sent = inbox.process(&message.id, |_| async { Ok::<_, std::io::Error>(()) }).await;
//!     match sent {
//!         Ok(Delivery::Processed(()) | Delivery::Duplicate) => outbox.ack(&message).await?,
//!         // Another consumer has it, or it failed: it comes back later.
//!         _ => {}
//!     }
//! }
//! # Ok(()) }
//! ```

#[cfg(feature = "memory")]
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;

use std::time::Duration;

use async_trait::async_trait;

#[cfg(feature = "memory")]
pub use self::memory::MemoryOutbox;
#[cfg(feature = "postgres")]
pub use self::postgres::PostgresOutbox;
#[cfg(feature = "redis")]
pub use self::redis::RedisOutbox;
use crate::store::StoreError;

/// How long a received message stays hidden from other receivers unless
/// acknowledged, by default.
pub const DEFAULT_VISIBILITY: Duration = Duration::from_secs(30);

/// An event to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The event's own id, chosen by the producer and stable across
    /// deliveries: the id consumers give the inbox (such as
    /// `order.created:<order id>`).
    pub id: String,
    /// What happened, such as `order.created`.
    pub topic: String,
    /// The event's data, usually JSON.
    pub payload: String,
}

impl Event {
    /// An event `id` of `topic` carrying `payload`.
    pub fn new(id: impl Into<String>, topic: impl Into<String>, payload: impl Into<String>) -> Self {
        Self { id: id.into(), topic: topic.into(), payload: payload.into() }
    }
}

/// One delivery of an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The event's id, the same in every delivery.
    pub id: String,
    /// The event's topic.
    pub topic: String,
    /// The event's data.
    pub payload: String,
    /// Whether the event was delivered before (and not acknowledged).
    pub redelivered: bool,
    receipt: Receipt,
}

/// What a transport needs to acknowledge a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Receipt {
    /// A sequence number: the memory outbox's, or the outbox table's.
    #[cfg_attr(not(any(feature = "memory", feature = "postgres")), allow(dead_code))]
    Sequence(i64),
    /// A Redis Stream entry id.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    Entry(String),
}

/// Receives published events at least once.
#[async_trait]
pub trait Transport: Send + Sync {
    /// Up to `max` messages: those never delivered, and those delivered
    /// before whose visibility timeout lapsed without an acknowledgement.
    /// Each is hidden from other receivers for the visibility timeout.
    /// Waits a short while (about a second) for one when there is none,
    /// then returns an empty batch.
    async fn receive(&self, max: usize) -> Result<Vec<Message>, StoreError>;

    /// Acknowledges `message`: it is not delivered again. Acknowledge only
    /// once the inbox has recorded it (processed, or a duplicate).
    async fn ack(&self, message: &Message) -> Result<(), StoreError>;

    /// How many published events are not acknowledged yet (in delivery or
    /// waiting for one).
    async fn backlog(&self) -> Result<u64, StoreError>;
}

/// How long [`Transport::receive`] waits for a first message.
#[cfg_attr(not(any(feature = "memory", feature = "redis", feature = "postgres")), allow(dead_code))]
const RECEIVE_WAIT: Duration = Duration::from_secs(1);

/// How often the transports without push (Postgres) look for messages
/// while [`Transport::receive`] waits.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
const POLL_INTERVAL: Duration = Duration::from_millis(50);

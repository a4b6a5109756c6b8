//! Orders in Redis, beside the idempotency records, on one server or a
//! Redis Cluster.
//!
//! Every key of the order service carries one hash tag, `{order-service}`
//! (the outbox stream [`STREAM`] and the provider's ledger included): on a
//! Redis Cluster, a script must touch keys of one slot only, and the order's
//! insert writes the order, its owner's list, the counter and the outbox
//! stream in one script. The example so keeps all its business data in one
//! slot, on one primary; a real service would partition it instead, by a
//! tag per customer or per order, and count and publish per partition.

use async_trait::async_trait;
use idem_runtime::RedisConnection;
use redis::{AsyncCommands, Script};

use order_notifier::event::STREAM;

use super::{InsertOrder, Repo, RepoError};
use crate::model::Order;

const ORDERS_CREATED: &str = "{order-service}:orders_created";
const REFUNDS: &str = "{order-service}:refunds";

/// Records a provider event's refund unless the event was recorded; only
/// then counts it. Returns 1 if recorded. One round trip, atomic, and safe
/// to send again (a repeat finds the event recorded). The counter is
/// written first: a command that fails (a counter of the wrong type) fails
/// before anything was written, so that a redelivery counts the refund.
const RECORD_REFUND: &str = r"
-- KEYS[1]: the event; KEYS[2]: the refunds counter. ARGV[1]: the charge id.
if redis.call('EXISTS', KEYS[1]) == 1 then
    return 0
end
redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1])
return 1
";

/// Stores an order unless its id is taken; only then appends it to its
/// owner's list, counts it and appends its `order.created` event to the
/// outbox stream (the transactional outbox: the event exists if and only
/// if the order does). Returns the order stored under the id. One round
/// trip (`EVALSHA`), atomic, and safe to send again (a repeat finds the
/// order and returns it).
const INSERT_ORDER: &str = r"
-- KEYS[1]: the order; KEYS[2]: its owner's list; KEYS[3]: the orders counter;
-- KEYS[4]: the outbox stream. ARGV[1]: the order (JSON); ARGV[2]: its id;
-- ARGV[3], ARGV[4], ARGV[5]: the event's id, topic and payload.
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
    redis.call('RPUSH', KEYS[2], ARGV[2])
    redis.call('INCR', KEYS[3])
    redis.call('XADD', KEYS[4], '*', 'id', ARGV[3], 'topic', ARGV[4], 'payload', ARGV[5])
    return ARGV[1]
end
return redis.call('GET', KEYS[1])
";

/// Orders as JSON strings, an id list per owner, and a counter.
#[derive(Clone)]
pub struct RedisRepo {
    connection: RedisConnection,
    insert_order: Script,
    record_refund: Script,
}

fn order_key(id: &str) -> String {
    format!("{{order-service}}:order:{id}")
}

fn event_key(event_id: &str) -> String {
    // Length-prefixed, like owners: the id comes from outside.
    format!("{{order-service}}:refund-event:{}:{event_id}", event_id.len())
}

fn owner_key(owner: &str) -> String {
    // Length-prefixed, so that no owner name can reach another's list.
    format!("{{order-service}}:owner:{}:{owner}", owner.len())
}

fn fail(error: impl std::fmt::Display) -> RepoError {
    RepoError::new("redis", error)
}

impl RedisRepo {
    /// Opens a connection of its own (auto-reconnecting, with the store's
    /// fail-fast timeouts) to `url`: one server, or a Redis Cluster's
    /// `redis-cluster://` seed nodes. Every command is sent again once on a
    /// connection found dropped (`RedisConnection::repeatable`: all are
    /// safe to repeat), so that a restarted server costs no failed request.
    pub async fn connect(url: &str) -> Result<Self, redis::RedisError> {
        let mut connection = RedisConnection::open(url, &idem_runtime::RedisStore::default_config()).await?;
        let insert_order = Script::new(INSERT_ORDER);
        // Loaded now (on every primary of a cluster): every insert is then
        // one EVALSHA, the first included, and a first execution of
        // `POST /orders` three round trips in all (claim, insert, completion).
        insert_order.load_async(&mut connection).await?;
        let record_refund = Script::new(RECORD_REFUND);
        record_refund.load_async(&mut connection).await?;
        Ok(Self { connection, insert_order, record_refund })
    }
}

#[async_trait]
impl InsertOrder for RedisRepo {
    async fn insert_order(&self, order: &Order) -> Result<Order, RepoError> {
        let json = serde_json::to_string(order).map_err(fail)?;
        let event = order.created_event();
        let mut invocation = self.insert_order.key(order_key(&order.id));
        invocation.key(owner_key(&order.owner)).key(ORDERS_CREATED).key(STREAM).arg(json).arg(&order.id);
        invocation.arg(&event.id).arg(&event.topic).arg(&event.payload);
        let invocation = &invocation;
        let stored: String = self
            .connection
            .repeatable(|mut connection| async move { invocation.invoke_async(&mut connection).await })
            .await
            .map_err(fail)?;
        serde_json::from_str(&stored).map_err(fail)
    }
}

#[async_trait]
impl Repo for RedisRepo {
    async fn order(&self, id: &str) -> Result<Option<Order>, RepoError> {
        let key = &order_key(id);
        let json: Option<String> = self
            .connection
            .repeatable(|mut connection| async move { connection.get(key).await })
            .await
            .map_err(fail)?;
        json.map(|json| serde_json::from_str(&json).map_err(fail)).transpose()
    }

    async fn orders_of(&self, owner: &str) -> Result<Vec<Order>, RepoError> {
        let owner = &owner_key(owner);
        let orders: Vec<Option<String>> = self
            .connection
            .repeatable(|mut connection| async move {
                let ids: Vec<String> = connection.lrange(owner, 0, -1).await?;
                if ids.is_empty() {
                    return Ok(Vec::new());
                }
                let keys: Vec<String> = ids.iter().map(|id| order_key(id)).collect();
                connection.mget(keys).await
            })
            .await
            .map_err(fail)?;
        orders.into_iter().flatten().map(|json| serde_json::from_str(&json).map_err(fail)).collect()
    }

    async fn orders_created(&self) -> Result<u64, RepoError> {
        let count: Option<u64> = self
            .connection
            .repeatable(|mut connection| async move { connection.get(ORDERS_CREATED).await })
            .await
            .map_err(fail)?;
        Ok(count.unwrap_or(0))
    }

    async fn record_refund(&self, event_id: &str, charge_id: &str) -> Result<bool, RepoError> {
        let mut invocation = self.record_refund.key(event_key(event_id));
        invocation.key(REFUNDS).arg(charge_id);
        let invocation = &invocation;
        let recorded: i64 = self
            .connection
            .repeatable(|mut connection| async move { invocation.invoke_async(&mut connection).await })
            .await
            .map_err(fail)?;
        Ok(recorded == 1)
    }

    async fn refunds(&self) -> Result<u64, RepoError> {
        let count: Option<u64> = self
            .connection
            .repeatable(|mut connection| async move { connection.get(REFUNDS).await })
            .await
            .map_err(fail)?;
        Ok(count.unwrap_or(0))
    }
}

//! The provider's ledger in Redis, under keys of its own, on one server or
//! a Redis Cluster. Its keys carry the order service's hash tag (see
//! `repo::redis`): `CHARGE_ONCE` writes a charge and the counter, which on a
//! cluster must share a slot.

use async_trait::async_trait;
use idem_runtime::RedisConnection;
use redis::{AsyncCommands, Script};

use super::Ledger;
use crate::model::Charge;
use crate::repo::RepoError;

/// The charges counter.
const CHARGES: &str = "{order-service}:provider:charges";

/// Every charge, in the order recorded (a list of JSON strings).
const LEDGER: &str = "{order-service}:provider:ledger";

/// Records a charge under its idempotency key unless one is there, counts
/// it only then, and returns the charge stored under the key: one round
/// trip (`EVALSHA`), atomic.
const CHARGE_ONCE: &str = r"
-- KEYS[1]: the charge of one idempotency key; KEYS[2]: the charges counter;
-- KEYS[3]: the ledger. ARGV[1]: the new charge (JSON).
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
    redis.call('INCR', KEYS[2])
    redis.call('RPUSH', KEYS[3], ARGV[1])
    return ARGV[1]
end
return redis.call('GET', KEYS[1])
";

/// Charges as JSON strings keyed by idempotency key, a counter, and the
/// ledger listing them.
#[derive(Clone)]
pub struct RedisLedger {
    connection: RedisConnection,
    charge_once: Script,
}

fn charge_key(key: &str) -> String {
    // The keys come from `derived_key`: hex digits (with `--provider-dedup
    // off`, a dot and hex digits more), no separator to escape.
    format!("{{order-service}}:provider:charge:{key}")
}

fn fail(error: impl std::fmt::Display) -> RepoError {
    RepoError::new("redis", format!("the payment provider's ledger: {error}"))
}

impl RedisLedger {
    /// Opens a connection of its own (the provider is another system than
    /// the service) to `url`: one server, or a Redis Cluster's
    /// `redis-cluster://` seed nodes.
    pub async fn connect(url: &str) -> Result<Self, redis::RedisError> {
        let mut connection = RedisConnection::open(url, &idem_runtime::RedisStore::default_config()).await?;
        let charge_once = Script::new(CHARGE_ONCE);
        // Loaded now: every charge is then one EVALSHA, the first included.
        charge_once.load_async(&mut connection).await?;
        Ok(Self { connection, charge_once })
    }
}

#[async_trait]
impl Ledger for RedisLedger {
    async fn charge_once(&self, key: &str, charge: &Charge) -> Result<Charge, RepoError> {
        let json = serde_json::to_string(charge).map_err(fail)?;
        let mut invocation = self.charge_once.key(charge_key(key));
        invocation.key(CHARGES).key(LEDGER).arg(json);
        let invocation = &invocation;
        // Safe to send again: a repeat finds the charge and returns it.
        let stored: String = self
            .connection
            .repeatable(|mut connection| async move { invocation.invoke_async(&mut connection).await })
            .await
            .map_err(fail)?;
        serde_json::from_str(&stored).map_err(fail)
    }

    async fn charges(&self) -> Result<u64, RepoError> {
        let count: Option<u64> = self
            .connection
            .repeatable(|mut connection| async move { connection.get(CHARGES).await })
            .await
            .map_err(fail)?;
        Ok(count.unwrap_or(0))
    }

    async fn list(&self) -> Result<Vec<Charge>, RepoError> {
        let listed: Vec<String> = self
            .connection
            .repeatable(|mut connection| async move { connection.lrange(LEDGER, 0, -1).await })
            .await
            .map_err(fail)?;
        listed.iter().map(|json| serde_json::from_str(json).map_err(fail)).collect()
    }
}

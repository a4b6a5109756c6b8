//! Orders and charges in Redis, beside the idempotency records.

use async_trait::async_trait;
use redis::AsyncCommands;
use redis::aio::ConnectionManager;

use super::{Repo, RepoError};
use crate::model::{Charge, Order, Stats};

const ORDERS_CREATED: &str = "order-service:orders_created";
const CHARGES: &str = "order-service:charges";

/// Orders as JSON strings, an id list per owner, and two counters.
#[derive(Clone)]
pub struct RedisRepo {
    connection: ConnectionManager,
}

fn order_key(id: &str) -> String {
    format!("order-service:order:{id}")
}

fn owner_key(owner: &str) -> String {
    // Length-prefixed, so that no owner name can reach another's list.
    format!("order-service:owner:{}:{owner}", owner.len())
}

fn fail(error: impl std::fmt::Display) -> RepoError {
    RepoError::new("redis", error)
}

impl RedisRepo {
    /// Opens a connection of its own (auto-reconnecting, with the store's
    /// fail-fast timeouts) to `url`.
    pub async fn connect(url: &str) -> Result<Self, redis::RedisError> {
        let client = redis::Client::open(url)?;
        let connection = ConnectionManager::new_with_config(client, idem_runtime::RedisStore::default_config()).await?;
        Ok(Self { connection })
    }
}

#[async_trait]
impl Repo for RedisRepo {
    async fn insert_order(&self, order: &Order) -> Result<(), RepoError> {
        let json = serde_json::to_string(order).map_err(fail)?;
        let mut connection = self.connection.clone();
        redis::pipe()
            .atomic()
            .set(order_key(&order.id), json)
            .ignore()
            .rpush(owner_key(&order.owner), &order.id)
            .ignore()
            .incr(ORDERS_CREATED, 1)
            .ignore()
            .query_async::<()>(&mut connection)
            .await
            .map_err(fail)
    }

    async fn order(&self, id: &str) -> Result<Option<Order>, RepoError> {
        let mut connection = self.connection.clone();
        let json: Option<String> = connection.get(order_key(id)).await.map_err(fail)?;
        json.map(|json| serde_json::from_str(&json).map_err(fail)).transpose()
    }

    async fn orders_of(&self, owner: &str) -> Result<Vec<Order>, RepoError> {
        let mut connection = self.connection.clone();
        let ids: Vec<String> = connection.lrange(owner_key(owner), 0, -1).await.map_err(fail)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = ids.iter().map(|id| order_key(id)).collect();
        let orders: Vec<Option<String>> = connection.mget(keys).await.map_err(fail)?;
        orders.into_iter().flatten().map(|json| serde_json::from_str(&json).map_err(fail)).collect()
    }

    async fn insert_charge(&self, charge: &Charge) -> Result<(), RepoError> {
        let json = serde_json::to_string(charge).map_err(fail)?;
        let mut connection = self.connection.clone();
        redis::pipe()
            .atomic()
            .set(format!("order-service:charge:{}", charge.id), json)
            .ignore()
            .incr(CHARGES, 1)
            .ignore()
            .query_async::<()>(&mut connection)
            .await
            .map_err(fail)
    }

    async fn stats(&self) -> Result<Stats, RepoError> {
        let mut connection = self.connection.clone();
        let (orders, charges): (Option<u64>, Option<u64>) =
            connection.mget(&[ORDERS_CREATED, CHARGES]).await.map_err(fail)?;
        Ok(Stats { orders_created: orders.unwrap_or(0), charges: charges.unwrap_or(0) })
    }
}

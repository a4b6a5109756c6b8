//! Orders and charges in this process.

use std::collections::HashMap;

use async_trait::async_trait;
use parking_lot::Mutex;

use super::{Repo, RepoError};
use crate::model::{Charge, Order, Stats};

/// Orders and charges in this process only.
#[derive(Debug, Default)]
pub struct MemoryRepo {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    orders: HashMap<String, Order>,
    by_owner: HashMap<String, Vec<String>>,
    charges: Vec<Charge>,
}

#[async_trait]
impl Repo for MemoryRepo {
    async fn insert_order(&self, order: &Order) -> Result<(), RepoError> {
        let mut inner = self.inner.lock();
        inner.by_owner.entry(order.owner.clone()).or_default().push(order.id.clone());
        inner.orders.insert(order.id.clone(), order.clone());
        Ok(())
    }

    async fn order(&self, id: &str) -> Result<Option<Order>, RepoError> {
        Ok(self.inner.lock().orders.get(id).cloned())
    }

    async fn orders_of(&self, owner: &str) -> Result<Vec<Order>, RepoError> {
        let inner = self.inner.lock();
        let ids = inner.by_owner.get(owner).map(Vec::as_slice).unwrap_or_default();
        Ok(ids.iter().filter_map(|id| inner.orders.get(id).cloned()).collect())
    }

    async fn insert_charge(&self, charge: &Charge) -> Result<(), RepoError> {
        self.inner.lock().charges.push(charge.clone());
        Ok(())
    }

    async fn stats(&self) -> Result<Stats, RepoError> {
        let inner = self.inner.lock();
        Ok(Stats { orders_created: inner.orders.len() as u64, charges: inner.charges.len() as u64 })
    }
}

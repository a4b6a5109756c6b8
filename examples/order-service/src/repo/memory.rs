//! Orders in this process.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use async_trait::async_trait;
use idem_runtime::outbox::MemoryOutbox;
use parking_lot::Mutex;

use super::{InsertOrder, Repo, RepoError};
use crate::model::Order;

/// Orders in this process only. Each new order publishes its
/// `order.created` event to the outbox in the same critical section.
#[derive(Debug, Default)]
pub struct MemoryRepo {
    inner: Mutex<Inner>,
    outbox: MemoryOutbox,
}

#[derive(Debug, Default)]
struct Inner {
    orders: HashMap<String, Order>,
    by_owner: HashMap<String, Vec<String>>,
    /// Charge refunded, by the provider event that said so.
    refunds: HashMap<String, String>,
}

impl MemoryRepo {
    /// The outbox its orders' events go to, for the in-process notifier.
    pub fn outbox(&self) -> &MemoryOutbox {
        &self.outbox
    }
}

#[async_trait]
impl InsertOrder for MemoryRepo {
    async fn insert_order(&self, order: &Order) -> Result<Order, RepoError> {
        let inner = &mut *self.inner.lock();
        match inner.orders.entry(order.id.clone()) {
            Entry::Occupied(first) => Ok(first.get().clone()),
            Entry::Vacant(slot) => {
                inner.by_owner.entry(order.owner.clone()).or_default().push(order.id.clone());
                self.outbox.publish(order.created_event());
                Ok(slot.insert(order.clone()).clone())
            }
        }
    }
}

#[async_trait]
impl Repo for MemoryRepo {
    async fn order(&self, id: &str) -> Result<Option<Order>, RepoError> {
        Ok(self.inner.lock().orders.get(id).cloned())
    }

    async fn orders_of(&self, owner: &str) -> Result<Vec<Order>, RepoError> {
        let inner = self.inner.lock();
        let ids = inner.by_owner.get(owner).map(Vec::as_slice).unwrap_or_default();
        Ok(ids.iter().filter_map(|id| inner.orders.get(id).cloned()).collect())
    }

    async fn orders_created(&self) -> Result<u64, RepoError> {
        Ok(self.inner.lock().orders.len() as u64)
    }

    async fn record_refund(&self, event_id: &str, charge_id: &str) -> Result<bool, RepoError> {
        match self.inner.lock().refunds.entry(event_id.to_owned()) {
            Entry::Occupied(_) => Ok(false),
            Entry::Vacant(slot) => {
                slot.insert(charge_id.to_owned());
                Ok(true)
            }
        }
    }

    async fn refunds(&self) -> Result<u64, RepoError> {
        Ok(self.inner.lock().refunds.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NewOrder;

    fn order(id: &str, amount_cents: i64) -> Order {
        let new = NewOrder { customer_id: "c1".into(), amount_cents, currency: "EUR".into() };
        Order::new(id.into(), "alice", new)
    }

    #[actix_web::test]
    async fn an_order_id_is_inserted_once() {
        let repo = MemoryRepo::default();
        let first = repo.insert_order(&order("o1", 100)).await.unwrap();
        let again = repo.insert_order(&order("o1", 200)).await.unwrap();
        assert_eq!(again, first, "the first order, unchanged");
        assert_eq!(repo.orders_of("alice").await.unwrap(), vec![first]);
        assert_eq!(repo.orders_created().await.unwrap(), 1);
    }

    #[actix_web::test]
    async fn an_event_is_recorded_once() {
        let repo = MemoryRepo::default();
        assert!(repo.record_refund("evt_1", "ch_1").await.unwrap());
        assert!(!repo.record_refund("evt_1", "ch_1").await.unwrap());
        assert!(repo.record_refund("evt_2", "ch_1").await.unwrap());
        assert_eq!(repo.refunds().await.unwrap(), 2);
    }
}

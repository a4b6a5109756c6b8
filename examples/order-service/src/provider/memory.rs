//! The provider's ledger in this process.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use async_trait::async_trait;
use parking_lot::Mutex;

use super::Ledger;
use crate::model::Charge;
use crate::repo::RepoError;

/// Charges by idempotency key, in this process only: a crash of the process
/// loses them with everything else of the `memory` backend.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    charges: Mutex<Charges>,
}

/// The charges by key, and their keys in the order recorded.
#[derive(Debug, Default)]
struct Charges {
    by_key: HashMap<String, Charge>,
    order: Vec<String>,
}

#[async_trait]
impl Ledger for MemoryLedger {
    async fn charge_once(&self, key: &str, charge: &Charge) -> Result<Charge, RepoError> {
        let mut charges = self.charges.lock();
        let Charges { by_key, order } = &mut *charges;
        Ok(match by_key.entry(key.to_owned()) {
            Entry::Occupied(first) => first.get().clone(),
            Entry::Vacant(slot) => {
                order.push(key.to_owned());
                slot.insert(charge.clone()).clone()
            }
        })
    }

    async fn charges(&self) -> Result<u64, RepoError> {
        Ok(self.charges.lock().by_key.len() as u64)
    }

    async fn list(&self) -> Result<Vec<Charge>, RepoError> {
        let charges = self.charges.lock();
        Ok(charges.order.iter().filter_map(|key| charges.by_key.get(key).cloned()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_web::test]
    async fn one_charge_per_key() {
        let ledger = MemoryLedger::default();
        let first = ledger.charge_once("k1", &Charge::captured("o1", 100)).await.unwrap();
        let again = ledger.charge_once("k1", &Charge::captured("o1", 100)).await.unwrap();
        assert_eq!(again, first, "the first charge, not a second one");
        ledger.charge_once("k2", &Charge::captured("o1", 100)).await.unwrap();
        assert_eq!(ledger.charges().await.unwrap(), 2);
        let listed: Vec<_> = ledger.list().await.unwrap().into_iter().map(|charge| charge.order_id).collect();
        assert_eq!(listed, ["o1", "o1"]);
    }
}

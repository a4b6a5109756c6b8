//! The gauge of held executions (§14 of the behaviour contract): the held
//! records this process has met, each looked at again now and then until an
//! operator (or its holder) has settled it.
//!
//! A store-wide count would need every process to scan the store; instead
//! each process counts the held records its claims found, which is where
//! retries of a held execution arrive. Graph the gauge's maximum over the
//! processes sharing a store.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;

use crate::background;
use crate::record::RecordState;
use crate::scope::StorageKey;
use crate::store::Store;

/// Gauge of the held executions this process knows of: held records its
/// claims found, until they are released, resolved or completed.
pub const HELD_METRIC: &str = "idem_executions_held";

/// Most held records remembered at once.
const MOST: usize = 10_000;

/// How often the remembered records are looked at again.
const LOOK_AGAIN: Duration = Duration::from_secs(15);

/// Held records met, by key, with the store each lives in.
type Held = Mutex<HashMap<StorageKey, Arc<dyn Store>>>;

fn held() -> &'static Arc<Held> {
    static HELD: OnceLock<Arc<Held>> = OnceLock::new();
    HELD.get_or_init(|| {
        let held = Arc::new(Held::default());
        background::spawn(look_again(Arc::clone(&held)));
        held
    })
}

/// A claim found `key` held; `newly` if it made it so, which is logged at
/// error level (once per held execution: only one claim makes it held).
pub(crate) fn seen(store: &Arc<dyn Store>, key: &StorageKey, newly: bool) {
    if newly {
        tracing::error!(
            record = key.record_id(),
            "an execution lapsed unfinished on a route with on_lapse = \"hold\": it is held and will not run \
             again by itself; inspect it with `idem inspect {}` and release or resolve it",
            key.record_id()
        );
    }
    let held = held();
    let mut known = held.lock();
    if known.len() < MOST {
        known.entry(key.clone()).or_insert_with(|| Arc::clone(store));
    }
    metrics::gauge!(HELD_METRIC).set(known.len() as f64);
}

/// Drops the records that are no longer held, every [`LOOK_AGAIN`].
async fn look_again(held: Arc<Held>) {
    loop {
        tokio::time::sleep(LOOK_AGAIN).await;
        let known: Vec<_> = held.lock().iter().map(|(key, store)| (key.clone(), Arc::clone(store))).collect();
        for (key, store) in known {
            match tokio::time::timeout(Duration::from_secs(5), store.get(&key)).await {
                Ok(Ok(Some(record))) if matches!(record.state, RecordState::Held { .. }) => {}
                // Settled, expired or gone: no longer held.
                Ok(Ok(_)) => {
                    held.lock().remove(&key);
                }
                // Unknown for now: looked at again next time.
                _ => {}
            }
        }
        metrics::gauge!(HELD_METRIC).set(held.lock().len() as f64);
    }
}

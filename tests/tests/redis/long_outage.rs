//! A Redis server away for longer than a lease while a payment runs and
//! after it answered: frozen (SIGSTOP, so what clients send meanwhile runs
//! when it resumes), and killed then restarted from its append-only file.
//! The retry after it is back is a replay (or a 409 while the payment still
//! runs), never a second charge; the same on the inbox.

use std::sync::Arc;

use idem_runtime::RedisStore;
use idem_runtime::store::Store;
use idem_tests::long_outage::{self, Outage};
use idem_tests::redis_server::RedisServer;

/// SIGSTOP, then SIGCONT.
struct Frozen(RedisServer);

impl Outage for Frozen {
    fn begin(&mut self) {
        self.0.freeze();
    }
    fn end(&mut self) {
        self.0.thaw();
    }
}

/// `kill -9`, then a start from the append-only file, which every write
/// reached before it was answered (`appendfsync always`).
struct Crashed(RedisServer);

impl Outage for Crashed {
    fn begin(&mut self) {
        self.0.stop();
    }
    fn end(&mut self) {
        self.0.restart();
    }
}

const PERSISTENT: [&str; 4] = ["--appendonly", "yes", "--appendfsync", "always"];

async fn store(server: &RedisServer) -> Arc<dyn Store> {
    Arc::new(RedisStore::connect(&server.url()).await.expect("connecting to the private server"))
}

#[actix_web::test]
async fn frozen_past_the_lease_after_the_payment_answered() {
    let Some(server) = RedisServer::start("frozen_past_the_lease_after_the_payment_answered") else { return };
    let store = store(&server).await;
    long_outage::a_payment_answered_during_a_long_outage_is_replayed(store, &mut Frozen(server)).await;
}

#[actix_web::test]
async fn crashed_past_the_lease_after_the_payment_answered() {
    let test = "crashed_past_the_lease_after_the_payment_answered";
    let Some(server) = RedisServer::start_with(test, &PERSISTENT) else { return };
    let store = store(&server).await;
    long_outage::a_payment_answered_during_a_long_outage_is_replayed(store, &mut Crashed(server)).await;
}

#[actix_web::test]
async fn frozen_past_the_lease_while_the_payment_runs() {
    let Some(server) = RedisServer::start("frozen_past_the_lease_while_the_payment_runs") else { return };
    let store = store(&server).await;
    long_outage::a_payment_running_through_a_long_outage_keeps_its_key(store, &mut Frozen(server)).await;
}

#[actix_web::test]
async fn crashed_past_the_lease_while_the_payment_runs() {
    let test = "crashed_past_the_lease_while_the_payment_runs";
    let Some(server) = RedisServer::start_with(test, &PERSISTENT) else { return };
    let store = store(&server).await;
    long_outage::a_payment_running_through_a_long_outage_keeps_its_key(store, &mut Crashed(server)).await;
}

#[actix_web::test]
async fn the_inbox_through_a_frozen_server() {
    let Some(server) = RedisServer::start("the_inbox_through_a_frozen_server") else { return };
    let store = store(&server).await;
    long_outage::a_message_processed_during_a_long_outage_is_not_processed_again(store, &mut Frozen(server)).await;
}

#[actix_web::test]
async fn the_inbox_through_a_crashed_server() {
    let Some(server) = RedisServer::start_with("the_inbox_through_a_crashed_server", &PERSISTENT) else { return };
    let store = store(&server).await;
    long_outage::a_message_processed_during_a_long_outage_is_not_processed_again(store, &mut Crashed(server)).await;
}

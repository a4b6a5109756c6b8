//! A PostgreSQL server away for longer than a lease while a payment runs
//! and after it answered: frozen (SIGSTOP of the postmaster and of every
//! backend, so what clients send meanwhile runs when it resumes), and
//! crashed (`pg_ctl stop -m immediate`) then started again, recovering from
//! its write-ahead log. The retry after it is back is a replay (or a 409
//! while the payment still runs), never a second charge; the same on the
//! inbox.

use std::sync::Arc;

use idem_runtime::PostgresStore;
use idem_runtime::store::Store;
use idem_tests::long_outage::{self, Outage};
use idem_tests::postgres_server::PostgresServer;

/// SIGSTOP, then SIGCONT, to every process of the server.
struct Frozen(PostgresServer);

impl Outage for Frozen {
    fn begin(&mut self) {
        self.0.freeze();
    }
    fn end(&mut self) {
        self.0.thaw();
    }
}

/// An immediate shutdown (a crash), then a start with crash recovery.
struct Crashed(PostgresServer);

impl Outage for Crashed {
    fn begin(&mut self) {
        self.0.crash();
    }
    fn end(&mut self) {
        self.0.restart();
    }
}

/// A private server (this test stops it), or `None` to skip.
fn server(test: &str) -> Option<PostgresServer> {
    idem_tests::backend::url("IDEM_POSTGRES_URL", test)?;
    PostgresServer::start(test, &[])
}

async fn store(server: &PostgresServer) -> Arc<dyn Store> {
    let store = PostgresStore::connect(&server.url("postgres")).await.expect("connecting to the private server");
    store.migrate().await.expect("migrating");
    Arc::new(store)
}

#[actix_web::test]
async fn frozen_past_the_lease_after_the_payment_answered() {
    let Some(server) = server("postgres_frozen_past_the_lease_after_the_payment_answered") else { return };
    let store = store(&server).await;
    long_outage::a_payment_answered_during_a_long_outage_is_replayed(store, &mut Frozen(server)).await;
}

#[actix_web::test]
async fn crashed_past_the_lease_after_the_payment_answered() {
    let Some(server) = server("postgres_crashed_past_the_lease_after_the_payment_answered") else { return };
    let store = store(&server).await;
    long_outage::a_payment_answered_during_a_long_outage_is_replayed(store, &mut Crashed(server)).await;
}

#[actix_web::test]
async fn frozen_past_the_lease_while_the_payment_runs() {
    let Some(server) = server("postgres_frozen_past_the_lease_while_the_payment_runs") else { return };
    let store = store(&server).await;
    long_outage::a_payment_running_through_a_long_outage_keeps_its_key(store, &mut Frozen(server)).await;
}

#[actix_web::test]
async fn crashed_past_the_lease_while_the_payment_runs() {
    let Some(server) = server("postgres_crashed_past_the_lease_while_the_payment_runs") else { return };
    let store = store(&server).await;
    long_outage::a_payment_running_through_a_long_outage_keeps_its_key(store, &mut Crashed(server)).await;
}

#[actix_web::test]
async fn the_inbox_through_a_frozen_server() {
    let Some(server) = server("postgres_the_inbox_through_a_frozen_server") else { return };
    let store = store(&server).await;
    long_outage::a_message_processed_during_a_long_outage_is_not_processed_again(store, &mut Frozen(server)).await;
}

#[actix_web::test]
async fn the_inbox_through_a_crashed_server() {
    let Some(server) = server("postgres_the_inbox_through_a_crashed_server") else { return };
    let store = store(&server).await;
    long_outage::a_message_processed_during_a_long_outage_is_not_processed_again(store, &mut Crashed(server)).await;
}

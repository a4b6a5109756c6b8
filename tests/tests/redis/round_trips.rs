//! Round trips per store operation, as a private Redis server sees them
//! through `MONITOR`: a replay is one command (`SET NX GET`), a first
//! execution two (that `SET` and the completion's script), a renewal one; a
//! claim that finds the key in flight or released is two (the `SET`, then
//! `claim.lua`); a batch of renewals is one script call per lease, from a
//! connection of its own.
//!
//! `MONITOR` rather than `INFO commandstats`, because commandstats also
//! counts the commands a script runs inside the server (`HMGET`, `PEXPIRE`,
//! ...), which cost no round trip; `MONITOR` tags those `[.. lua]`, so the
//! commands sent by the client can be told apart.

use std::pin::Pin;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use idem_runtime::RedisStore;
use idem_runtime::store::testing::{fingerprint, fresh_key, response};
use idem_runtime::store::{Claim, Fence, FencingToken, Renewal, StorageKey, Store};
use idem_tests::redis_server::RedisServer;
use redis::aio::MultiplexedConnection;

const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(600);

/// Watches every command a private server receives.
struct Observer {
    /// Sends the window marks; its commands are not counted.
    admin: MultiplexedConnection,
    feed: Pin<Box<dyn Stream<Item = String> + Send>>,
    marks: u32,
}

impl Observer {
    async fn new(server: &RedisServer) -> Self {
        let client = redis::Client::open(server.url()).expect("a valid URL");
        let admin = client.get_multiplexed_async_connection().await.expect("connecting the observer");
        let monitor = client.get_async_monitor().await.expect("MONITOR");
        let mut observer = Self { admin, feed: Box::pin(monitor.into_on_message::<String>()), marks: 0 };
        observer.mark().await;
        observer
    }

    /// Ends the current window: the names of the commands that clients (not
    /// scripts) sent since the previous mark, in order.
    async fn mark(&mut self) -> Vec<String> {
        self.mark_with_clients().await.into_iter().map(|(_, command)| command).collect()
    }

    /// As [`Observer::mark`], with the address of the client that sent each.
    async fn mark_with_clients(&mut self) -> Vec<(String, String)> {
        self.marks += 1;
        let marker = format!("idem-round-trip-mark-{}", self.marks);
        let echoed: String = redis::cmd("ECHO").arg(&marker).query_async(&mut self.admin).await.expect("ECHO");
        assert_eq!(echoed, marker);
        let mut commands = Vec::new();
        loop {
            let line = tokio::time::timeout(Duration::from_secs(5), self.feed.next())
                .await
                .expect("MONITOR fell silent")
                .expect("MONITOR ended");
            if line.contains(&marker) {
                return commands;
            }
            // 1700000000.123456 [0 127.0.0.1:40000] "EVALSHA" "2f1c..." "1" ...
            let (source, command) = line
                .split_once('[')
                .and_then(|(_, rest)| rest.split_once("] "))
                .unwrap_or_else(|| panic!("unexpected MONITOR line {line:?}"));
            if !source.ends_with(" lua") {
                let name = command.split('"').nth(1).unwrap_or_else(|| panic!("no command in {line:?}"));
                let client = source.split_whitespace().nth(1).unwrap_or_else(|| panic!("no client in {line:?}"));
                commands.push((client.to_owned(), name.to_ascii_uppercase()));
            }
        }
    }
}

fn evalsha(times: usize) -> Vec<String> {
    vec!["EVALSHA".to_owned(); times]
}

fn commands(names: &[&str]) -> Vec<String> {
    names.iter().map(|&name| name.to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn each_operation_is_one_command_but_the_claim_of_a_key_in_flight() {
    let Some(server) = RedisServer::start("each_operation_is_one_command_but_the_claim_of_a_key_in_flight") else {
        return;
    };
    let mut observer = Observer::new(&server).await;
    let store = RedisStore::connect(&server.url()).await.expect("connecting the store");
    let (key, request) = (fresh_key(), fingerprint("order 42"));

    // First execution: claim + complete (connecting loaded the scripts).
    observer.mark().await;
    let token = match store.claim(&key, &request, LEASE, TTL).await.unwrap() {
        Claim::Acquired { token, .. } => token,
        other => panic!("expected the key to be acquired, got {other:?}"),
    };
    assert_eq!(store.complete(&key, token, &response(b"created"), TTL).await.unwrap(), Fence::Held);
    assert_eq!(observer.mark().await, commands(&["SET", "EVALSHA"]), "a first execution");

    // Replay: one command; so is a mismatch.
    assert_eq!(store.claim(&key, &request, LEASE, TTL).await.unwrap(), Claim::Replay(response(b"created")));
    assert_eq!(observer.mark().await, commands(&["SET"]), "a replay");
    assert_eq!(store.claim(&key, &fingerprint("order 43"), LEASE, TTL).await.unwrap(), Claim::Mismatch);
    assert_eq!(observer.mark().await, commands(&["SET"]), "a mismatch");

    // A heartbeat on an in-flight key: one command; a duplicate's claim two,
    // the second judging the lease.
    let key = fresh_key();
    let token = match store.claim(&key, &request, LEASE, TTL).await.unwrap() {
        Claim::Acquired { token, .. } => token,
        other => panic!("expected the key to be acquired, got {other:?}"),
    };
    observer.mark().await;
    assert_eq!(store.renew(&key, token, LEASE).await.unwrap(), Fence::Held);
    assert_eq!(observer.mark().await, evalsha(1), "a renewal");
    assert!(matches!(store.claim(&key, &request, LEASE, TTL).await.unwrap(), Claim::InFlight { .. }));
    assert_eq!(observer.mark().await, commands(&["SET", "EVALSHA"]), "an in-flight duplicate");
}

#[tokio::test(flavor = "multi_thread")]
async fn scripts_come_back_after_a_flush_at_the_cost_of_one_load() {
    let Some(server) = RedisServer::start("scripts_come_back_after_a_flush_at_the_cost_of_one_load") else {
        return;
    };
    let mut observer = Observer::new(&server).await;
    let store = RedisStore::connect(&server.url()).await.expect("connecting the store");
    let () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut observer.admin).await.expect("SCRIPT FLUSH");
    observer.mark().await;
    let (key, request) = (fresh_key(), fingerprint("after flush"));
    // A free key needs no script.
    assert!(matches!(store.claim(&key, &request, LEASE, TTL).await.unwrap(), Claim::Acquired { .. }));
    assert_eq!(observer.mark().await, ["SET"]);
    // EVALSHA answered NOSCRIPT, then SCRIPT LOAD and EVALSHA again.
    assert!(matches!(store.claim(&key, &request, LEASE, TTL).await.unwrap(), Claim::InFlight { .. }));
    assert_eq!(observer.mark().await, ["SET", "EVALSHA", "SCRIPT", "EVALSHA"]);
    assert!(matches!(store.claim(&key, &request, LEASE, TTL).await.unwrap(), Claim::InFlight { .. }));
    assert_eq!(observer.mark().await, ["SET", "EVALSHA"], "loaded again for good");
}

async fn acquire(store: &RedisStore, key: &StorageKey) -> FencingToken {
    match store.claim(key, &fingerprint("renewed"), LEASE, TTL).await.unwrap() {
        Claim::Acquired { token, .. } => token,
        other => panic!("expected the key to be acquired, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_of_renewals_is_one_script_call_per_lease_on_a_connection_of_its_own() {
    let Some(server) =
        RedisServer::start("a_batch_of_renewals_is_one_script_call_per_lease_on_a_connection_of_its_own")
    else {
        return;
    };
    let mut observer = Observer::new(&server).await;
    let store = RedisStore::connect(&server.url()).await.expect("connecting the store");
    observer.mark().await;
    let keys: Vec<StorageKey> = (0..3).map(|_| fresh_key()).collect();
    let mut renewals = Vec::new();
    for key in &keys {
        renewals.push(Renewal { key: key.clone(), token: acquire(&store, key).await, lease: LEASE });
    }
    renewals.push(Renewal { key: fresh_key(), token: FencingToken::generate(), lease: LEASE });
    let application = observer.mark_with_clients().await;
    assert_eq!(application.len(), 3, "{application:?}");
    let fences = [Fence::Held, Fence::Held, Fence::Held, Fence::Lost];

    assert_eq!(store.renew_many(&renewals).await.unwrap(), fences);
    let batch = observer.mark_with_clients().await;
    // The first batch opens the renewals' connection (its setup commands,
    // such as CLIENT SETINFO, come first), then one EVALSHA per lease.
    let evalshas: Vec<&(String, String)> = batch.iter().filter(|(_, command)| command == "EVALSHA").collect();
    assert_eq!(evalshas.len(), renewals.len(), "{batch:?}");
    assert!(!batch.iter().any(|(_, command)| command == "SCRIPT"), "{batch:?}");
    let renewer = &evalshas[0].0;
    assert!(evalshas.iter().all(|(client, _)| client == renewer), "{batch:?}");
    assert_ne!(renewer, &application[0].0, "renewals share the application's connection");

    // Later batches reuse that connection: exactly the script calls.
    assert_eq!(store.renew_many(&renewals).await.unwrap(), fences);
    let batch = observer.mark_with_clients().await;
    assert_eq!(batch, vec![(renewer.clone(), "EVALSHA".to_owned()); renewals.len()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_of_renewals_loads_the_script_again_after_a_flush() {
    let Some(server) = RedisServer::start("a_batch_of_renewals_loads_the_script_again_after_a_flush") else {
        return;
    };
    let mut observer = Observer::new(&server).await;
    let store = RedisStore::connect(&server.url()).await.expect("connecting the store");
    let keys: Vec<StorageKey> = (0..2).map(|_| fresh_key()).collect();
    let mut renewals = Vec::new();
    for key in &keys {
        renewals.push(Renewal { key: key.clone(), token: acquire(&store, key).await, lease: LEASE });
    }
    assert_eq!(store.renew_many(&renewals).await.unwrap(), [Fence::Held, Fence::Held]);
    let () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut observer.admin).await.expect("SCRIPT FLUSH");
    observer.mark().await;
    // Both calls answer NOSCRIPT; one load, then both again.
    assert_eq!(store.renew_many(&renewals).await.unwrap(), [Fence::Held, Fence::Held]);
    assert_eq!(observer.mark().await, ["EVALSHA", "EVALSHA", "SCRIPT", "EVALSHA", "EVALSHA"]);
    assert_eq!(store.renew_many(&renewals).await.unwrap(), [Fence::Held, Fence::Held]);
    assert_eq!(observer.mark().await, evalsha(2), "loaded again for good");
}

//! A Redis Cluster primary killed (`kill -9`) during a storm of payments
//! whose keys all live on it, on a private six-node cluster, with
//! `#[idempotent]` on a real actix-web server that is never restarted.
//!
//! Its replica is frozen (SIGSTOP) and cut off (`CLIENT KILL TYPE replica`
//! on the primary) for the last second before the kill, so the writes of
//! that second never reach it: the window in which Redis's asynchronous
//! replication loses acknowledged writes, made wide enough to hit every
//! time. Then the primary dies, the replica is thawed and
//! promoted, and every key is retried until it is answered. With replica
//! acknowledgements (`WAIT`) no key runs twice: the claims of that second
//! fail closed (503). Without them, completions of that second are lost and
//! their retries run again: the documented window, counted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{HttpRequest, HttpResponse, post, web};
use idem_runtime::store::{IdempotencyKey, Scope, StorageKey};
use idem_runtime::{Idem, RedisStore, idempotent};
use idem_tests::http::{client, post_with};
use idem_tests::redis_cluster::RedisCluster;
use idem_tests::redis_node::slot_of;
use idem_tests::server::TestServer;

/// Executions of the handler, by idempotency key.
#[derive(Default)]
struct Executions(Mutex<HashMap<String, u32>>);

/// A lease well above the failover's few seconds: an execution whose
/// completion is not acknowledged keeps its key until a replica has it.
#[idempotent(scope = "route", lock_ttl = "10s")]
#[post("/pay")]
async fn pay(request: HttpRequest, executions: web::Data<Executions>) -> HttpResponse {
    charge(&request, &executions).await
}

async fn charge(request: &HttpRequest, executions: &Executions) -> HttpResponse {
    let key = request.headers().get("idempotency-key").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    *executions.0.lock().expect("the executions lock").entry(key.clone()).or_default() += 1;
    tokio::time::sleep(Duration::from_millis(20)).await;
    HttpResponse::Created().body(format!("paid {key}"))
}

/// `count` keys whose records for `route` live on the primary at `port`.
fn keys_on(store: &RedisStore, route: &str, port: u16, count: usize) -> Vec<String> {
    let slots = idem_tests::redis_node::served_slots(&format!("127.0.0.1:{port}")).expect("the primary's slots");
    let run = std::process::id();
    (0..)
        .map(|i| format!("pay-{run}-{i}"))
        .filter(|key| {
            let parsed = IdempotencyKey::parse(key.as_bytes()).expect("a valid key");
            let record = store.record_key(&StorageKey::new(Scope::Route, None, "POST", route, &parsed));
            let slot = slot_of(&record);
            slots.iter().any(|range| range.contains(&slot))
        })
        .take(count)
        .collect()
}

/// What the storm saw.
#[derive(Default)]
struct Seen {
    /// When each status was answered, relative to the storm's start.
    answers: Vec<(Duration, u16)>,
}

/// What the storm's clients share.
struct Storm {
    url: String,
    keys: Vec<String>,
    /// The next key to send.
    next: Mutex<usize>,
    stop: AtomicBool,
    start: Instant,
    /// When the last 201 came, in milliseconds since the start.
    last_created_ms: AtomicU64,
}

impl Storm {
    fn since_start(&self) -> Duration {
        self.start.elapsed()
    }

    /// The first 201 at or after `after`, waiting up to `timeout` for it.
    async fn created_after(&self, after: Duration, timeout: Duration) -> Option<Duration> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let last = Duration::from_millis(self.last_created_ms.load(Ordering::Relaxed));
            if last >= after {
                return Some(last);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}

/// Sends the storm's keys (shared by every client, in order), each until it
/// is answered 201, retrying 409 and 503, until the storm stops.
async fn storm(storm: Arc<Storm>) -> Seen {
    let http = client(Duration::from_secs(10));
    let mut seen = Seen::default();
    while !storm.stop.load(Ordering::Relaxed) {
        let key = {
            let mut next = storm.next.lock().expect("the key counter lock");
            let Some(key) = storm.keys.get(*next) else { break };
            *next += 1;
            key.clone()
        };
        while !storm.stop.load(Ordering::Relaxed) {
            let sent = http.post(&storm.url).insert_header(("Idempotency-Key", key.as_str())).send_body("{}").await;
            let status = sent.map_or(0, |response| response.status().as_u16());
            let at = storm.since_start();
            seen.answers.push((at, status));
            match status {
                201 => {
                    let ms = u64::try_from(at.as_millis()).unwrap_or(u64::MAX);
                    storm.last_created_ms.fetch_max(ms, Ordering::Relaxed);
                    break;
                }
                409 | 503 | 0 => tokio::time::sleep(Duration::from_millis(25)).await,
                other => panic!("key {key}: unexpected status {other}"),
            }
        }
    }
    seen
}

/// What one run of the scenario came to.
struct Outcome {
    /// The keys sent.
    sent: Vec<String>,
    /// Executions of the handler by key.
    executions: HashMap<String, u32>,
    /// Every answer of the storm, with its time since the start.
    answers: Vec<(Duration, u16)>,
    /// When the primary was killed, since the start.
    killed: Duration,
    /// When its replica served its slots, since the start.
    promoted: Duration,
    /// When the killed primary was back as a replica, since the start.
    rejoined: Duration,
    /// When a request first succeeded after that, if it did within 20 s.
    recovered: Option<Duration>,
}

/// Runs the scenario on `route`, with or without replica acknowledgements.
async fn scenario(test: &str, route: &'static str, acks: bool) -> Option<Outcome> {
    let mut cluster = RedisCluster::start(test)?;
    let store = RedisStore::connect(&cluster.url()).await.expect("connecting to the private cluster");
    let store = if acks { store.with_replica_acks(1, Duration::from_millis(300)) } else { store };
    let primary = cluster.primary_of("{probe}");
    let replica = *cluster.replicas_of(primary).first().expect("the primary has a replica");
    let keys = keys_on(&store, route, primary, 4_000);
    let executions = web::Data::new(Executions::default());
    let shared = executions.clone();
    // Store calls give up well within a third of the lease.
    let idem = Idem::new(store).store_timeout(Duration::from_millis(900));
    let server = TestServer::with_workers(4, idem, move |config| {
        config.app_data(shared.clone()).service(pay);
    });

    let start = Instant::now();
    let shared = Arc::new(Storm {
        url: server.at(route),
        keys,
        next: Mutex::new(0),
        stop: AtomicBool::new(false),
        start,
        last_created_ms: AtomicU64::new(0),
    });
    let clients: Vec<_> = (0..16).map(|_| actix_web::rt::spawn(storm(Arc::clone(&shared)))).collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The replica stops (and cannot reconnect), and the primary drops its
    // link: the writes of the next second exist on the primary only.
    cluster.freeze(replica);
    let dropped: i64 = cluster.query(primary, redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica")).unwrap();
    assert_eq!(dropped, 1, "the primary dropped its replica's link");
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.kill(primary);
    let killed = start.elapsed();
    cluster.thaw(replica);
    let (mut cluster, promoted) = actix_web::rt::task::spawn_blocking(move || {
        let new = cluster.wait_for_new_primary(primary, Duration::from_secs(20));
        assert_eq!(new, replica, "the frozen replica was promoted");
        (cluster, start.elapsed())
    })
    .await
    .expect("waiting for the promotion");
    // The dead primary comes back, as the new primary's replica: with
    // replica acknowledgements, the slot takes writes again only then.
    let cluster = actix_web::rt::task::spawn_blocking(move || {
        cluster.restart(primary);
        cluster.wait_until_healthy(Duration::from_secs(20));
        cluster
    })
    .await
    .expect("waiting for the old primary to rejoin");
    let rejoined = start.elapsed();
    assert!(
        rejoined - killed < Duration::from_secs(8),
        "the failover took {:?}: longer than the 10 s lease allows for this test to mean anything",
        rejoined - killed
    );
    // The storm goes on until a request succeeds again, without a restart.
    let recovered = shared.created_after(rejoined, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    shared.stop.store(true, Ordering::Relaxed);
    let mut answers = Vec::new();
    for handle in clients {
        answers.extend(handle.await.expect("a storm client").answers);
    }

    // Every key sent is retried (as after a lost response) until answered,
    // by 16 clients at once: a key whose record the failover lost runs
    // again here.
    let sent: Vec<String> = shared.keys[..*shared.next.lock().expect("the key counter lock")].to_vec();
    let next = Arc::new(AtomicU64::new(0));
    let retriers: Vec<_> = (0..16)
        .map(|_| {
            let (sent, next, url) = (sent.clone(), Arc::clone(&next), server.at(route));
            actix_web::rt::spawn(async move {
                let http = client(Duration::from_secs(10));
                while let Some(key) = sent.get(next.fetch_add(1, Ordering::Relaxed) as usize) {
                    answer_eventually(&http, &url, key).await;
                }
            })
        })
        .collect();
    for retrier in retriers {
        retrier.await.expect("a retrier");
    }
    server.stop().await;
    drop(cluster);
    let executions = std::mem::take(&mut *executions.0.lock().expect("the executions lock"));
    Some(Outcome { sent, executions, answers, killed, promoted, rejoined, recovered })
}

/// Sends `key` until it is answered 201. A claim whose answer was lost in
/// the outage holds its key until its lease (10 s) and grace run out: 409
/// meanwhile; with replica acknowledgements, 503 until the killed node is
/// back as the new primary's replica, which a loaded machine (the whole
/// suite running) can take a while to sync.
async fn answer_eventually(http: &awc::Client, url: &str, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let response = http.post(url).insert_header(("Idempotency-Key", key)).send_body("{}");
        let status = response.await.map_or(0, |r| r.status().as_u16());
        if status == 201 {
            return;
        }
        assert!(Instant::now() < deadline, "key {key} still answered {status} after the failover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How many answers were `status` in `[from, to)`.
fn answered(answers: &[(Duration, u16)], status: u16, from: Duration, to: Duration) -> usize {
    answers.iter().filter(|(at, s)| *s == status && *at >= from && *at < to).count()
}

#[actix_web::test]
async fn a_killed_primary_is_503_until_its_replica_takes_over_and_with_replica_acks_nothing_runs_twice() {
    let test = "a_killed_primary_is_503_until_its_replica_takes_over_and_with_replica_acks_nothing_runs_twice";
    let Some(Outcome { sent, executions, answers, killed, promoted, rejoined, recovered }) =
        scenario(test, "/pay", true).await
    else {
        return;
    };
    let twice: Vec<_> = executions.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "with replica acks, keys ran twice: {twice:?}");
    for key in &sent {
        assert_eq!(executions.get(key), Some(&1), "key {key} was answered 201 without running once");
    }
    let outage = answered(&answers, 503, killed, promoted);
    let unreplicated = answered(&answers, 503, promoted, rejoined);
    let after = answered(&answers, 201, rejoined, Duration::MAX);
    let before = answered(&answers, 201, Duration::ZERO, killed);
    eprintln!(
        "{test}: {} keys; killed at {killed:?}, replica promoted at {promoted:?} ({:?} later), old primary back \
         as its replica at {rejoined:?}; 201 before the kill: {before}, 503 until the promotion: {outage}, 503 \
         while the new primary had no replica: {unreplicated}, first 201 after it at {recovered:?}, 201 after: \
         {after}",
        sent.len(),
        promoted - killed
    );
    assert!(outage > 0, "requests on the dead primary's slots were answered 503 until the promotion");
    assert!(recovered.is_some(), "requests succeeded again once the slot had a replica, without a restart");
}

#[actix_web::test]
async fn without_replica_acks_a_failover_loses_the_writes_its_replica_lacked() {
    let test = "without_replica_acks_a_failover_loses_the_writes_its_replica_lacked";
    let Some(Outcome { sent, executions, killed, promoted, .. }) = scenario(test, "/pay", false).await else {
        return;
    };
    let twice = executions.values().filter(|n| **n > 1).count();
    eprintln!(
        "{test}: {} keys; replica frozen 1 s before the kill at {killed:?}, promoted at {promoted:?}: \
         {twice} keys ran twice",
        sent.len()
    );
    assert!(twice > 0, "the writes of the second the replica missed were lost at failover, and ran again");
}

/// Holds its key for `x-hold-ms`, counting each run.
#[idempotent(scope = "route", lock_ttl = "3s")]
#[post("/pay-slowly")]
async fn pay_slowly(request: HttpRequest, executions: web::Data<Executions>) -> HttpResponse {
    let hold = request.headers().get("x-hold-ms").and_then(|v| v.to_str().ok()?.parse().ok()).unwrap_or(0);
    let response = charge(&request, &executions).await;
    tokio::time::sleep(Duration::from_millis(hold)).await;
    response
}

/// With replica acknowledgements, a replica cut off for longer than the
/// lease, then its primary killed, runs no key twice: the payments in
/// flight were claimed with the replica's acknowledgement, their
/// completions fail while it is cut off (they are not acknowledged), the
/// leases lapse; the replica is promoted with those claims in flight and
/// lapsed, and their holders, still alive, complete them there with their
/// tokens once the new primary has a replica of its own. The retries that
/// come after are replays.
#[actix_web::test]
async fn a_replica_cut_off_past_the_lease_then_its_primary_killed_runs_no_key_twice() {
    let test = "a_replica_cut_off_past_the_lease_then_its_primary_killed_runs_no_key_twice";
    let Some(mut cluster) = RedisCluster::start(test) else { return };
    let store = RedisStore::connect(&cluster.url()).await.expect("connecting to the private cluster");
    let store = store.with_replica_acks(1, Duration::from_millis(300));
    let primary = cluster.primary_of("{probe}");
    let replica = *cluster.replicas_of(primary).first().expect("the primary has a replica");
    let keys = keys_on(&store, "/pay-slowly", primary, 20);
    let executions = web::Data::new(Executions::default());
    let shared = executions.clone();
    let idem = Idem::new(store).store_timeout(Duration::from_millis(900));
    let server = TestServer::with_workers(4, idem, move |config| {
        config.app_data(shared.clone()).service(pay_slowly);
    });
    let url = server.at("/pay-slowly");

    // Payments in flight, claimed with the replica's acknowledgement.
    let firsts: Vec<_> = keys
        .iter()
        .map(|key| {
            let (url, key) = (url.clone(), key.clone());
            actix_web::rt::spawn(async move {
                post_with(&url, &[("idempotency-key", &key), ("x-hold-ms", "2000")], "{}").await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(executions.0.lock().unwrap().len(), keys.len(), "every payment is running");

    // The replica is cut off for longer than the lease: the payments
    // answer, their completions and renewals are not acknowledged.
    cluster.freeze(replica);
    let dropped: i64 = cluster.query(primary, redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica")).unwrap();
    assert_eq!(dropped, 1, "the primary dropped its replica's link");
    let mut answers = Vec::new();
    for first in firsts {
        answers.push(first.await.expect("a payment"));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;

    // The primary dies; the replica, thawed, is promoted; the old primary
    // comes back as its replica.
    cluster.kill(primary);
    cluster.thaw(replica);
    let cluster = actix_web::rt::task::spawn_blocking(move || {
        assert_eq!(cluster.wait_for_new_primary(primary, Duration::from_secs(20)), replica, "the replica is promoted");
        cluster.restart(primary);
        cluster.wait_until_healthy(Duration::from_secs(20));
        cluster
    })
    .await
    .expect("the failover");
    tokio::time::sleep(Duration::from_secs(3)).await;

    for (key, first) in keys.iter().zip(&answers) {
        assert_eq!(first.status.as_u16(), 201, "{key}: {first:?}");
        let deadline = Instant::now() + Duration::from_secs(10);
        let retry = loop {
            let retry = post_with(&url, &[("idempotency-key", key)], "{}").await;
            if retry.status.as_u16() != 503 || Instant::now() > deadline {
                break retry;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(retry.replayed.as_deref(), Some("true"), "{key}: the retry is a replay: {retry:?}");
        assert_eq!(retry.body, first.body, "{key}: the replay is the first answer");
    }
    let executions = executions.0.lock().unwrap().clone();
    let twice: Vec<_> = executions.iter().filter(|(_, runs)| **runs > 1).collect();
    assert!(twice.is_empty(), "keys ran twice: {twice:?}");
    server.stop().await;
    drop(cluster);
}

//! The order service binary on Redis: the contract, storms across two
//! processes, a process killed in the middle of a payment, and processes
//! that abort after the charge or the order insert (no transaction here:
//! the derived keys keep the retry from doing it twice).

use std::time::Duration;

use idem_tests::crash_checks::{
    crash_after_charge, crash_after_order_insert, crash_after_step, create_after_the_lease, pay_after_the_lease,
};
use idem_tests::hold_checks::held_until_an_operator_settles;
use idem_tests::http::{fresh_key, send};
use idem_tests::order_checks::{
    contract, failure_outcomes, kill_during_payment, sigterm_drains_a_payment_whose_client_left, stats, storms,
};
use idem_tests::redis_node::query;
use idem_tests::redis_server::RedisServer;
use idem_tests::service::OrderService;

async fn contract_on_redis() {
    let Some(redis) = RedisServer::start("contract_on_redis") else { return };
    let service = OrderService::start(&redis.url(), 400).await;
    contract(&service).await;
    failure_outcomes(&service).await;
}

async fn records_encrypted_with_the_service_key_on_redis() {
    use idem_tests::sealed_checks::{RECORDS_KEY, SERVICE_KEY, sealed_order_service};
    let Some(redis) = RedisServer::start("records_encrypted_with_the_service_key_on_redis") else { return };
    let mut service = OrderService::start_with(&redis.url(), 0, &[], &[(RECORDS_KEY, SERVICE_KEY)]).await;
    sealed_order_service(&mut service, &redis.url()).await;
}

async fn storms_across_two_processes_on_one_redis_run_once() {
    let Some(redis) = RedisServer::start("storms_across_two_processes_on_one_redis_run_once") else { return };
    let first = OrderService::start(&redis.url(), 200).await;
    let second = OrderService::start(&redis.url(), 200).await;
    storms(&[&first, &second]).await;
    idem_tests::webhook_checks::webhooks(&[&first, &second]).await;
}

/// The crash scenarios side by side, each on its own Redis: each waits out
/// a dead owner's lease, so together they wait once.
async fn crashes_on_redis_never_charge_or_order_twice() {
    futures_util::future::join5(
        kill_during_a_payment_on_redis_charges_once_and_sigterm_drains(),
        a_crash_after_the_charge_on_redis_leaves_one_charge(),
        a_crash_after_the_step_on_redis_charges_once_without_provider_dedup(),
        a_crash_after_the_order_insert_on_redis_leaves_one_order(),
        held_payments_on_redis_wait_for_an_operator(),
    )
    .await;
}

async fn kill_during_a_payment_on_redis_charges_once_and_sigterm_drains() {
    let Some(redis) = RedisServer::start("kill_during_a_payment_on_redis_charges_once_and_sigterm_drains") else {
        return;
    };
    let mut service = OrderService::start(&redis.url(), 3000).await;
    kill_during_payment(&mut service).await;
    sigterm_drains_a_payment_whose_client_left(&mut service, Duration::from_millis(3000)).await;
}

async fn a_crash_after_the_charge_on_redis_leaves_one_charge() {
    let Some(redis) = RedisServer::start("a_crash_after_the_charge_on_redis_leaves_one_charge") else { return };
    let mut service = OrderService::start_with(&redis.url(), 0, &["--crash-after-charge"], &[]).await;
    let crashed = crash_after_charge(&mut service).await;
    // The retry takes the lapsed lease over and charges again with the same
    // derived key: the provider returns the first charge.
    pay_after_the_lease(&service, &crashed).await;
}

/// The provider charges every call: only the recorded step keeps the
/// takeover from charging again.
async fn a_crash_after_the_step_on_redis_charges_once_without_provider_dedup() {
    let test = "a_crash_after_the_step_on_redis_charges_once_without_provider_dedup";
    let Some(redis) = RedisServer::start(test) else { return };
    let knobs = ["--provider-dedup", "off", "--crash-after-step", "charge"];
    let mut service = OrderService::start_with(&redis.url(), 0, &knobs, &[]).await;
    let crashed = crash_after_step(&mut service).await;
    pay_after_the_lease(&service, &crashed).await;
}

async fn held_payments_on_redis_wait_for_an_operator() {
    let Some(redis) = RedisServer::start("held_payments_on_redis_wait_for_an_operator") else { return };
    let mut service = OrderService::start_with(&redis.url(), 60_000, &["--on-lapse", "hold"], &[]).await;
    held_until_an_operator_settles(&mut service).await;
}

async fn a_crash_after_the_order_insert_on_redis_leaves_one_order() {
    let Some(redis) = RedisServer::start("a_crash_after_the_order_insert_on_redis_leaves_one_order") else { return };
    let knob = [("ORDER_SERVICE_CRASH_AFTER_ORDER_INSERT", "1")];
    let mut service = OrderService::start_with(&redis.url(), 0, &[], &knob).await;
    let crashed = crash_after_order_insert(&mut service).await;
    // No transaction on Redis: the order stayed. The retry builds the same
    // id from the derived key, and the repository keeps the first order.
    assert_eq!(stats(&service).await.0, crashed.orders_before + 1, "the order was written before the crash");
    create_after_the_lease(&service, &crashed).await;
}

/// The commands clients send to a Redis server, as `MONITOR` shows them
/// (those a script runs are marked `lua]` there and left out, and so is a
/// connection's set-up, `HELLO` and `CLIENT SETINFO`: a worker opens its
/// own connection on its first request).
struct Monitor {
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Monitor {
    fn start(url: &str) -> Self {
        use std::io::{BufRead, BufReader, Write};
        let address = url.trim_start_matches("redis://").trim_end_matches('/');
        let mut stream = std::net::TcpStream::connect(address).expect("connecting to redis for MONITOR");
        stream.write_all(b"MONITOR\r\n").expect("sending MONITOR");
        let mut reader = BufReader::new(stream);
        let mut ok = String::new();
        reader.read_line(&mut ok).expect("reading MONITOR's answer");
        assert_eq!(ok.trim(), "+OK");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = std::sync::Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { return };
                let setup = ["\"PING\"", "\"HELLO\"", "\"CLIENT\""].iter().any(|command| line.contains(command));
                if !line.contains("lua]") && !setup {
                    kept.lock().unwrap().push(line);
                }
            }
        });
        Self { lines }
    }

    fn take(&self) -> Vec<String> {
        std::thread::sleep(Duration::from_millis(300));
        std::mem::take(&mut *self.lines.lock().unwrap())
    }
}

/// §12 of the contract: a first execution of `POST /orders` on Redis is
/// three round trips in all (claim, the order's insert, completion), the
/// very first one included; a replay is one.
async fn a_first_order_on_redis_is_three_round_trips_and_a_replay_one() {
    let Some(redis) = RedisServer::start("a_first_order_on_redis_is_three_round_trips_and_a_replay_one") else {
        return;
    };
    let service = OrderService::start(&redis.url(), 0).await;
    let monitor = Monitor::start(&redis.url());
    let _ = monitor.take();
    let key = fresh_key();
    let body = r#"{"customer_id":"cus_1","amount_cents":1200,"currency":"EUR"}"#;
    let first = send(&service.at("/orders"), Some("dora"), Some(&key), Some(body)).await;
    assert_eq!(first.status.as_u16(), 201, "{first:?}");
    let commands = monitor.take();
    assert_eq!(commands.len(), 3, "claim, insert, completion: {commands:#?}");
    // The claim is one `SET NX GET`, the insert and the completion scripts.
    let names: Vec<&str> = commands.iter().map(|c| c.split('"').nth(1).unwrap_or_default()).collect();
    assert_eq!(names, ["SET", "EVALSHA", "EVALSHA"], "{commands:#?}");
    let replay = send(&service.at("/orders"), Some("dora"), Some(&key), Some(body)).await;
    assert_eq!(replay.replayed.as_deref(), Some("true"), "{replay:?}");
    let commands = monitor.take();
    assert_eq!(commands.len(), 1, "the claim alone: {commands:#?}");
    assert!(commands[0].contains("\"SET\""), "{commands:#?}");
}

/// The event path on Redis: the order's `order.created` appended to the
/// stream in the order's own script, two notifiers that redeliver on
/// purpose (one killed and restarted), then one that crashes before its
/// acknowledgement and one right after sending: exactly one notification
/// per order.
async fn every_order_on_redis_is_notified_exactly_once() {
    let Some(redis) = RedisServer::start("every_order_on_redis_is_notified_exactly_once") else { return };
    let service = OrderService::start(&redis.url(), 0).await;
    let transport = idem_tests::redis_events::observer(&redis.url()).await;
    idem_tests::notifier_checks::two_notifiers_and_a_kill(&service, &redis.url(), &transport).await;
    idem_tests::notifier_checks::a_crash_before_the_ack(&service, &redis.url(), &transport).await;
    idem_tests::notifier_checks::a_crash_after_the_send(&service, &redis.url(), &transport).await;
    idem_tests::redis_events::each_order_notified_once(&service, &redis.url()).await;
}

/// §11 of the contract: `order-client` through a proxy that loses 30 % of the
/// responses, on Redis: one order and one charge per intent.
async fn the_retrying_client_through_a_lossy_network_on_redis() {
    let Some(redis) = RedisServer::start("the_retrying_client_through_a_lossy_network_on_redis") else { return };
    let service = OrderService::start(&redis.url(), 0).await;
    idem_tests::client_checks::at_most_once_through_a_lossy_network(&service, 12).await;
}

/// The refunds counter, made the wrong type for a while: the refund's
/// script fails (`WRONGTYPE`) before writing anything.
const REFUNDS: &str = "{order-service}:refunds";

async fn a_refund_during_a_backend_error_on_redis_counts_once() {
    let Some(redis) = RedisServer::start("a_refund_during_a_backend_error_on_redis_counts_once") else { return };
    let service = OrderService::start(&redis.url(), 0).await;
    let address = format!("127.0.0.1:{}", redis.port());
    let saved = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    let (kept, restored) = (std::sync::Arc::clone(&saved), saved);
    let (breaking, repairing) = (address.clone(), address);
    idem_tests::webhook_checks::a_refund_during_a_backend_error_counts_once(
        &service,
        async move || {
            let count: Option<String> = query(&breaking, redis::cmd("GET").arg(REFUNDS)).unwrap();
            *kept.lock().unwrap() = count;
            let _: () = query(&breaking, redis::cmd("DEL").arg(REFUNDS)).unwrap();
            let _: () = query(&breaking, redis::cmd("HSET").arg(REFUNDS).arg("not").arg("a counter")).unwrap();
        },
        async move || {
            let _: () = query(&repairing, redis::cmd("DEL").arg(REFUNDS)).unwrap();
            if let Some(count) = restored.lock().unwrap().take() {
                let _: () = query(&repairing, redis::cmd("SET").arg(REFUNDS).arg(count)).unwrap();
            }
        },
    )
    .await;
}

/// Redis killed and started again (from its append-only file) under a
/// running service: the same process serves every route again within
/// seconds, and every 503 meanwhile says when to retry.
async fn redis_restarted_under_a_running_service() {
    let test = "redis_restarted_under_a_running_service";
    let Some(redis) = RedisServer::start_with(test, &["--appendonly", "yes", "--appendfsync", "always"]) else {
        return;
    };
    let service = OrderService::start(&redis.url(), 0).await;
    let redis = std::sync::Arc::new(std::sync::Mutex::new(redis));
    let (stopping, restarting) = (std::sync::Arc::clone(&redis), std::sync::Arc::clone(&redis));
    idem_tests::restart_checks::every_route_serves_again_after_an_outage(
        &service,
        move || stopping.lock().unwrap().stop(),
        move || restarting.lock().unwrap().restart(),
    )
    .await;
    drop(redis);
}

idem_tests::both_builds!(
    contract_on_redis,
    storms_across_two_processes_on_one_redis_run_once,
    crashes_on_redis_never_charge_or_order_twice,
    a_first_order_on_redis_is_three_round_trips_and_a_replay_one,
    a_refund_during_a_backend_error_on_redis_counts_once,
    records_encrypted_with_the_service_key_on_redis,
    every_order_on_redis_is_notified_exactly_once,
    the_retrying_client_through_a_lossy_network_on_redis;
    redis_restarted_under_a_running_service,
);

//! The order service binary on a Redis Cluster (§6 and §13 of the contract): the
//! contract, storms across two processes, and the event path through the
//! outbox stream to two notifiers. Each test starts a private cluster (three
//! primaries, three replicas), so that `/stats` counts its own requests
//! only. Every multi-key step of the service (the order's insert with its
//! outbox event, a refund, a charge, a notification, an acknowledgement)
//! must keep to one slot here, or the cluster refuses it with `CROSSSLOT`.

use idem_tests::crash_checks::{crash_after_step, pay_after_the_lease};
use idem_tests::hold_checks::held_until_an_operator_settles;
use idem_tests::notifier_checks::two_notifiers_and_a_kill;
use idem_tests::order_checks::{contract, failure_outcomes, storms};
use idem_tests::redis_cluster::RedisCluster;
use idem_tests::redis_events::{each_order_notified_once, observer};
use idem_tests::service::OrderService;
use idem_tests::webhook_checks::webhooks;

async fn contract_on_a_redis_cluster() {
    let Some(cluster) = RedisCluster::start("contract_on_a_redis_cluster") else { return };
    let service = OrderService::start(&cluster.url(), 400).await;
    contract(&service).await;
    failure_outcomes(&service).await;
}

async fn storms_across_two_processes_on_one_redis_cluster_run_once() {
    let Some(cluster) = RedisCluster::start("storms_across_two_processes_on_one_redis_cluster_run_once") else {
        return;
    };
    let first = OrderService::start(&cluster.url(), 200).await;
    let second = OrderService::start(&cluster.url(), 200).await;
    storms(&[&first, &second]).await;
    webhooks(&[&first, &second]).await;
}

/// The order's `order.created` appended to the stream in the order's own
/// script, read by two notifiers that redeliver on purpose (one killed and
/// restarted): exactly one notification per order.
async fn every_order_on_a_redis_cluster_is_notified_exactly_once() {
    let Some(cluster) = RedisCluster::start("every_order_on_a_redis_cluster_is_notified_exactly_once") else {
        return;
    };
    let url = cluster.url();
    let service = OrderService::start(&url, 0).await;
    let transport = observer(&url).await;
    two_notifiers_and_a_kill(&service, &url, &transport).await;
    each_order_notified_once(&service, &url).await;
}

/// The primary holding the service's own data (and some of its records)
/// killed under a running service: once its replica is promoted, the same
/// process serves every route again within seconds, and every 503
/// meanwhile (the store's and the service's own) says when to retry.
async fn a_primary_failover_under_a_running_service() {
    let Some(cluster) = RedisCluster::start("a_primary_failover_under_a_running_service") else { return };
    let service = OrderService::start(&cluster.url(), 0).await;
    let primary = cluster.primary_of("{order-service}");
    let cluster = std::sync::Arc::new(std::sync::Mutex::new(cluster));
    let (killing, waiting) = (std::sync::Arc::clone(&cluster), std::sync::Arc::clone(&cluster));
    idem_tests::restart_checks::every_route_serves_again_after_an_outage(
        &service,
        move || killing.lock().unwrap().kill(primary),
        move || {
            let cluster = waiting.lock().unwrap();
            cluster.wait_for_new_primary(primary, std::time::Duration::from_secs(20));
        },
    )
    .await;
    drop(cluster);
}

/// The payment's durable step on a cluster, each scenario on a cluster of
/// its own, side by side (each waits out a dead owner's lease): a crash
/// right after the step `charge` was recorded, with a provider that charges
/// every call (the takeover gets the recorded charge back: one charge); and
/// two payments killed mid-charge under `--on-lapse hold`, held until the
/// operator's tool releases one and resolves the other.
async fn durable_steps_and_held_payments_on_a_redis_cluster() {
    let test = "durable_steps_and_held_payments_on_a_redis_cluster";
    let (Some(crashing), Some(holding)) = (RedisCluster::start(test), RedisCluster::start(test)) else { return };
    let knobs = ["--provider-dedup", "off", "--crash-after-step", "charge"];
    let mut crashed_service = OrderService::start_with(&crashing.url(), 0, &knobs, &[]).await;
    let mut held_service = OrderService::start_with(&holding.url(), 60_000, &["--on-lapse", "hold"], &[]).await;
    futures_util::future::join(
        async {
            let crashed = crash_after_step(&mut crashed_service).await;
            pay_after_the_lease(&crashed_service, &crashed).await;
        },
        held_until_an_operator_settles(&mut held_service),
    )
    .await;
}

idem_tests::both_builds!(
    contract_on_a_redis_cluster,
    storms_across_two_processes_on_one_redis_cluster_run_once,
    durable_steps_and_held_payments_on_a_redis_cluster;
    every_order_on_a_redis_cluster_is_notified_exactly_once,
    a_primary_failover_under_a_running_service,
);

//! `order-notifier`: one notification per created order, through idem's
//! inbox. Run several at once against the order service's backend:
//!
//! ```text
//! order-notifier --store redis://127.0.0.1:6379/
//! order-notifier --store redis-cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Parser};
use idem_runtime::inbox::Inbox;
use idem_runtime::outbox::{PostgresOutbox, RedisOutbox, Transport};
use idem_runtime::store::Store;
use idem_runtime::{PostgresStore, RedisStore};
use order_notifier::consumer::CONSUMER;
use order_notifier::event::{GROUP, ORDER_CREATED, STREAM};
use order_notifier::{Consumer, Outlet};
use tracing_subscriber::EnvFilter;

/// The notifier's configuration: flag, then environment, then default.
#[derive(Debug, Parser)]
#[command(name = "order-notifier", version, about = "One notification per order, through idem's inbox.")]
struct Config {
    /// The order service's backend: a `redis://` URL, a Redis Cluster's
    /// seed nodes (`redis-cluster://host:port,host:port,...`) or a
    /// `postgres://` URL. (With `memory`, the order service notifies
    /// in-process.) Prefer the environment variable for a URL with a
    /// password.
    #[arg(long, env = "IDEM_STORE", hide_env_values = true)]
    store: String,

    /// The fraction of messages (0 to 1) left unacknowledged on purpose, so
    /// that the transport delivers them again.
    #[arg(long, env = "NOTIFIER_REDELIVER_RATE", default_value_t = 0.0, value_parser = rate)]
    redeliver_rate: f64,

    /// How long a received message stays hidden from the other notifiers
    /// before it is delivered again, unless acknowledged.
    #[arg(long, env = "NOTIFIER_VISIBILITY", default_value = "30s", value_parser = humantime::parse_duration)]
    visibility: Duration,

    /// The inbox lease of a message being processed (renewed while it runs).
    #[arg(long, env = "NOTIFIER_LEASE", default_value = "10s", value_parser = humantime::parse_duration)]
    lease: Duration,

    /// This process's name in the Redis consumer group.
    #[arg(long, env = "NOTIFIER_CONSUMER")]
    consumer: Option<String>,

    /// Fault injection, for tests: abort right after the first notification
    /// is sent, before the inbox records it.
    #[arg(long, env = "NOTIFIER_CRASH_AFTER_SEND", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    crash_after_send: bool,

    /// Fault injection, for tests: abort once the first notification is
    /// sent and recorded, before its message is acknowledged.
    #[arg(long, env = "NOTIFIER_CRASH_BEFORE_ACK", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    crash_before_ack: bool,
}

fn rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if (0.0..=1.0).contains(&rate) => Ok(rate),
        _ => Err("a fraction from 0 to 1, such as 0.3".to_owned()),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .init();
    let config = Config::parse();
    let consumer = match connect(&config).await {
        Ok(consumer) => consumer,
        Err(error) => {
            tracing::error!("{error}");
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(redeliver_rate = config.redeliver_rate, "order-notifier consuming order.created");
    consumer.run(stopped()).await;
    ExitCode::SUCCESS
}

/// The consumer on the backend `config.store` names.
async fn connect(config: &Config) -> Result<Consumer, String> {
    let url = config.store.as_str();
    let name = config.consumer.clone().unwrap_or_else(|| format!("notifier-{}", std::process::id()));
    let scheme = url.split_once("://").map(|(scheme, _)| scheme.to_ascii_lowercase());
    let (store, transport, outlet): (Arc<dyn Store>, Arc<dyn Transport>, Outlet) =
        if scheme.as_deref().is_some_and(is_redis) {
            let store = RedisStore::connect(url).await.map_err(|e| e.to_string())?;
            let outbox = RedisOutbox::connect(url, STREAM, GROUP, &name).await.map_err(|e| e.to_string())?;
            let outlet = Outlet::redis(url).await.map_err(|e| e.to_string())?;
            (Arc::new(store), Arc::new(outbox.visibility(config.visibility)), outlet)
        } else if matches!(scheme.as_deref(), Some("postgres" | "postgresql")) {
            let pool = PostgresStore::pool_options().max_connections(8);
            let store = PostgresStore::connect_with(url, pool).await.map_err(|e| e.to_string())?;
            store.migrate().await.map_err(|e| e.to_string())?;
            let outbox = PostgresOutbox::new(store.pool().clone()).topic(ORDER_CREATED).visibility(config.visibility);
            outbox.migrate().await.map_err(|e| e.to_string())?;
            let outlet = Outlet::postgres(store.pool().clone()).await.map_err(|e| e.to_string())?;
            (Arc::new(store), Arc::new(outbox), outlet)
        } else if url == "memory" {
            return Err("--store memory: the order service notifies in-process on the memory store; \
                    give order-notifier the redis://, redis-cluster:// or postgres:// URL the service uses"
                .to_owned());
        } else {
            return Err("--store / IDEM_STORE must be a redis://, a redis-cluster:// or a postgres:// URL".to_owned());
        };
    // Store calls get a third of the lease at most, so renewals keep up. An
    // event is remembered for a week: far longer than one can stay
    // unacknowledged in the transport.
    let inbox = Inbox::from_arc(store, CONSUMER)
        .ttl(Duration::from_secs(7 * 86_400))
        .lease(config.lease)
        .store_timeout(config.lease / 3);
    Ok(Consumer::new(transport, inbox, outlet)
        .redeliver_rate(config.redeliver_rate)
        .crash_after_send(config.crash_after_send)
        .crash_before_ack(config.crash_before_ack))
}

/// Whether `scheme` names one Redis (or Valkey) server or a cluster's seed
/// nodes.
fn is_redis(scheme: &str) -> bool {
    let server = scheme.strip_suffix("-cluster").unwrap_or(scheme);
    matches!(server, "redis" | "rediss" | "valkey" | "valkeys")
}

/// Completes at SIGTERM or SIGINT.
async fn stopped() {
    let Ok(mut terminate) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("stopping: finishing the notification in hand");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_servers_and_clusters_are_recognized() {
        for scheme in ["redis", "rediss", "valkey", "redis-cluster", "rediss-cluster", "valkeys-cluster"] {
            assert!(is_redis(scheme), "{scheme}");
        }
        for scheme in ["postgres", "cluster", "redis-cluster-cluster", "mysql"] {
            assert!(!is_redis(scheme), "{scheme}");
        }
    }
}

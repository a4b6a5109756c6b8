//! Shared helpers of the integration tests: finding the test servers,
//! starting private ones (a Redis Cluster too) for tests that stop them, and
//! the one HTTP client, execution counter and free-port finder that every
//! test binary uses, and a latency proxy that puts a store server far away.

pub mod backend;
pub mod blocking;
pub mod burst;
pub mod chaos;
pub mod child;
pub mod client_checks;
pub mod conformance;
pub mod counter;
pub mod crash_checks;
pub mod faults;
pub mod hold_checks;
pub mod http;
pub mod inbox_checks;
pub mod logs;
pub mod long_outage;
pub mod natural_keys;
pub mod notifier;
pub mod notifier_checks;
pub mod once_checks;
pub mod order_checks;
pub mod orders;
pub mod outbox_checks;
pub mod port;
#[cfg(feature = "postgres")]
pub mod postgres_server;
pub mod proxy;
#[cfg(feature = "redis")]
pub mod redis_cluster;
#[cfg(feature = "redis")]
pub mod redis_events;
#[cfg(feature = "redis")]
pub mod redis_node;
#[cfg(feature = "redis")]
pub mod redis_server;
pub mod replay_cache_checks;
pub mod resets;
pub mod restart_checks;
pub mod sealed_checks;
pub mod server;
pub mod service;
pub mod slow_store;
pub mod start_gate;
pub mod tool_checks;
pub mod webhook_checks;

//! The Redis store against real servers: the conformance suite, leases,
//! outages, round trips, a slow Redis behind a latency proxy, and
//! `#[idempotent]` on a real actix-web server, in one test binary; and the
//! Redis Cluster test infrastructure. Needs `IDEM_REDIS_URL` and
//! `IDEM_REDIS_CLUSTER_URL` (set by `scripts/test`).
#![cfg(feature = "redis")]

mod actix;
mod cluster_setup;
mod conformance;
mod lease;
mod outage;
mod outbox;
mod round_trips;
mod slow_store;

//! The Redis store against real servers: the conformance suite, leases,
//! outages, round trips, a slow Redis behind a latency proxy, the server
//! settings read at connect, `#[idempotent]` on a real actix-web server
//! (with the replay cache in front of the store too), and all of it again
//! on a real Redis Cluster (with the cluster test infrastructure's own
//! check), in one test binary. Needs `IDEM_REDIS_URL` and
//! `IDEM_REDIS_CLUSTER_URL` (set by `scripts/test`).
#![cfg(feature = "redis")]

mod actix;
mod cluster;
mod cluster_setup;
mod conformance;
mod dead_shard;
mod failover;
mod held_start;
mod lease;
mod long_outage;
mod outage;
mod outbox;
mod repeats;
mod replay_cache;
mod resharding;
mod round_trips;
mod settings;
mod slow_store;
mod stalled_cluster_client;
mod thread_connections;
mod tool;

//! The Redis store against real servers: the conformance suite, leases,
//! outages, round trips, a slow Redis behind a latency proxy, and
//! `#[idempotent]` on a real actix-web server, in one test binary. Needs
//! `IDEM_REDIS_URL` (set by `scripts/test`).
#![cfg(feature = "redis")]

mod actix;
mod conformance;
mod lease;
mod outage;
mod outbox;
mod round_trips;
mod slow_store;

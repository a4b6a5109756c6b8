//! The Postgres store against real servers: the conformance suite, claim
//! races, outages, a slow server behind a latency proxy, statement counts,
//! the sweeper, and `#[idempotent]` on a real actix-web server, in one test
//! binary. Needs `IDEM_POSTGRES_URL` (set by `scripts/test`).
#![cfg(feature = "postgres")]

mod actix;
mod claim_races;
mod conformance;
mod outage;
mod slow_store;
mod statements;
mod sweeper;

//! The Postgres store against real servers: the conformance suite, claim
//! races, READ COMMITTED in a SERIALIZABLE database, renewals from the lease
//! keeper's runtime, outages, a slow server behind a latency proxy, statement
//! counts, the sweeper, and `#[idempotent]` on a real actix-web server (with
//! the replay cache in front of the store too), in one test binary. Needs
//! `IDEM_POSTGRES_URL` (set by `scripts/test`).
#![cfg(feature = "postgres")]

mod actix;
mod claim_races;
mod conformance;
mod held_rollbacks;
mod inbox;
mod isolation;
mod kept_connections;
mod locked_row;
mod long_outage;
mod outage;
mod outbox;
mod renewals;
mod replay_cache;
mod replication;
mod slow_store;
mod statements;
mod sweeper;
mod tool;
mod transactional;
mod unfinished_commits;
mod upgrade;

//! The Postgres store (feature `postgres`).

//! The Redis / Valkey store (feature `redis`).

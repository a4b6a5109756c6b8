//! The store implementations, one module per backend, each behind a cargo
//! feature.

#[cfg(feature = "memory")]
mod memory;
#[cfg(feature = "memory")]
pub use memory::{DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES, MemoryStore};

#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;

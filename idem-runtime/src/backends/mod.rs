//! The store implementations, one module per backend, each behind a cargo
//! feature. Each store is reached from the crate root only.

#[cfg(feature = "memory")]
mod memory;
#[cfg(feature = "memory")]
pub use self::memory::MemoryStore;

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
pub use self::postgres::{InvalidTableName, OnAsyncStandby, PostgresStore};

#[cfg(feature = "redis")]
pub(crate) mod redis;
#[cfg(feature = "redis")]
pub use self::redis::{InvalidKeyPrefix, OnEviction, RedisConnection, RedisStore};

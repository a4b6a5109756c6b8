//! Shared helpers of the integration tests: finding the test servers, and
//! starting private ones for tests that stop them.

pub mod backend;
pub mod burst;
pub mod faults;
pub mod order_checks;
pub mod orders;
#[cfg(feature = "postgres")]
pub mod postgres_server;
#[cfg(feature = "redis")]
pub mod redis_server;
pub mod server;
pub mod service;

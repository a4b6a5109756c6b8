//! Black-box tests of the real `order-service` binary on each store (Redis
//! on one server and on a cluster): its HTTP contract, same-key storms, a
//! process killed mid-payment, and processes that the fault knobs abort
//! inside a handler.

mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "redis")]
mod redis_cluster;

//! Black-box tests of the real `order-service` binary on each store: its
//! HTTP contract, same-key storms, and a process killed mid-payment.

mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;

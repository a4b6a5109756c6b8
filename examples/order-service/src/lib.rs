//! The order service's library: the parts other crates reach. Today that
//! is the webhook signature check, which the service's `Verified`
//! extractor runs and the repository's fuzz target `signature` feeds with
//! arbitrary headers. The service itself is the `order-service` binary.

pub mod signature;

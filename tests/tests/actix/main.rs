//! The actix-web glue on the memory store: requests, problems, lifecycle,
//! concurrency, store faults and observability, in one test binary.

mod client;
mod concurrency;
mod context;
mod lifecycle;
mod lints;
mod observability;
mod problems;
mod requests;
mod store_faults;

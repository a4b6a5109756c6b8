//! The actix-web glue on the memory store: requests, problems, lifecycle,
//! concurrency, store faults and observability, in one test binary.

mod client;
mod completion_outcomes;
mod concurrency;
mod context;
mod keeper_stopped;
mod lifecycle;
mod lints;
mod observability;
mod problems;
mod requests;
mod running_bound;
mod steps;
mod store_faults;

//! The order service: orders and payments made safe to retry with
//! `#[idempotent]`, served by actix-web (the `order-service` binary) or by
//! axum (`order-service-axum`), one HTTP contract over the same business
//! code. See the README for the HTTP interface.
//!
//! - `app.rs`: the routes' state and the start of a process; `config.rs`
//!   its flags; `backend.rs` the store, repository and provider on one
//!   backend;
//! - `orders.rs`, `webhooks.rs`: what the routes do; `model.rs`,
//!   `repo/`, `provider/`: orders, their rows, the simulated provider;
//!   `error.rs`: the service's problems; `faults.rs`: the crash knobs;
//! - `actix/`, `axum/`: the routes and the server, once per framework.
//!
//! [`signature`] is public for the repository's fuzz target.

mod actix;
mod app;
mod axum;
mod backend;
mod config;
mod error;
mod faults;
mod model;
mod orders;
mod provider;
mod repo;
pub mod signature;
mod webhooks;

/// Serves the service with actix-web until SIGTERM, then drains.
pub async fn serve_actix() -> std::io::Result<()> {
    actix::serve(<config::Config as clap::Parser>::parse()).await
}

/// Serves the service with axum until SIGTERM, then drains.
pub async fn serve_axum() -> std::io::Result<()> {
    axum::serve(<config::Config as clap::Parser>::parse()).await
}

//! The order service: orders and payments made safe to retry with
//! `#[idempotent]`. See the README for the HTTP interface.

mod backend;
mod config;
mod error;
mod faults;
mod model;
mod provider;
mod repo;
mod routes;
mod webhooks;

use std::time::Duration;

use actix_web::{App, HttpServer, web};
use clap::Parser;
use idem_runtime::Idem;
use metrics_exporter_prometheus::PrometheusBuilder;
use tracing_subscriber::EnvFilter;

use crate::config::Config;
use crate::provider::Provider;
use crate::routes::{AppState, configure, user_id};

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .init();
    let config = Config::parse();
    let metrics = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| std::io::Error::other(format!("installing the metrics recorder: {e}")))?;
    let backend = backend::connect(&config.store, config.replica_acks).await.map_err(|e| {
        tracing::error!(store = config.store.kind(), error = %e, "cannot reach the store");
        std::io::Error::other(e)
    })?;
    let (writes, shown) = (backend.writes, backend.shown);
    if let Some(notifier) = backend.notifier {
        // The memory store's events stay in this process: notify here.
        actix_web::rt::spawn(async move { notifier.run(std::future::pending()).await });
    }
    let mut idem = Idem::from_arc(backend.store).subject(user_id).on_lapse(config.on_lapse.into());
    if let Some(max_running) = config.max_running {
        idem = idem.max_running(max_running);
    }
    let state = web::Data::new(AppState {
        repo: backend.repo,
        provider: Provider::new(
            backend.ledger,
            Duration::from_millis(config.charge_delay_ms),
            config.provider_dedup.is_on(),
        ),
        faults: config.faults(),
        post_charge_delay: Duration::from_millis(config.post_charge_delay_ms),
        outlet: backend.outlet,
        metrics,
    });
    if config.webhook_secret.is_default() {
        tracing::warn!(
            "the webhook secret is the public default (whsec_test); set --webhook-secret or \
             ORDER_SERVICE_WEBHOOK_SECRET outside tests"
        );
    }
    let secret = web::Data::new(config.webhook_secret.clone());
    let app_idem = idem.clone();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(app_idem.clone())
            .app_data(state.clone())
            .app_data(secret.clone())
            .configure(|routes| configure(routes, &writes))
    })
    // SIGTERM and SIGINT are handled below: drain first, then stop.
    .disable_signals()
    .bind(&config.addr)?;
    let addr = server.addrs().first().map_or(config.addr.clone(), ToString::to_string);
    tracing::info!(
        addr = %addr,
        store = config.store.kind(),
        backend = %shown,
        "order-service listening on http://{addr}"
    );
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(async move {
        let drained = idem.shutdown_on_signal(handle).await;
        tracing::info!(still_running = drained.still_running, "order-service stopped");
    });
    server.await
}

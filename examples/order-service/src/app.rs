//! What both servers share: the state of the routes, and the start of the
//! process (logs, metrics, the backend, the idempotency configuration).

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::sealing::Keyring;
use idem_runtime::{Idem, RequestHead};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use order_notifier::{Consumer, Outlet};
use tracing_subscriber::EnvFilter;

use crate::backend;
use crate::config::Config;
use crate::faults::Faults;
use crate::provider::Provider;
use crate::repo::{Repo, Writes};
use crate::signature::WebhookSecret;

/// Shared state of the routes.
pub(crate) struct AppState {
    /// Orders, as the routes read them.
    pub(crate) repo: Arc<dyn Repo>,
    /// The simulated payment provider.
    pub(crate) provider: Provider,
    /// Crash points armed for tests.
    pub(crate) faults: Faults,
    /// How long a payment waits after the charge, before it returns.
    pub(crate) post_charge_delay: Duration,
    /// Renders `/metrics`.
    pub(crate) metrics: PrometheusHandle,
    /// The notifications sent for created orders.
    pub(crate) outlet: Outlet,
    /// The webhook secret.
    pub(crate) secret: WebhookSecret,
}

/// A process ready to serve: its configuration, the idempotency runtime's,
/// the routes' state and how its write routes keep their rows.
pub(crate) struct Prepared {
    pub(crate) config: Config,
    pub(crate) idem: Idem,
    pub(crate) state: Arc<AppState>,
    pub(crate) writes: Writes,
    /// On the memory store, the notifier that runs in this process.
    pub(crate) notifier: Option<Consumer>,
    /// The backend, for logs (passwords masked).
    pub(crate) shown: String,
}

/// The subject resolver given to idem for `scope = "user"`.
pub(crate) fn user_id(req: &RequestHead<'_>) -> Option<String> {
    caller(req.header("x-user-id"))
}

/// The caller an `X-User-ID` value names, if any.
pub(crate) fn caller(value: Option<&str>) -> Option<String> {
    let value = value?.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

/// Starts logging and metrics, connects the backend and builds the state
/// both servers serve.
pub(crate) async fn prepare(config: Config) -> std::io::Result<Prepared> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .init();
    let metrics = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| std::io::Error::other(format!("installing the metrics recorder: {e}")))?;
    let backend = backend::connect(&config.store, config.replica_acks).await.map_err(|e| {
        tracing::error!(store = config.store.kind(), error = %e, "cannot reach the store");
        std::io::Error::other(e)
    })?;
    let mut idem = Idem::from_arc(backend.store).subject(user_id).on_lapse(config.on_lapse.into());
    match crate::config::records_key() {
        Ok(Some(key)) => {
            tracing::info!(key_id = %key.id(), "idempotency records are encrypted");
            idem = idem.encrypt_records(Keyring::new(key));
        }
        Ok(None) => {}
        Err(error) => {
            tracing::error!("{error}");
            return Err(std::io::Error::other(error));
        }
    }
    if let Some(max_running) = config.max_running {
        idem = idem.max_running(max_running);
    }
    if config.webhook_secret.is_default() {
        tracing::warn!(
            "the webhook secret is the public default (whsec_test); set --webhook-secret or \
             ORDER_SERVICE_WEBHOOK_SECRET outside tests"
        );
    }
    let state = Arc::new(AppState {
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
        secret: config.webhook_secret.clone(),
    });
    Ok(Prepared { idem, state, writes: backend.writes, notifier: backend.notifier, shown: backend.shown, config })
}

/// Logs where a server listens.
pub(crate) fn listening(prepared: &Prepared, addr: &str, framework: &str) {
    tracing::info!(
        addr = %addr,
        store = prepared.config.store.kind(),
        backend = %prepared.shown,
        framework,
        "order-service listening on http://{addr}"
    );
}

/// Waits for SIGTERM or SIGINT (Ctrl-C).
pub(crate) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

//! Wiring the drain into actix-web's shutdown.

use actix_web::dev::ServerHandle;

use crate::engine::Drained;
use crate::web::Idem;

impl Idem {
    /// Graceful shutdown on SIGTERM or SIGINT, for a server started with
    /// signals disabled: waits for the signal, stops accepting connections,
    /// [drains](Idem::drain) the running executions, then stops the server
    /// gracefully.
    ///
    /// actix-web's own signal handling stops each worker as soon as it has
    /// no open connection, dropping any execution whose client already left,
    /// half way. Disable it and let this do the sequence in the right order:
    ///
    /// ```no_run
    /// use actix_web::{App, HttpServer};
    /// use idem_runtime::{Idem, MemoryStore};
    ///
    /// #[actix_web::main]
    /// async fn main() -> std::io::Result<()> {
    ///     let idem = Idem::new(MemoryStore::new());
    ///     let app_idem = idem.clone();
    ///     let server = HttpServer::new(move || App::new().app_data(app_idem.clone()))
    ///         .disable_signals()
    ///         .bind(("127.0.0.1", 8080))?
    ///         .run();
    ///     actix_web::rt::spawn({
    ///         let handle = server.handle();
    ///         async move { idem.shutdown_on_signal(handle).await }
    ///     });
    ///     server.await
    /// }
    /// ```
    pub async fn shutdown_on_signal(&self, server: ServerHandle) -> Drained {
        wait_for_signal().await;
        tracing::info!("shutdown signal received: no new connections, draining idempotent executions");
        self.shutdown(server).await
    }

    /// The same sequence as [`Idem::shutdown_on_signal`], at once: stop
    /// accepting connections, drain, stop the server gracefully.
    pub async fn shutdown(&self, server: ServerHandle) -> Drained {
        server.pause().await;
        let drained = self.drain().await;
        server.stop(true).await;
        drained
    }
}

#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        (Err(error), _) | (_, Err(error)) => {
            tracing::error!(%error, "cannot listen for shutdown signals; waiting for Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() {
    let _ = tokio::signal::ctrl_c().await;
}

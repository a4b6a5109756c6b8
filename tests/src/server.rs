//! A real actix-web server on a free loopback port.

use actix_web::dev::ServerHandle;
use actix_web::web::ServiceConfig;
use actix_web::{App, HttpServer};
use idem_runtime::Idem;

/// A running test server; stopped when dropped.
pub struct TestServer {
    /// Base URL, such as `http://127.0.0.1:41234`.
    pub url: String,
    handle: ServerHandle,
}

impl TestServer {
    /// Starts a server with two workers, `idem` registered and the routes
    /// `routes` adds.
    ///
    /// Must be called inside an actix system (`#[actix_web::test]`).
    pub fn start<F>(idem: Idem, routes: F) -> Self
    where
        F: Fn(&mut ServiceConfig) + Clone + Send + 'static,
    {
        Self::with_workers(2, idem, routes)
    }

    /// Like [`TestServer::start`], with `workers` worker threads.
    pub fn with_workers<F>(workers: usize, idem: Idem, routes: F) -> Self
    where
        F: Fn(&mut ServiceConfig) + Clone + Send + 'static,
    {
        // Bound by actix, with its listen backlog (1024): a burst connects
        // hundreds of clients at once.
        let server = HttpServer::new(move || App::new().app_data(idem.clone()).configure(routes.clone()))
            .workers(workers)
            .shutdown_timeout(1)
            .bind(("127.0.0.1", 0))
            .expect("binding a loopback port");
        let url = format!("http://{}", server.addrs()[0]);
        let server = server.run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        Self { url, handle }
    }

    /// The full URL of `path`.
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// Stops the server gracefully and waits until its workers are gone.
    pub async fn stop(self) {
        self.handle.stop(true).await;
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let handle = self.handle.clone();
        actix_web::rt::spawn(async move { handle.stop(false).await });
    }
}

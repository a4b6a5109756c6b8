//! A real actix-web server on a free loopback port, and a client for it.

use std::net::TcpListener;
use std::time::Duration;

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
    /// Starts a server with `idem` registered and the routes `routes` adds.
    ///
    /// Must be called inside an actix system (`#[actix_web::test]`).
    pub fn start<F>(idem: Idem, routes: F) -> Self
    where
        F: Fn(&mut ServiceConfig) + Clone + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("local address"));
        let server = HttpServer::new(move || App::new().app_data(idem.clone()).configure(routes.clone()))
            .workers(2)
            .listen(listener)
            .expect("listening")
            .shutdown_timeout(1)
            .run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        Self { url, handle }
    }

    /// The full URL of `path`.
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let handle = self.handle.clone();
        actix_web::rt::spawn(async move { handle.stop(false).await });
    }
}

/// An HTTP client with generous limits, for many concurrent requests.
pub fn client() -> awc::Client {
    awc::Client::builder().timeout(Duration::from_secs(30)).connector(awc::Connector::new().limit(0)).finish()
}

/// A fresh random idempotency key.
pub fn fresh_key() -> String {
    idem_runtime::FencingToken::generate().to_hex()
}

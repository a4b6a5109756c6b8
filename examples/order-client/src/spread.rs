//! Spreads attempts over several instances of the service, as a load
//! balancer does: each attempt (a retry included) goes to the next base URL.

use std::sync::atomic::{AtomicUsize, Ordering};

use reqwest::Url;

/// The middleware; place it after the retrying one so that it runs per
/// attempt.
pub struct Spread {
    bases: Vec<Url>,
    next: AtomicUsize,
}

impl Spread {
    /// Attempts go to each of `bases` in turn (an unreadable one is left out).
    pub fn new(bases: &[String]) -> Self {
        let bases = bases.iter().filter_map(|base| Url::parse(base).ok()).collect();
        Self { bases, next: AtomicUsize::new(0) }
    }
}

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Spread {
    async fn handle(
        &self,
        mut req: reqwest::Request,
        extensions: &mut http::Extensions,
        next: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        if !self.bases.is_empty() {
            let base = &self.bases[self.next.fetch_add(1, Ordering::Relaxed) % self.bases.len()];
            let url = req.url_mut();
            // Scheme, host and port of the next instance; the path stays.
            let _ = url.set_scheme(base.scheme());
            let _ = url.set_host(base.host_str());
            let _ = url.set_port(base.port_or_known_default());
        }
        next.run(req, extensions).await
    }
}

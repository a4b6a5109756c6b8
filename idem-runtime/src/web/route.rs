//! The route of a request, as its storage key and its metric label name
//! it: the pattern of the resource that matched, never the raw path (keys
//! and labels must not grow with what clients send).
//!
//! actix-web reports a resource's *first* pattern for every request it
//! matches, so `web::resource(["/a", "/b/{id}"])` would give `/b/1` the
//! route `/a`, and under `scope = "route"` both patterns would share one key
//! namespace. The path's own shape (each parameter replaced by `{name}`,
//! located through `match_info`) tells them apart: when it is not the shape
//! of the reported pattern, it is appended to it. A request that no
//! resource matched (a default service) has one route, `<unmatched>`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use actix_web::HttpRequest;
use actix_web::http::Method;
use metrics::Label;

use crate::observe::{self, Outcome};

/// The route of a request that matched no pattern (a default service).
const UNMATCHED_ROUTE: &str = "<unmatched>";

/// Most routes whose names are kept (per worker thread, and their metric
/// labels for the process): routes are patterns, so a service has far
/// fewer; past it a request makes its route's names for itself.
const KEPT_ROUTES: usize = 1024;

/// Most methods kept per route (see [`Route::of`]).
const KEPT_METHODS: usize = 9;

/// The methods whose routes are kept: those of RFC 9110 and `PATCH`.
const STANDARD_METHODS: [Method; KEPT_METHODS] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::CONNECT,
    Method::OPTIONS,
    Method::TRACE,
    Method::PATCH,
];

/// A request's route as keys, records, spans and metrics name it, made once
/// per route and worker thread and shared by its requests (no allocation
/// per request but the pattern actix-web reports).
#[derive(Clone)]
pub(crate) struct Route(Arc<Names>);

struct Names {
    /// The route (see the module's docs).
    route: Arc<str>,
    /// `METHOD route`, as records keep it for operators.
    claimed: Arc<str>,
    /// The labels of its requests' count, by outcome (see `Outcome::ALL`);
    /// `None` past [`KEPT_ROUTES`].
    labels: Option<&'static OutcomeLabels>,
}

/// The labels of a route's count, one pair per outcome.
type OutcomeLabels = [[Label; 2]; Outcome::ALL.len()];

/// Routes as a worker keeps them: by route, then method.
type KeptRoutes = HashMap<Box<str>, Vec<(Method, Route)>>;

thread_local! {
    /// This worker's routes, by route and method.
    static ROUTES: RefCell<KeptRoutes> = RefCell::default();
}

/// The metric labels of every route, made once for the process (leaked:
/// at most [`KEPT_ROUTES`] of them).
static LABELS: LazyLock<Mutex<HashMap<Box<str>, &'static OutcomeLabels>>> = LazyLock::new(Mutex::default);

impl Route {
    /// The route of `req`.
    pub(crate) fn of(req: &HttpRequest) -> Self {
        let route = route_of(req);
        let method = req.method();
        let kept = ROUTES.with_borrow(|routes| {
            routes.get(route.as_str())?.iter().find(|(kept, _)| kept == method).map(|(_, route)| route.clone())
        });
        if let Some(kept) = kept {
            return kept;
        }
        let made = Self::make(&route, method);
        ROUTES.with_borrow_mut(|routes| {
            // Methods are the client's to choose on a resource without a
            // method guard: only the standard ones are kept, so that made-up
            // ones never take their room.
            let room = STANDARD_METHODS.contains(method)
                && match routes.get(route.as_str()) {
                    Some(methods) => methods.len() < KEPT_METHODS,
                    None => routes.len() < KEPT_ROUTES,
                };
            if room {
                routes.entry(route.into_boxed_str()).or_default().push((method.clone(), made.clone()));
            }
        });
        made
    }

    fn make(route: &str, method: &Method) -> Self {
        let labels = {
            let mut labels = LABELS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match labels.get(route) {
                Some(kept) => Some(*kept),
                None if labels.len() < KEPT_ROUTES => {
                    let name: &'static str = Box::leak(route.into());
                    let made: &'static OutcomeLabels = Box::leak(Box::new(Outcome::ALL.map(|outcome| {
                        [Label::from_static_parts("outcome", outcome.as_str()), Label::from_static_parts("route", name)]
                    })));
                    labels.insert(route.into(), made);
                    Some(made)
                }
                None => None,
            }
        };
        Self(Arc::new(Names { route: route.into(), claimed: format!("{method} {route}").into(), labels }))
    }

    /// `METHOD route`, as records keep it.
    pub(crate) fn claimed(&self) -> Arc<str> {
        Arc::clone(&self.0.claimed)
    }

    /// Counts one request of this route that ended with `outcome`, and
    /// records it on the current span.
    pub(crate) fn count(&self, outcome: Outcome) {
        match self.0.labels {
            Some(labels) => observe::count_labelled(&labels[outcome as usize], outcome),
            None => observe::count(&self.0.route, outcome),
        }
    }
}

impl std::ops::Deref for Route {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0.route
    }
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.route)
    }
}

/// The route of `req` (see the module's docs).
pub(crate) fn route_of(req: &HttpRequest) -> String {
    // A default service: no resource took the whole path. actix-web may
    // still report the pattern of a resource whose guard turned the request
    // away, with none of its parameters: never build on that.
    if !req.match_info().unprocessed().is_empty() {
        return UNMATCHED_ROUTE.to_owned();
    }
    let Some(pattern) = req.match_pattern() else { return UNMATCHED_ROUTE.to_owned() };
    // No parameter on either side (most routes): the shape is the path.
    let info = req.match_info();
    if info.iter().next().is_none() && !pattern.contains('{') {
        let path = info.as_str();
        return if path == pattern { pattern } else { format!("{pattern} | {path}") };
    }
    match shape(req) {
        Some(shape) if shape != plain(&pattern) => format!("{pattern} | {shape}"),
        _ => pattern,
    }
}

/// The path with each parameter replaced by `{name}`, or `None` when a
/// parameter's value is not a slice of the path (a decoded one).
fn shape(req: &HttpRequest) -> Option<String> {
    let info = req.match_info();
    let path = info.as_str();
    let start = path.as_ptr() as usize;
    let mut shape = String::with_capacity(path.len());
    let mut at = 0;
    for (name, value) in info.iter() {
        let offset = (value.as_ptr() as usize).checked_sub(start)?;
        let end = offset.checked_add(value.len())?;
        if offset < at || end > path.len() {
            return None;
        }
        shape.push_str(path.get(at..offset)?);
        shape.push('{');
        shape.push_str(name);
        shape.push('}');
        at = end;
    }
    shape.push_str(path.get(at..)?);
    Some(shape)
}

/// `pattern` as [`shape`] writes it: `{id:\d+}` as `{id}`, a tail `{t}*` as `{t}`.
fn plain(pattern: &str) -> String {
    let mut plain = String::with_capacity(pattern.len());
    let mut chars = pattern.chars().peekable();
    while let Some(ch) = chars.next() {
        plain.push(ch);
        if ch != '{' {
            continue;
        }
        // The parameter's name, then skip its regex up to the matching brace.
        let mut depth = 1;
        let mut in_name = true;
        for ch in chars.by_ref() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                ':' if depth == 1 => in_name = false,
                _ => {}
            }
            if depth == 0 {
                plain.push('}');
                break;
            }
            if in_name {
                plain.push(ch);
            }
        }
        if chars.peek() == Some(&'*') {
            chars.next();
        }
    }
    plain
}

#[cfg(test)]
mod tests {
    use actix_web::test::{TestRequest, call_service, init_service, read_body};
    use actix_web::{App, HttpRequest, HttpResponse, guard, web};

    use super::*;

    #[test]
    fn outcomes_index_their_labels() {
        for (index, outcome) in Outcome::ALL.into_iter().enumerate() {
            assert_eq!(outcome as usize, index, "{outcome:?}");
        }
    }

    #[actix_web::test]
    async fn a_route_is_named_once_per_method() {
        async fn names(req: HttpRequest) -> HttpResponse {
            let route = Route::of(&req);
            if matches!(*req.method(), Method::POST | Method::PUT) {
                assert!(Arc::ptr_eq(&route.0, &Route::of(&req).0), "kept for the next request");
            }
            HttpResponse::Ok().body(format!("{route}|{}", route.claimed()))
        }
        let app = init_service(App::new().service(web::resource("/n/{id}").to(names))).await;
        for (method, expected) in [(Method::POST, "/n/{id}|POST /n/{id}"), (Method::PUT, "/n/{id}|PUT /n/{id}")] {
            let response = call_service(&app, TestRequest::default().method(method).uri("/n/1").to_request()).await;
            assert_eq!(read_body(response).await, expected);
        }
        // Methods a client makes up are named, but not kept.
        for n in 0..20 {
            let method = Method::from_bytes(format!("M{n}").as_bytes()).unwrap();
            let response = call_service(&app, TestRequest::default().method(method).uri("/n/2").to_request()).await;
            assert_eq!(read_body(response).await, format!("/n/{{id}}|M{n} /n/{{id}}"));
        }
        let kept = ROUTES.with_borrow(|routes| routes.get("/n/{id}").map(Vec::len));
        assert_eq!(kept, Some(2), "POST and PUT");
    }

    #[test]
    fn patterns_are_written_as_shapes() {
        assert_eq!(plain("/orders/{id}/payments"), "/orders/{id}/payments");
        assert_eq!(plain(r"/orders/{id:\d+}"), "/orders/{id}");
        assert_eq!(plain(r"/v{v:\d{1,2}}/x"), "/v{v}/x");
        assert_eq!(plain("/files/{tail}*"), "/files/{tail}");
        assert_eq!(plain("/"), "/");
    }

    #[actix_web::test]
    async fn each_pattern_of_a_resource_is_its_own_route() {
        async fn route(req: HttpRequest) -> HttpResponse {
            HttpResponse::Ok().body(route_of(&req))
        }
        let app = init_service(
            App::new()
                .service(web::resource(["/a", "/b/{id}"]).route(web::post().to(route)))
                .service(web::resource(["/p", "/q"]).route(web::post().to(route)))
                .service(web::resource(r"/orders/{id:\d+}/items/{tail}*").route(web::post().to(route)))
                .service(web::scope("/t/{tenant}").service(web::resource("/x/{id}").route(web::post().to(route)))),
        )
        .await;
        let route = |uri: &'static str| {
            let app = &app;
            async move {
                let response = call_service(app, TestRequest::post().uri(uri).to_request()).await;
                String::from_utf8(read_body(response).await.to_vec()).unwrap()
            }
        };
        assert_eq!(route("/a").await, "/a");
        assert_eq!(route("/b/7").await, "/a | /b/{id}", "the second pattern is told apart");
        assert_eq!(route("/b/a").await, "/a | /b/{id}", "a value equal to a static part");
        assert_eq!(route("/p").await, "/p");
        assert_eq!(route("/q").await, "/p | /q", "patterns without parameters are told apart too");
        assert_eq!(route("/orders/12/items/x/y").await, r"/orders/{id:\d+}/items/{tail}*", "single patterns unchanged");
        assert_eq!(route("/t/acme/x/9").await, "/t/{tenant}/x/{id}");
    }

    #[actix_web::test]
    async fn default_services_are_one_route_whatever_the_path() {
        async fn route(req: HttpRequest) -> HttpResponse {
            HttpResponse::Ok().body(route_of(&req))
        }
        // A guard turns POSTs away from both resources, to a default service.
        let app = init_service(
            App::new()
                .service(web::resource("/items/{id}").guard(guard::Get()).to(route))
                .service(
                    web::scope("/api")
                        .service(web::resource("/x/{id}").guard(guard::Get()).to(route))
                        .default_service(web::to(route)),
                )
                .default_service(web::to(route)),
        )
        .await;
        for uri in ["/items/1", "/items/zz-attacker-chosen", "/nowhere", "/api/x/abc", "/api/other"] {
            let response = call_service(&app, TestRequest::post().uri(uri).to_request()).await;
            let body = read_body(response).await;
            assert_eq!(body, UNMATCHED_ROUTE, "{uri}");
        }
    }
}

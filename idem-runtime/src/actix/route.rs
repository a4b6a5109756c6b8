//! The route of an actix-web request: the pattern of the resource that
//! matched, never the raw path.
//!
//! actix-web reports a resource's *first* pattern for every request it
//! matches, so `web::resource(["/a", "/b/{id}"])` would give `/b/1` the
//! route `/a`, and under `scope = "route"` both patterns would share one key
//! namespace. The path's own shape (each parameter replaced by `{name}`,
//! located through `match_info`) tells them apart: when it is not the shape
//! of the reported pattern, it is appended to it. A request that no
//! resource matched (a default service) has one route, `<unmatched>`.

use actix_web::HttpRequest;

use crate::web::{Route, UNMATCHED_ROUTE};

/// The route of `req`, named.
pub(super) fn of(req: &HttpRequest) -> Route {
    Route::named(&route_of(req), req.method().as_str())
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
    use actix_web::http::Method;
    use actix_web::test::{TestRequest, call_service, init_service, read_body};
    use actix_web::{App, HttpRequest, HttpResponse, guard, web};

    use super::*;

    #[actix_web::test]
    async fn a_route_is_named_once_per_method() {
        async fn names(req: HttpRequest) -> HttpResponse {
            let route = of(&req);
            if matches!(*req.method(), Method::POST | Method::PUT) {
                assert!(route.is(&of(&req)), "kept for the next request");
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

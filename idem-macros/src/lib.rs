//! The `#[idempotent]` attribute for actix-web and axum handlers.
//!
//! Use it through the runtime crate, which re-exports it as
//! `idem_runtime::idempotent`; this crate only generates code, every behaviour
//! lives in `idem-runtime`. The attribute and its arguments are documented on
//! [`macro@idempotent`].

mod args;
mod attrs;
mod duration;
mod errors;
mod expand;
mod expand_axum;
mod framework;
mod openapi;
mod validate;

use proc_macro::TokenStream;
use proc_macro2::Span;
use syn::Item;

/// Makes an actix-web handler safe to retry with an `Idempotency-Key` header.
///
/// ```ignore
/// use actix_web::{post, web, Responder};
/// use idem_runtime::idempotent;
///
/// /// Places an order; a retry with the same key gets the first response back.
/// #[idempotent(ttl = "24h", scope = "user")]
/// #[post("/orders")]
/// async fn create_order(body: web::Json<NewOrder>, db: web::Data<Db>) -> impl Responder {
///     /* ... */
/// }
/// ```
///
/// The handler keeps its own signature, extractors and return type. The
/// route attribute (`#[post(..)]`, `#[route(..)]`, ...) may be above or
/// below `#[idempotent]`, or absent when the handler is registered with
/// `web::resource("/orders").route(web::post().to(create_order))`.
///
/// # Arguments
///
/// Every argument is optional and checked at compile time; a mistake is a
/// compile error pointing at the offending token.
///
/// | argument | meaning | default |
/// |---|---|---|
/// | `ttl = "24h"` | how long a completed response is kept and replayed | `"24h"` |
/// | `scope = "user"` | namespace of the key: `"user"` (route and authenticated subject), `"route"` (method and route pattern, shared by every caller) or `"global"` (the key alone). The default keeps callers apart: under `"route"` or `"global"`, a caller who sends another caller's key and body gets that caller's response; `"user"` needs a subject resolver on `Idem` (without one the route answers 500) | `"user"` |
/// | `key = "header"` | where the key comes from: `"header"` (the `header` below), `"path:NAME"` (a path parameter, as `web::Path` decodes it) or `"json:/POINTER"` (an RFC 6901 pointer into the JSON body, a string or an integer there): a *natural key* such as an event id | `"header"` |
/// | `fingerprint_headers = ["x-account-id"]` | request headers that are part of the fingerprint, compared without case: the same key and body with another value (or none) is another request, `422` | none |
/// | `lock_ttl = "30s"` | lease of an execution in flight, renewed while the handler runs; must be shorter than `ttl` | `"30s"` |
/// | `header = "Idempotency-Key"` | the header that carries the key (only with `key = "header"`); a valid header name | `"Idempotency-Key"` |
/// | `required = true` | `false`: a request without the key runs without idempotency | `true` |
/// | `in_flight = "reject"` | a concurrent duplicate gets `409` at once (`"reject"`), or waits for the first one's response (`"wait"`) | `"reject"` |
/// | `wait = "10s"` | longest wait in `in_flight = "wait"` mode, then `409`; only allowed with that mode | `"10s"` |
/// | `on_lapse = "takeover"` | what a retry finds when an execution's lease lapsed without completing (its process crashed or went silent): `"takeover"` runs the handler again (crash recovery; its recorded durable steps are not repeated), `"hold"` never re-runs it by itself: the key answers `409` `execution-held` until an operator releases or resolves it with the `idem` tool | the `Idem` default, itself `"takeover"` |
/// | `crate = "idem_runtime"` | path of the runtime crate, when it is renamed or re-exported | `::idem_runtime` |
///
/// Durations are one or more `<number><unit>` parts, units `d`, `h`, `m`,
/// `s`, largest first: `"90s"`, `"1h30m"`, `"7d"`. Zero is refused.
///
/// # What it expands to
///
/// `#[idempotent(ttl = "24h", scope = "user")]` on a handler is equivalent
/// to this hand-written code: the handler is kept whole inside a wrapper
/// that actix-web registers, and the wrapper gives the request and its raw
/// payload to the runtime, which buffers the body, checks the key, then runs
/// the handler (with its own extractors over the buffered body) at most
/// once, or replays its stored response. The code is the compile-time
/// suite's `tests/ui/pass/expansion.rs`, which compiles and runs it.
///
/// ```ignore
#[doc = include_str!("../tests/ui/pass/expansion.rs")]
/// ```
///
/// # Other attributes beside it
///
/// | attribute | where it goes |
/// |---|---|
/// | actix-web's route macros (`#[post("/x")]`, `#[routes]`, `#[actix_web::get("/x")]`), above or below | the wrapper, which actix-web registers |
/// | doc comments, `#[cfg]`, `#[deprecated]` | the wrapper: they describe, remove or flag the item users see |
/// | lint levels (`#[allow]`, `#[expect]`, `#[warn]`, `#[deny]`, `#[forbid]`) | the wrapper; the handler is nested in it, so the level reaches both, and an `#[expect]` is met by either |
/// | `#[utoipa::path(..)]`, below | applied first, to the handler as written (its name, its arguments), then `#[idempotent]` again |
/// | anything else below (`#[tracing::instrument]`, `#[fastrace::trace]`, ...) | the handler itself, so it instruments the business code once per execution (not replays) |
///
/// A bare `#[trace]` or `#[get]` counts as actix-web's only when it takes a
/// path string (`#[trace("/x")]`); `#[fastrace::trace]` is not a route. An
/// attribute macro written *above* `#[idempotent]` runs first, on the
/// handler as written. `#[idempotent]` twice on one handler is a compile
/// error.
///
/// # Handlers it takes
///
/// An `async fn` without `self`: free functions, generic ones (type and
/// const parameters; register `create::<Postgres>` with `.to(..)`) and
/// associated functions in an `impl` block, `Self` included. Lifetime
/// parameters and `impl Trait` arguments are refused with a message.
/// Registered with `.to(..)`, an annotated handler has the wrapper's
/// signature (`HttpRequest`, `Payload`): unit-test the business function
/// itself, a plain function the handler calls.
///
/// The runtime crate is found under the name the caller's `Cargo.toml`
/// gives it (a renamed dependency works as is); `crate = ".."` overrides
/// that. `__private` is not a public API: only this attribute may use it.
#[proc_macro_attribute]
pub fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    idempotent2(args.into(), item.into()).into()
}

/// Makes an axum handler safe to retry with an `Idempotency-Key` header:
/// `#[idempotent]` for axum, which the runtime re-exports as
/// `idem_runtime::axum::idempotent` (and as `idem_runtime::idempotent`
/// without its `actix` feature).
///
/// ```ignore
/// use axum::{Json, routing::post, Router};
/// use idem_runtime::axum::idempotent;
///
/// #[idempotent(ttl = "24h", scope = "user")]
/// async fn create_order(State(db): State<Db>, Json(order): Json<NewOrder>) -> impl IntoResponse {
///     /* ... */
/// }
///
/// let app = Router::new().route("/orders", post(create_order)).with_state(db).layer(idem.layer());
/// ```
///
/// The arguments and their compile-time checks are those of
/// [`macro@idempotent`]. The handler's name becomes a unit type that
/// implements axum's `Handler` for every state its extractors accept, so
/// it is registered as written (`post(create_order)`); it cannot be generic
/// or sit in an `impl` block.
#[proc_macro_attribute]
pub fn idempotent_axum(args: TokenStream, item: TokenStream) -> TokenStream {
    expansion(args.into(), item.into(), framework::Framework::Axum).into()
}

fn idempotent2(args: proc_macro2::TokenStream, item: proc_macro2::TokenStream) -> proc_macro2::TokenStream {
    expansion(args, item, framework::Framework::Actix)
}

fn expansion(
    args: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
    framework: framework::Framework,
) -> proc_macro2::TokenStream {
    let function = match syn::parse2::<Item>(item.clone()) {
        Ok(Item::Fn(function)) => function,
        Ok(_) => {
            let error = syn::Error::new(Span::call_site(), "`#[idempotent]` goes on an `async fn` request handler");
            return with_error(item, error);
        }
        Err(error) => return with_error(item, error),
    };
    let options = args::Args::parse(args.clone()).and_then(args::Args::build);
    match (options, validate::handler(&function, framework)) {
        (Ok(options), Ok(())) => match framework {
            framework::Framework::Actix => expand::expand(&options, &args, function),
            framework::Framework::Axum => expand_axum::expand(&options, &args, function),
        },
        (Err(mut error), Err(more)) => {
            error.combine(more);
            with_error(item, error)
        }
        (Err(error), Ok(())) | (Ok(_), Err(error)) => with_error(item, error),
    }
}

/// The user's function unchanged, plus the error: the compiler reports the
/// error, and the IDE still knows the function.
fn with_error(mut item: proc_macro2::TokenStream, error: syn::Error) -> proc_macro2::TokenStream {
    item.extend(error.into_compile_error());
    item
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::idempotent2;

    #[test]
    fn on_error_keeps_the_function_and_reports_every_error() {
        let item = quote!(
            fn create_order() -> HttpResponse {
                HttpResponse::Created().finish()
            }
        );
        let out = idempotent2(quote!(scope = "tenant"), item.clone()).to_string();
        assert!(out.starts_with(&item.to_string()), "{out}");
        assert_eq!(out.matches("compile_error").count(), 2, "{out}");
    }

    #[test]
    fn refuses_what_is_not_a_function() {
        let item = quote!(
            struct Orders;
        );
        let out = idempotent2(quote!(), item.clone()).to_string();
        assert!(out.starts_with(&item.to_string()), "{out}");
        assert!(out.contains("goes on an `async fn` request handler"), "{out}");
    }

    #[test]
    fn expands_a_valid_handler() {
        let out = idempotent2(
            quote!(ttl = "1h"),
            quote!(
                async fn f() {}
            ),
        )
        .to_string();
        assert!(out.contains("__idem_req"), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
    }
}

//! Code generation: the user's handler, kept whole, inside a wrapper that
//! hands the request to `__private::handle`.

use proc_macro2::{Delimiter, Group, Ident, Literal, Span, TokenStream};
use quote::quote;
use syn::{Attribute, ItemFn, Visibility};

use crate::args::Scope;
use crate::validate::{InFlight, Options};

/// actix-web's route macros (`#[post("/x")]`, `#[actix_web::route(..)]`, ...),
/// recognised by the last segment of the attribute's path.
const ROUTE_MACROS: [&str; 11] =
    ["get", "post", "put", "patch", "delete", "head", "options", "trace", "connect", "route", "routes"];

/// Whether an attribute belongs on the wrapper rather than on the handler.
///
/// Route macros must see the wrapper (the function actix-web registers);
/// docs describe the public item; `cfg` must remove both; `deprecated` warns
/// the code that registers the handler, not the wrapper that calls it.
fn belongs_outside(attr: &Attribute) -> bool {
    let path = attr.path();
    ["doc", "cfg", "deprecated"].iter().any(|name| path.is_ident(name))
        || path.segments.last().is_some_and(|segment| ROUTE_MACROS.iter().any(|name| segment.ident == name))
}

/// Expands a checked handler.
///
/// ```text
/// #[post("/orders")]
/// pub async fn create_order(req: HttpRequest, payload: Payload) -> HttpResponse {
///     async fn create_order(/* the user's extractors */) -> /* the user's type */ { /* body */ }
///     const __IDEM_OPTIONS: RouteOptions = RouteOptions { /* arguments */ };
///     handle(&__IDEM_OPTIONS, req, payload, create_order).await
/// }
/// ```
pub(crate) fn expand(options: &Options, mut function: ItemFn) -> TokenStream {
    let (outside, inside): (Vec<Attribute>, Vec<Attribute>) =
        std::mem::take(&mut function.attrs).into_iter().partition(belongs_outside);
    function.attrs = inside;
    // The handler becomes an item of the wrapper's body: the visibility is the
    // wrapper's now.
    let vis = std::mem::replace(&mut function.vis, Visibility::Inherited);
    let name = function.sig.ident.clone();

    let krate = &options.krate;
    let private = quote!(#krate::__private);
    let request = Ident::new("__idem_req", Span::mixed_site());
    let payload = Ident::new("__idem_payload", Span::mixed_site());
    let route_options = Ident::new("__IDEM_OPTIONS", Span::mixed_site());
    let options = route_options_value(options, &private);
    // A handler that actix-web cannot call (an argument that is not an
    // extractor, say) fails the bounds of `handle`: report it on the
    // handler's parameter list rather than on the attribute.
    // Only the call's own tokens take that span: the arguments inside keep
    // theirs (the locals' hygiene, the handler's name).
    let span = function.sig.paren_token.span.join();
    let arguments = Group::new(Delimiter::Parenthesis, quote!(&#route_options, #request, #payload, #name));
    let call = respan(quote!(#private::handle #arguments .await), span);

    quote! {
        #(#outside)*
        #vis async fn #name(
            #request: #private::HttpRequest,
            #payload: #private::Payload,
        ) -> #private::HttpResponse {
            #function
            const #route_options: #private::RouteOptions = #options;
            #call
        }
    }
}

/// `tokens` with the span of every top-level token (and of every group's
/// delimiters, not its content) set to `span`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            token.set_span(span);
            token
        })
        .collect()
}

/// The `RouteOptions { .. }` literal.
fn route_options_value(options: &Options, private: &TokenStream) -> TokenStream {
    let seconds = |duration: std::time::Duration| {
        let seconds = Literal::u64_unsuffixed(duration.as_secs());
        quote!(#private::Duration::from_secs(#seconds))
    };
    let ttl = seconds(options.ttl);
    let lock_ttl = seconds(options.lock_ttl);
    let scope = match options.scope {
        Scope::User => quote!(User),
        Scope::Route => quote!(Route),
        Scope::Global => quote!(Global),
    };
    let header = Literal::string(&options.header);
    let required = options.required;
    let in_flight = match options.in_flight {
        InFlight::Reject => quote!(#private::InFlight::Reject),
        InFlight::Wait(wait) => {
            let wait = seconds(wait);
            quote!(#private::InFlight::Wait(#wait))
        }
    };
    quote! {
        #private::RouteOptions {
            ttl: #ttl,
            lock_ttl: #lock_ttl,
            scope: #private::Scope::#scope,
            header: #header,
            required: #required,
            in_flight: #in_flight,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Args;

    fn expand_str(args: TokenStream, function: TokenStream) -> String {
        let options = match Args::parse(args).and_then(Args::build) {
            Ok(options) => options,
            Err(error) => panic!("{error}"),
        };
        let function: ItemFn = match syn::parse2(function) {
            Ok(function) => function,
            Err(error) => panic!("{error}"),
        };
        expand(&options, function).to_string()
    }

    #[test]
    fn wraps_the_handler_whole() {
        let out = expand_str(
            quote!(),
            quote! {
                /// Creates an order.
                #[post("/orders")]
                #[tracing::instrument]
                pub async fn create_order(body: web::Json<NewOrder>) -> impl Responder { body.0.id }
            },
        );
        let expected = quote! {
            #[doc = r" Creates an order."]
            #[post("/orders")]
            pub async fn create_order(
                __idem_req: ::idem_runtime::__private::HttpRequest,
                __idem_payload: ::idem_runtime::__private::Payload,
            ) -> ::idem_runtime::__private::HttpResponse {
                #[tracing::instrument]
                async fn create_order(body: web::Json<NewOrder>) -> impl Responder { body.0.id }
                const __IDEM_OPTIONS: ::idem_runtime::__private::RouteOptions =
                    ::idem_runtime::__private::RouteOptions {
                        ttl: ::idem_runtime::__private::Duration::from_secs(86400),
                        lock_ttl: ::idem_runtime::__private::Duration::from_secs(30),
                        scope: ::idem_runtime::__private::Scope::User,
                        header: "Idempotency-Key",
                        required: true,
                        in_flight: ::idem_runtime::__private::InFlight::Reject,
                    };
                ::idem_runtime::__private::handle(&__IDEM_OPTIONS, __idem_req, __idem_payload, create_order).await
            }
        };
        assert_eq!(out, expected.to_string());
    }

    #[test]
    fn carries_every_argument_and_the_crate_path() {
        let out = expand_str(
            quote!(
                ttl = "1h30m",
                scope = "global",
                lock_ttl = "1m",
                header = "X-Key",
                required = false,
                in_flight = "wait",
                wait = "15s",
                crate = "my_idem"
            ),
            quote!(
                async fn f() {}
            ),
        );
        for part in [
            "my_idem :: __private :: Duration :: from_secs (5400)",
            "my_idem :: __private :: Duration :: from_secs (60)",
            "my_idem :: __private :: Scope :: Global",
            "header : \"X-Key\"",
            "required : false",
            "my_idem :: __private :: InFlight :: Wait (my_idem :: __private :: Duration :: from_secs (15))",
        ] {
            assert!(out.contains(part), "{part} missing from {out}");
        }
        assert!(!out.contains("idem_runtime"), "{out}");
    }

    #[test]
    fn outer_attributes_are_route_macros_docs_cfg_and_deprecated() {
        let outside = |attr: Attribute| belongs_outside(&attr);
        assert!(outside(syn::parse_quote!(#[get("/")])));
        assert!(outside(syn::parse_quote!(#[actix_web::routes])));
        assert!(outside(syn::parse_quote!(#[cfg(feature = "x")])));
        assert!(outside(syn::parse_quote!(#[doc = "x"])));
        assert!(outside(syn::parse_quote!(#[deprecated])));
        assert!(!outside(syn::parse_quote!(#[allow(clippy::too_many_arguments)])));
        assert!(!outside(syn::parse_quote!(#[tracing::instrument])));
    }
}

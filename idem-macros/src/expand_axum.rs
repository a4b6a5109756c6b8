//! Code generation for axum: the handler's name becomes a unit type that
//! implements axum's `Handler` for any state its extractors accept, and
//! whose call hands the request to `__private::axum::handle` with the
//! user's function, kept whole inside.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{ToTokens, quote};
use syn::{FnArg, ItemFn, Visibility};

use crate::expand::{hash, respan, route_options_value, split_attributes};
use crate::framework::Framework;
use crate::validate::Options;

/// Expands a checked axum handler.
///
/// ```text
/// pub struct create_order;
///
/// impl<S, M> Handler<(Idempotent, M), S> for create_order
/// where
///     S: Send + Sync + 'static,
///     (State<Db>, Json<NewOrder>): Extract<S, M>,
/// {
///     type Future = Answering;
///     fn call(self, req: Request, state: S) -> Answering {
///         async fn create_order(/* the user's extractors */) -> /* the user's type */ { /* body */ }
///         const OPTIONS: RouteOptions = RouteOptions { /* arguments */ };
///         Box::pin(handle::<_, (State<Db>, Json<NewOrder>), S, M>(&OPTIONS, req, state, create_order))
///     }
/// }
/// ```
///
/// The handler is registered as it was (`post(create_order)`); the where
/// clause holds its argument types as written, so an argument that is not
/// an extractor is reported on it.
pub(crate) fn expand(options: &Options, args: &TokenStream, function: ItemFn) -> TokenStream {
    let (outside, mut function) = match split_attributes(options, args, function, Framework::Axum) {
        Ok(split) => split,
        Err(again) => return again,
    };
    let krate = &options.krate;
    let private = quote!(#krate::__private);
    // Names the user can never meet: suffixed with a hash of the handler.
    let tag = hash(&function.to_token_stream().to_string());
    let request = Ident::new(&format!("__idem_req_{tag}"), Span::mixed_site());
    let state = Ident::new(&format!("__idem_state_{tag}"), Span::mixed_site());
    let route_options = Ident::new(&format!("__IDEM_OPTIONS_{tag}"), Span::mixed_site());
    let state_type = Ident::new("__IdemState", Span::mixed_site());
    let marker = Ident::new("__IdemVia", Span::mixed_site());
    let value = route_options_value(options, &private);

    let vis = std::mem::replace(&mut function.vis, Visibility::Inherited);
    let name = function.sig.ident.clone();
    let types: Vec<TokenStream> = function
        .sig
        .inputs
        .iter()
        .filter_map(|input| match input {
            FnArg::Typed(typed) => Some(typed.ty.to_token_stream()),
            FnArg::Receiver(_) => None,
        })
        .collect();
    // Without arguments there is no extractor, hence no marker to infer.
    let (generics, via, via_bound) = if types.is_empty() {
        (quote!(<#state_type>), quote!(()), TokenStream::new())
    } else {
        (quote!(<#state_type, #marker>), quote!(#marker), quote!(#marker: 'static,))
    };
    // The cfg and lint levels of the handler hold for its impl too; its
    // docs and deprecation describe the type.
    let on_impl: Vec<_> = outside
        .iter()
        .filter(|attr| attr.path().is_ident("cfg") || crate::attrs::is_lint_level(attr))
        .map(crate::expand::as_allow)
        .collect();
    let span = function.sig.paren_token.span.join();
    let bound = respan(quote!(#private::axum::Extract<#state_type, #via>), span);
    let handler_item = function.to_token_stream();
    quote! {
        #(#outside)*
        #[allow(non_camel_case_types, reason = "an #[idempotent] axum handler keeps its function's name")]
        #[derive(Clone, Copy, Debug)]
        #vis struct #name;

        #(#on_impl)*
        impl #generics #private::axum::Handler<(#private::axum::Idempotent, #via), #state_type> for #name
        where
            #state_type: ::core::marker::Send + ::core::marker::Sync + 'static,
            #via_bound
            (#(#types,)*): #bound,
        {
            type Future = #private::axum::Answering;

            fn call(self, #request: #private::axum::Request, #state: #state_type) -> Self::Future {
                #handler_item
                const #route_options: #private::RouteOptions = #value;
                ::std::boxed::Box::pin(#private::axum::handle::<_, (#(#types,)*), #state_type, #via>(
                    &#route_options,
                    #request,
                    #state,
                    #name,
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(args: TokenStream, function: TokenStream) -> String {
        crate::expand::tests::expanded_with(expand, args, function)
    }

    #[test]
    fn the_handler_becomes_a_type_that_keeps_its_function_inside() {
        let out = expand_str(
            quote!(scope = "route"),
            quote! {
                /// Creates an order.
                #[tracing::instrument]
                pub async fn create_order(State(db): State<Db>, Json(order): Json<NewOrder>) -> impl IntoResponse { db.create(order) }
            },
        );
        assert!(out.starts_with("# [doc = r\" Creates an order.\"]"), "{out}");
        assert!(out.contains("pub struct create_order ;"), "{out}");
        assert!(out.contains("(State < Db > , Json < NewOrder > ,) :"), "the argument types: {out}");
        assert!(out.contains("# [tracing :: instrument] async fn create_order (State (db) : State < Db >"), "{out}");
        assert!(out.contains("Scope :: Route"), "{out}");
    }

    #[test]
    fn a_handler_without_arguments_has_no_marker_to_infer() {
        let out = expand_str(
            quote!(),
            quote! {
                async fn ping() -> &'static str { "pong" }
            },
        );
        assert!(out.contains("Idempotent , ())"), "{out}");
        assert!(!out.contains("__IdemVia"), "{out}");
    }

    #[test]
    fn attributes_that_run_first_apply_the_axum_attribute_again() {
        let out = expand_str(
            quote!(ttl = "1h"),
            quote! {
                #[utoipa::path(post, path = "/orders")]
                async fn create() -> String { todo!() }
            },
        );
        assert!(out.contains("# [:: idem_runtime :: axum :: idempotent (ttl = \"1h\")]"), "{out}");
    }
}

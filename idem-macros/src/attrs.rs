//! Where each attribute of the annotated function goes.
//!
//! The expansion is a wrapper (what actix-web registers) with the user's
//! handler nested whole inside it. Every other attribute on the function
//! belongs to one of the two, or must run first:
//!
//! | attribute | goes | why |
//! |---|---|---|
//! | actix-web's route macros: `#[post("/x")]` (a bare name with a string path), `#[routes]`, `#[actix_web::post(..)]` | wrapper | actix-web registers the wrapper |
//! | `doc`, `cfg`, `deprecated` | wrapper | they describe, remove or warn about the item users see |
//! | lint levels: `allow`, `expect`, `warn`, `deny`, `forbid` | wrapper | the handler is nested in the wrapper, so a level there reaches both, and an `expect` is met by either |
//! | `#[utoipa::path(..)]` | before `#[idempotent]`, on the function as written | it reads the handler's own arguments and name, and its items must sit beside the route |
//! | anything else (`#[tracing::instrument]`, `#[fastrace::trace]`, ...) | handler | it instruments or changes the business function |
//!
//! A name like `trace`, `get` or `route` alone is not a route macro: only
//! actix-web's take a path string (`#[trace("/x")]`), and `#[fastrace::trace]`
//! or `#[trace]` (imported from a tracing crate) stays on the handler.

use syn::{Attribute, Meta};

/// actix-web's route macros.
const ROUTE_MACROS: [&str; 11] =
    ["get", "post", "put", "patch", "delete", "head", "options", "trace", "connect", "route", "routes"];

/// Lint level attributes.
const LINT_LEVELS: [&str; 5] = ["allow", "expect", "warn", "deny", "forbid"];

/// Where an attribute goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// On the wrapper.
    Wrapper,
    /// Applied before `#[idempotent]`, on the function as the user wrote it.
    First,
    /// On the user's handler.
    Handler,
}

/// Where `attr` goes (see the module's table).
pub(crate) fn place(attr: &Attribute) -> Place {
    let path = attr.path();
    if ["doc", "cfg", "deprecated"].iter().any(|name| path.is_ident(name))
        || LINT_LEVELS.iter().any(|name| path.is_ident(name))
        || is_route_macro(attr)
    {
        return Place::Wrapper;
    }
    if is_openapi_path(attr) {
        return Place::First;
    }
    Place::Handler
}

/// Whether `attr` is another `#[idempotent]`.
pub(crate) fn is_idempotent(attr: &Attribute) -> bool {
    attr.path().segments.last().is_some_and(|segment| segment.ident == "idempotent")
}

/// Whether `attr` is a lint level.
pub(crate) fn is_lint_level(attr: &Attribute) -> bool {
    LINT_LEVELS.iter().any(|name| attr.path().is_ident(name))
}

/// actix-web's route macros, by what they are: `actix_web::<name>`, or a
/// bare `<name>` that takes a path string first (`#[post("/orders")]`), or
/// a bare `#[routes]`.
fn is_route_macro(attr: &Attribute) -> bool {
    let segments: Vec<String> = attr.path().segments.iter().map(|segment| segment.ident.to_string()).collect();
    let Some(last) = segments.last() else { return false };
    if !ROUTE_MACROS.contains(&last.as_str()) {
        return false;
    }
    match (segments.len(), &attr.meta) {
        (2, _) => segments[0] == "actix_web",
        (1, Meta::Path(_)) => last == "routes",
        (1, Meta::List(list)) => last != "routes" && starts_with_string(&list.tokens),
        _ => false,
    }
}

/// Whether `tokens` begin with a string literal.
fn starts_with_string(tokens: &proc_macro2::TokenStream) -> bool {
    match tokens.clone().into_iter().next() {
        Some(proc_macro2::TokenTree::Literal(literal)) => {
            matches!(syn::parse_str::<syn::Lit>(&literal.to_string()), Ok(syn::Lit::Str(_)))
        }
        // A path passed through `macro_rules!` (`$path:literal`).
        Some(proc_macro2::TokenTree::Group(group)) if group.delimiter() == proc_macro2::Delimiter::None => {
            starts_with_string(&group.stream())
        }
        _ => false,
    }
}

/// `#[utoipa::path(..)]`.
fn is_openapi_path(attr: &Attribute) -> bool {
    let segments: Vec<String> = attr.path().segments.iter().map(|segment| segment.ident.to_string()).collect();
    segments == ["utoipa", "path"]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(attr: Attribute) -> Place {
        place(&attr)
    }

    #[test]
    fn route_macros_are_recognised_by_what_they_are() {
        assert_eq!(at(syn::parse_quote!(#[get("/")])), Place::Wrapper);
        assert_eq!(at(syn::parse_quote!(#[post("/orders", wrap = "Logger")])), Place::Wrapper);
        assert_eq!(at(syn::parse_quote!(#[route("/", method = "GET", method = "HEAD")])), Place::Wrapper);
        assert_eq!(at(syn::parse_quote!(#[routes])), Place::Wrapper);
        assert_eq!(at(syn::parse_quote!(#[actix_web::trace("/x")])), Place::Wrapper);
        assert_eq!(at(syn::parse_quote!(#[actix_web::routes])), Place::Wrapper);
        assert_eq!(at(syn::parse_quote!(#[trace("/x")])), Place::Wrapper);
        // Tracing attributes that share a name stay on the handler.
        assert_eq!(at(syn::parse_quote!(#[fastrace::trace(properties = {"k": "{v}"})])), Place::Handler);
        assert_eq!(at(syn::parse_quote!(#[fastrace::trace])), Place::Handler);
        assert_eq!(at(syn::parse_quote!(#[trace])), Place::Handler);
        assert_eq!(at(syn::parse_quote!(#[trace(name = "x")])), Place::Handler);
        assert_eq!(at(syn::parse_quote!(#[my_framework::post("/x")])), Place::Handler);
        assert_eq!(at(syn::parse_quote!(#[tracing::instrument])), Place::Handler);
    }

    #[test]
    fn docs_cfg_deprecation_and_lint_levels_go_on_the_wrapper() {
        for attr in [
            syn::parse_quote!(#[doc = "x"]),
            syn::parse_quote!(#[cfg(feature = "x")]),
            syn::parse_quote!(#[deprecated]),
            syn::parse_quote!(#[allow(missing_docs)]),
            syn::parse_quote!(#[expect(dead_code)]),
            syn::parse_quote!(#[warn(clippy::pedantic)]),
            syn::parse_quote!(#[deny(unused)]),
            syn::parse_quote!(#[forbid(unsafe_code)]),
        ] {
            assert_eq!(at(attr), Place::Wrapper);
        }
        assert_eq!(at(syn::parse_quote!(#[inline])), Place::Handler);
    }

    #[test]
    fn openapi_descriptions_run_first() {
        assert_eq!(at(syn::parse_quote!(#[utoipa::path(post, path = "/orders")])), Place::First);
        assert_eq!(at(syn::parse_quote!(#[path = "x.rs"])), Place::Handler);
    }

    #[test]
    fn another_idempotent_is_seen() {
        assert!(is_idempotent(&syn::parse_quote!(#[idempotent])));
        assert!(is_idempotent(&syn::parse_quote!(#[idem_runtime::idempotent(ttl = "1h")])));
        assert!(!is_idempotent(&syn::parse_quote!(#[post("/")])));
    }
}

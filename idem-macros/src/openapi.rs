//! The route's terms, written into its `#[utoipa::path(..)]` as the
//! operation's `x-idempotency` extension: the runtime's OpenAPI modifier
//! (`idem_runtime::openapi::Idempotency`) documents every operation that
//! carries it (its key's header, its replays, its problems), and the terms
//! stay in the document for the clients generated from it.

use proc_macro2::{Delimiter, Group, Literal, TokenStream, TokenTree};
use quote::quote;
use syn::{Attribute, Meta};

use crate::args::{KeySource, OnLapse, Scope};
use crate::validate::{InFlight, Options, human};

/// The name of the extension.
const EXTENSION: &str = "x-idempotency";

/// `attr`, a `#[utoipa::path(..)]`, with the route's terms among its
/// extensions (beside any it has).
pub(crate) fn with_terms(mut attr: Attribute, options: &Options) -> Attribute {
    let Meta::List(list) = &mut attr.meta else { return attr };
    let name = Literal::string(EXTENSION);
    let terms = terms(options);
    let extension = quote!((#name = json!(#terms)));
    let mut tokens: Vec<TokenTree> = list.tokens.clone().into_iter().collect();
    let existing = tokens.windows(2).position(|pair| {
        matches!(pair, [TokenTree::Ident(ident), TokenTree::Group(group)]
            if ident == "extensions" && group.delimiter() == Delimiter::Parenthesis)
    });
    match existing {
        Some(at) => {
            let TokenTree::Group(group) = &tokens[at + 1] else { return attr };
            let mut inner = group.stream();
            if !inner.is_empty() && !ends_with_comma(&inner) {
                inner.extend(quote!(,));
            }
            inner.extend(extension);
            let mut grown = Group::new(Delimiter::Parenthesis, inner);
            grown.set_span(group.span());
            tokens[at + 1] = TokenTree::Group(grown);
        }
        None => {
            let mut stream: TokenStream = tokens.drain(..).collect();
            if !stream.is_empty() && !ends_with_comma(&stream) {
                stream.extend(quote!(,));
            }
            stream.extend(quote!(extensions(#extension)));
            tokens = stream.into_iter().collect();
        }
    }
    list.tokens = tokens.into_iter().collect();
    attr
}

fn ends_with_comma(tokens: &TokenStream) -> bool {
    matches!(tokens.clone().into_iter().last(), Some(TokenTree::Punct(punct)) if punct.as_char() == ',')
}

/// The terms as a JSON object, in `json!` syntax.
fn terms(options: &Options) -> TokenStream {
    let text = |value: &str| Literal::string(value);
    let ttl = text(&human(options.ttl));
    let lock_ttl = text(&human(options.lock_ttl));
    let scope = text(match options.scope {
        Scope::User => "user",
        Scope::Route => "route",
        Scope::Global => "global",
    });
    let key = key_terms(&options.key, &options.header);
    let required = options.required;
    let in_flight = match options.in_flight {
        InFlight::Reject => quote!("reject"),
        InFlight::Wait(wait) => {
            let wait = text(&human(wait));
            quote!({ "wait": #wait })
        }
    };
    let fingerprint_headers = options.fingerprint_headers.iter().map(|name| text(name));
    let fingerprint_exclude = options.fingerprint_exclude.iter().map(|pointer| text(pointer));
    let on_lapse = match options.on_lapse {
        None => quote!(null),
        Some(OnLapse::Takeover) => quote!("takeover"),
        Some(OnLapse::Hold) => quote!("hold"),
    };
    quote!({
        "ttl": #ttl,
        "lock_ttl": #lock_ttl,
        "scope": #scope,
        "key": #key,
        "required": #required,
        "in_flight": #in_flight,
        "fingerprint_headers": [#(#fingerprint_headers),*],
        "fingerprint_exclude": [#(#fingerprint_exclude),*],
        "on_lapse": #on_lapse
    })
}

/// Where the key comes from, as a JSON object in `json!` syntax.
fn key_terms(key: &KeySource, header: &str) -> TokenStream {
    let text = |value: &str| Literal::string(value);
    match key {
        KeySource::Header => {
            let header = text(header);
            quote!({ "source": "header", "header": #header })
        }
        KeySource::Path(name) => {
            let name = text(name);
            quote!({ "source": "path", "parameter": #name })
        }
        KeySource::Json(pointer) => {
            let pointer = text(pointer);
            quote!({ "source": "json", "pointer": #pointer })
        }
        KeySource::Composite(parts) => {
            let parts = parts.iter().map(|part| key_terms(part, header));
            quote!({ "source": "composite", "parts": [#(#parts),*] })
        }
        KeySource::Computed(function) => {
            let name = text(&function.name());
            quote!({ "source": "computed", "function": #name })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Args;

    fn with(args: TokenStream, attr: Attribute) -> String {
        let options = Args::parse(args).and_then(Args::build).unwrap_or_else(|error| panic!("{error}"));
        let attr = with_terms(attr, &options);
        quote!(#attr).to_string()
    }

    #[test]
    fn the_terms_join_the_paths_own_extensions_or_make_them() {
        let made = with(quote!(scope = "route"), syn::parse_quote!(#[utoipa::path(post, path = "/orders")]));
        assert!(made.contains("path = \"/orders\" , extensions ((\"x-idempotency\" = json ! ({"), "{made}");
        assert!(made.contains("\"scope\" : \"route\""), "{made}");
        assert!(made.contains("\"key\" : { \"source\" : \"header\" , \"header\" : \"Idempotency-Key\" }"), "{made}");
        let joined = with(
            quote!(key = "json:/id", in_flight = "wait", wait = "5s"),
            syn::parse_quote!(#[utoipa::path(post, extensions(("x-owner" = json!("payments"))), path = "/e")]),
        );
        assert!(joined.contains("(\"x-owner\" = json ! (\"payments\")) , (\"x-idempotency\""), "{joined}");
        assert!(joined.contains("\"pointer\" : \"/id\""), "{joined}");
        assert!(joined.contains("\"in_flight\" : { \"wait\" : \"5s\" }"), "{joined}");
        let composite = with(
            quote!(key = ["header", "path:order_id"], fingerprint_exclude = ["/attempt"]),
            syn::parse_quote!(#[utoipa::path(post)]),
        );
        assert!(
            composite.contains("\"source\" : \"composite\" , \"parts\" : [{ \"source\" : \"header\""),
            "{composite}"
        );
        assert!(composite.contains("\"fingerprint_exclude\" : [\"/attempt\"]"), "{composite}");
        let computed = with(quote!(key = "fn:keys::invoice"), syn::parse_quote!(#[utoipa::path(post)]));
        assert!(computed.contains("\"function\" : \"keys::invoice\""), "{computed}");
        let bare = with(quote!(), syn::parse_quote!(#[utoipa::path()]));
        assert!(bare.starts_with("# [utoipa :: path (extensions ("), "{bare}");
    }
}

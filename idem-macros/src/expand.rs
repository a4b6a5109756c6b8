//! Code generation: the user's handler, kept whole, inside a wrapper that
//! hands the request to `__private::handle`. Where each attribute goes is
//! `attrs.rs`'s business.

use proc_macro2::{Delimiter, Group, Ident, Literal, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote};
use syn::{Attribute, GenericParam, ItemFn, Visibility};

use crate::args::{KeySource, OnLapse, Scope};
use crate::attrs::{Place, is_lint_level, place};
use crate::framework::Framework;
use crate::validate::{InFlight, Options};

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
///
/// `args` are the attribute's own tokens, to apply it again after the
/// attributes that must run first (see `attrs.rs`).
pub(crate) fn expand(options: &Options, args: &TokenStream, function: ItemFn) -> TokenStream {
    let (outside, mut function) = match split_attributes(options, args, function, Framework::Actix) {
        Ok(split) => split,
        Err(again) => return again,
    };
    let krate = &options.krate;

    let private = quote!(#krate::__private);
    // Names the user can never meet: suffixed with a hash of the handler.
    let tag = hash(&function.to_token_stream().to_string());
    let request = Ident::new(&format!("__idem_req_{tag}"), Span::mixed_site());
    let payload = Ident::new(&format!("__idem_payload_{tag}"), Span::mixed_site());
    let route_options = Ident::new(&format!("__IDEM_OPTIONS_{tag}"), Span::mixed_site());
    let value = route_options_value(options, &private);

    // The wrapper: the user's signature (its spans, so that lints such as
    // `dead_code` report it as the user's item), with actix-web's raw
    // request and payload as its only arguments.
    let vis = std::mem::replace(&mut function.vis, Visibility::Inherited);
    let name = function.sig.ident.clone();
    let mut signature = function.sig.clone();
    signature.inputs = syn::parse_quote!(#request: #private::HttpRequest, #payload: #private::Payload);
    signature.output = syn::parse_quote!(-> #private::HttpResponse);

    // The handler's generic parameters, passed on from the wrapper's.
    let turbofish = generic_arguments(&function);
    // `Self` exists only in an impl block: there the handler cannot be
    // nested in the wrapper (an inner function has no `Self`), so it becomes
    // a hidden associated function beside it.
    let (handler_item, handler_path, sibling) = if mentions_self(&function) {
        let hidden = format_ident!("__idem_handler_{}", name);
        function.sig.ident = hidden.clone();
        // The wrapper's lint levels do not reach a sibling: it gets them too,
        // an `expect` as an `allow` (the wrapper's `expect` is met by it).
        let levels = outside.iter().filter(|attr| is_lint_level(attr)).map(as_allow);
        function.attrs.splice(0..0, levels);
        function.attrs.insert(0, syn::parse_quote!(#[doc(hidden)]));
        (TokenStream::new(), quote!(Self::#hidden #turbofish), function.to_token_stream())
    } else {
        (function.to_token_stream(), quote!(#name #turbofish), TokenStream::new())
    };

    // A handler that actix-web cannot call (an argument that is not an
    // extractor, say) fails the bounds of `handle`: report it on the
    // handler's parameter list rather than on the attribute.
    // Only the call's own tokens take that span: the arguments inside keep
    // theirs (the locals' hygiene, the handler's name).
    let span = signature.paren_token.span.join();
    let arguments = Group::new(Delimiter::Parenthesis, quote!(&#route_options, #request, #payload, #handler_path));
    let call = respan(quote!(#private::handle #arguments .await), span);

    // The body's braces keep the handler's own spans: rustc then counts the
    // wrapper as the user's item for lints such as `dead_code` (an unused
    // handler still warns, and `#[expect(dead_code)]` is met).
    let mut body = Group::new(
        Delimiter::Brace,
        quote! {
            #handler_item
            const #route_options: #private::RouteOptions = #value;
            #call
        },
    );
    body.set_span(function.block.brace_token.span.join());
    quote! {
        #(#outside)*
        // actix-web's request is not `Send`, so neither is the wrapper's
        // future; actix-web does not need it to be.
        #[allow(clippy::future_not_send, reason = "actix-web handlers need not be Send")]
        #vis #signature #body
        #sibling
    }
}

/// The attributes to put on the wrapper, and the function with those that
/// stay on the handler; or, when attributes must run first (see
/// `attrs.rs`), the expansion that applies them, then the attribute again.
pub(crate) fn split_attributes(
    options: &Options,
    args: &TokenStream,
    mut function: ItemFn,
    framework: Framework,
) -> Result<(Vec<Attribute>, ItemFn), TokenStream> {
    let krate = &options.krate;
    let (first, rest): (Vec<Attribute>, Vec<Attribute>) =
        std::mem::take(&mut function.attrs).into_iter().partition(|attr| place(attr) == Place::First);
    if !first.is_empty() {
        function.attrs = rest;
        let attribute = framework.attribute();
        // The operation carries the route's terms, for the runtime's OpenAPI
        // modifier (see `openapi.rs`).
        let first = first.into_iter().map(|attr| crate::openapi::with_terms(attr, options));
        return Err(quote! {
            #(#first)*
            #[#krate::#attribute(#args)]
            #function
        });
    }
    let (outside, inside): (Vec<Attribute>, Vec<Attribute>) =
        rest.into_iter().partition(|attr| place(attr) == Place::Wrapper);
    function.attrs = inside;
    Ok((outside, function))
}

/// `::<T, N>` for a generic handler, nothing otherwise (lifetimes are
/// refused by `validate.rs`).
fn generic_arguments(function: &ItemFn) -> TokenStream {
    let params: Vec<&Ident> = function
        .sig
        .generics
        .params
        .iter()
        .filter_map(|param| match param {
            GenericParam::Type(param) => Some(&param.ident),
            GenericParam::Const(param) => Some(&param.ident),
            GenericParam::Lifetime(_) => None,
        })
        .collect();
    if params.is_empty() { TokenStream::new() } else { quote!(::<#(#params),*>) }
}

/// Whether the function names `Self` anywhere.
pub(crate) fn mentions_self(function: &ItemFn) -> bool {
    /// Items that give `Self` a meaning of their own: what they hold (up to
    /// their braces, or `;`) is not the handler's `Self`.
    const OWN_SELF: [&str; 5] = ["impl", "trait", "struct", "enum", "union"];
    fn any_self(tokens: TokenStream, items: bool) -> bool {
        let mut in_item = false;
        for token in tokens {
            match token {
                TokenTree::Ident(ident) if items && OWN_SELF.iter().any(|item| ident == item) => in_item = true,
                TokenTree::Group(group) if in_item && group.delimiter() == proc_macro2::Delimiter::Brace => {
                    in_item = false;
                }
                TokenTree::Punct(punct) if in_item && punct.as_char() == ';' => in_item = false,
                _ if in_item => {}
                TokenTree::Ident(ident) if ident == "Self" => return true,
                TokenTree::Group(group) if any_self(group.stream(), items) => return true,
                _ => {}
            }
        }
        false
    }
    // The signature holds types only (`-> impl Responder` is not an item).
    any_self(function.sig.to_token_stream(), false) || any_self(function.block.to_token_stream(), true)
}

/// A lint level as an `allow` of the same lints (`expect` would be unmet
/// on the item where the lint did not fire).
pub(crate) fn as_allow(attr: &Attribute) -> Attribute {
    let mut attr = attr.clone();
    if attr.path().is_ident("expect")
        && let syn::Meta::List(list) = &mut attr.meta
    {
        list.path = syn::parse_quote!(allow);
    }
    attr
}

/// A short, stable hash of `text` (FNV-1a), in hex.
pub(crate) fn hash(text: &str) -> String {
    let hash = text
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3));
    format!("{hash:016x}")
}

/// `tokens` with the span of every top-level token (and of every group's
/// delimiters, not its content) set to `span`.
pub(crate) fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            token.set_span(span);
            token
        })
        .collect()
}

/// The `RouteOptions { .. }` literal.
pub(crate) fn route_options_value(options: &Options, private: &TokenStream) -> TokenStream {
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
    let key = key_source(&options.key, private);
    let fingerprint_headers = options.fingerprint_headers.iter().map(|name| Literal::string(name));
    let fingerprint_exclude = options.fingerprint_exclude.iter().map(|pointer| Literal::string(pointer));
    let required = options.required;
    let in_flight = match options.in_flight {
        InFlight::Reject => quote!(#private::InFlight::Reject),
        InFlight::Wait(wait) => {
            let wait = seconds(wait);
            quote!(#private::InFlight::Wait(#wait))
        }
    };
    let on_lapse = match options.on_lapse {
        None => quote!(::core::option::Option::None),
        Some(OnLapse::Takeover) => quote!(::core::option::Option::Some(#private::OnLapse::Takeover)),
        Some(OnLapse::Hold) => quote!(::core::option::Option::Some(#private::OnLapse::Hold)),
    };
    quote! {
        #private::RouteOptions {
            ttl: #ttl,
            lock_ttl: #lock_ttl,
            scope: #private::Scope::#scope,
            key: #key,
            fingerprint_headers: &[#(#fingerprint_headers),*],
            fingerprint_exclude: &[#(#fingerprint_exclude),*],
            header: #header,
            required: #required,
            in_flight: #in_flight,
            on_lapse: #on_lapse,
        }
    }
}

/// The `KeySource` value of a route's key.
fn key_source(key: &KeySource, private: &TokenStream) -> TokenStream {
    let part = |kind: TokenStream, part: &KeySource| match part {
        KeySource::Header => quote!(#private::#kind::Header),
        KeySource::Path(name) => {
            let name = Literal::string(name);
            quote!(#private::#kind::Path(#name))
        }
        KeySource::Json(pointer) => {
            let pointer = Literal::string(pointer);
            quote!(#private::#kind::Json(#pointer))
        }
        KeySource::Composite(_) | KeySource::Computed(_) => unreachable!("not a part"),
    };
    match key {
        KeySource::Composite(parts) => {
            let parts = parts.iter().map(|one| part(quote!(KeyPart), one));
            quote!(#private::KeySource::Composite(&[#(#parts),*]))
        }
        KeySource::Computed(function) => {
            let name = Literal::string(&function.name());
            let path = &function.path;
            // A reference to the function where a `&'static KeyFunction` is
            // expected: a function of another signature is refused here,
            // on the path as written in the attribute.
            let compute = quote::quote_spanned!(function.span=> &#path);
            quote!(#private::KeySource::Computed(#private::ComputedKey { name: #name, compute: #compute }))
        }
        one => part(quote!(KeySource), one),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::args::Args;

    fn expand_str(args: TokenStream, function: TokenStream) -> String {
        expanded_with(expand, args, function)
    }

    /// What `expander` makes of the attribute's `args` on `function`, as
    /// text (the tests of both frameworks' expansions).
    pub(crate) fn expanded_with(
        expander: fn(&Options, &TokenStream, ItemFn) -> TokenStream,
        args: TokenStream,
        function: TokenStream,
    ) -> String {
        let options = match Args::parse(args.clone()).and_then(Args::build) {
            Ok(options) => options,
            Err(error) => panic!("{error}"),
        };
        let function: ItemFn = match syn::parse2(function) {
            Ok(function) => function,
            Err(error) => panic!("{error}"),
        };
        expander(&options, &args, function).to_string()
    }

    #[test]
    fn wraps_the_handler_whole() {
        let out = expand_str(
            quote!(),
            quote! {
                /// Creates an order.
                #[post("/orders")]
                #[allow(clippy::too_many_arguments)]
                #[tracing::instrument]
                pub async fn create_order(body: web::Json<NewOrder>) -> impl Responder { body.0.id }
            },
        );
        let wrapper =
            "# [doc = r\" Creates an order.\"] # [post (\"/orders\")] # [allow (clippy :: too_many_arguments)]";
        assert!(out.starts_with(wrapper), "{out}");
        assert!(out.contains("pub async fn create_order (__idem_req_"), "{out}");
        assert!(out.contains(") -> :: idem_runtime :: __private :: HttpResponse {"), "{out}");
        let inner =
            "# [tracing :: instrument] async fn create_order (body : web :: Json < NewOrder >) -> impl Responder";
        assert!(out.contains(inner), "the handler, whole, inside: {out}");
        assert!(out.contains("scope : :: idem_runtime :: __private :: Scope :: User"), "{out}");
        assert!(out.contains("on_lapse : :: core :: option :: Option :: None"), "the `Idem` default: {out}");
        assert!(out.contains("__idem_payload_"), "{out}");
        assert!(out.ends_with(", create_order) . await } }") || out.contains(", create_order) . await"), "{out}");
    }

    #[test]
    fn generated_names_are_unique_to_the_handler() {
        let a = expand_str(
            quote!(),
            quote!(
                async fn a() {}
            ),
        );
        let b = expand_str(
            quote!(),
            quote!(
                async fn b() {}
            ),
        );
        let name = |out: &str| out.split("__idem_req_").nth(1).unwrap()[..16].to_owned();
        assert_ne!(name(&a), name(&b));
        assert!(!a.contains("__idem_req :") && !a.contains("__idem_req,"), "{a}");
    }

    #[test]
    fn generic_handlers_get_a_generic_wrapper() {
        let out = expand_str(
            quote!(),
            quote!(
                async fn create<R: Repo, const N: usize>(repo: Data<R>) -> String
                where
                    R: Clone,
                {
                    todo!()
                }
            ),
        );
        assert!(out.starts_with("# [allow (clippy :: future_not_send"), "{out}");
        assert!(out.contains("async fn create < R : Repo , const N : usize > (__idem_req_"), "{out}");
        assert!(out.contains("where R : Clone"), "{out}");
        assert!(out.contains(", create :: < R , N >) . await"), "{out}");
    }

    #[test]
    fn a_handler_naming_self_becomes_a_hidden_sibling() {
        let out = expand_str(
            quote!(),
            quote! {
                #[expect(clippy::unused_async)]
                async fn create(state: Data<Self>) -> String { Self::name() }
            },
        );
        assert!(out.contains(", Self :: __idem_handler_create) . await"), "{out}");
        assert!(
            out.contains("# [doc (hidden)] # [allow (clippy :: unused_async)] async fn __idem_handler_create"),
            "{out}"
        );
        assert!(out.starts_with("# [expect (clippy :: unused_async)]"), "{out}");
    }

    #[test]
    fn self_of_a_local_item_is_not_the_handlers() {
        let function: ItemFn = syn::parse2(quote! {
            async fn create() -> impl Responder {
                struct Local(u8);
                impl Local { fn new() -> Self { Self(1) } }
                enum Tree { Leaf, Node(Box<Self>) }
                struct Unit;
                Local::new().0.to_string()
            }
        })
        .unwrap();
        assert!(!mentions_self(&function));
        let function: ItemFn = syn::parse2(quote! {
            async fn create() -> impl Into<String> { struct Local; <Self as Named>::NAME }
        })
        .unwrap();
        assert!(mentions_self(&function), "after the local item, Self is the handler's again");
    }

    #[test]
    fn openapi_paths_run_first_then_the_attribute_again() {
        let out = expand_str(
            quote!(ttl = "1h"),
            quote! {
                #[utoipa::path(post, path = "/orders")]
                #[post("/orders")]
                async fn create(body: Json<NewOrder>) -> String { todo!() }
            },
        );
        let (path, rest) =
            out.split_once("] # [:: idem_runtime :: idempotent (ttl = \"1h\")] ").expect("applied again");
        assert!(
            path.starts_with("# [utoipa :: path (post , path = \"/orders\" , extensions (("),
            "the route's terms: {path}"
        );
        assert_eq!(
            rest,
            quote!(
                #[post("/orders")]
                async fn create(body: Json<NewOrder>) -> String {
                    todo!()
                }
            )
            .to_string()
        );
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
                on_lapse = "hold",
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
            "on_lapse : :: core :: option :: Option :: Some (my_idem :: __private :: OnLapse :: Hold)",
        ] {
            assert!(out.contains(part), "{part} missing from {out}");
        }
        assert!(!out.contains("idem_runtime"), "{out}");
    }
}

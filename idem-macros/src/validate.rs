//! Checks that need more than one argument, the defaults, and the checks on
//! the annotated function itself.

use std::time::Duration;

use proc_macro2::{Ident, TokenStream, TokenTree};
use quote::quote;
use syn::ItemFn;

use crate::args::{Args, Given, InFlightMode, KeySource, OnLapse, Scope};
use crate::errors::combine;
use crate::framework::Framework;

/// Default of `ttl`.
const TTL: Duration = Duration::from_secs(24 * 3_600);
/// Default of `lock_ttl`.
const LOCK_TTL: Duration = Duration::from_secs(30);
/// Default of `wait`.
const WAIT: Duration = Duration::from_secs(10);
/// Default of `header`.
const HEADER: &str = "Idempotency-Key";
/// Default of `scope`: the safe one. Under `"route"` or `"global"` a caller
/// who sends another caller's key and body receives that caller's response;
/// under `"user"` each authenticated subject has its own keys.
const SCOPE: Scope = Scope::User;

/// The checked options of one route, every default applied.
pub(crate) struct Options {
    pub(crate) ttl: Duration,
    pub(crate) lock_ttl: Duration,
    pub(crate) scope: Scope,
    pub(crate) key: KeySource,
    pub(crate) fingerprint_headers: Vec<String>,
    pub(crate) fingerprint_exclude: Vec<String>,
    pub(crate) header: String,
    pub(crate) required: bool,
    pub(crate) in_flight: InFlight,
    /// What a retry does with an execution whose lease lapsed unfinished;
    /// `None` leaves it to the `Idem` default, decided at run time.
    pub(crate) on_lapse: Option<OnLapse>,
    /// Path of the runtime crate (`::idem_runtime` unless `crate = ".."`).
    pub(crate) krate: TokenStream,
}

/// What a concurrent duplicate gets.
pub(crate) enum InFlight {
    Reject,
    Wait(Duration),
}

impl Args {
    /// Applies the defaults and checks the arguments against each other.
    pub(crate) fn build(self) -> syn::Result<Options> {
        let ttl = self.ttl.as_ref().map_or(TTL, |given| given.value);
        let lock_ttl = self.lock_ttl.as_ref().map_or(LOCK_TTL, |given| given.value);
        let mut errors = Vec::new();

        if lock_ttl >= ttl {
            errors.push(self.lock_ttl_error(ttl, lock_ttl));
        }

        let waits = matches!(self.in_flight, Some(Given { value: InFlightMode::Wait, .. }));
        if let (Some(wait), false) = (&self.wait, waits) {
            errors.push(argument_error(
                wait,
                "`wait` only applies with `in_flight = \"wait\"`; add `in_flight = \"wait\"` \
                 or remove `wait`",
            ));
        }

        let key = self.key.as_ref().map_or(KeySource::Header, |given| given.value.clone());
        if let (Some(header), false) = (&self.header, key.uses_header()) {
            errors.push(argument_error(
                header,
                "`header` only applies with `key = \"header\"` (the default) or a composite key with a \
                 \"header\" part; this route reads its key from elsewhere: remove `header`",
            ));
        }

        if let (true, Some(required)) = (key.only_path(), &self.required)
            && !required.value
        {
            errors.push(argument_error(
                required,
                format!(
                    "`required = false` has no effect with `key = {}`: a request that matches the route always \
                     has its path parameters; remove `required`",
                    match &key {
                        KeySource::Path(_) => format!("{:?}", key.written()),
                        _ => key.written(),
                    }
                ),
            ));
        }

        let header = self.header.as_ref().map_or(HEADER, |given| given.value.as_str()).to_ascii_lowercase();
        if let (Some(given), true) = (&self.fingerprint_headers, key.uses_header())
            && given.value.contains(&header)
        {
            errors.push(argument_error(
                given,
                format!(
                    "`fingerprint_headers` names the key's own header \"{header}\": the same key sent quoted \
                     and bare would be two requests (422); the key is part of every lookup already, remove it"
                ),
            ));
        }

        if let Some(error) = combine(errors) {
            return Err(error);
        }
        Ok(Options {
            key,
            fingerprint_headers: self.fingerprint_headers.map(|given| given.value).unwrap_or_default(),
            fingerprint_exclude: self.fingerprint_exclude.map(|given| given.value).unwrap_or_default(),
            ttl,
            lock_ttl,
            scope: self.scope.map_or(SCOPE, |given| given.value),
            header: self.header.map_or_else(|| HEADER.to_owned(), |given| given.value),
            required: self.required.is_none_or(|given| given.value),
            in_flight: if waits {
                InFlight::Wait(self.wait.map_or(WAIT, |given| given.value))
            } else {
                InFlight::Reject
            },
            on_lapse: self.on_lapse.map(|given| given.value),
            krate: match self.krate {
                Some(given) => {
                    let path = given.value;
                    quote!(#path)
                }
                None => runtime_path(),
            },
        })
    }
}

/// The runtime crate as the caller names it in its manifest (a renamed
/// dependency included), else `::idem_runtime`.
fn runtime_path() -> TokenStream {
    match proc_macro_crate::crate_name("idem-runtime") {
        Ok(proc_macro_crate::FoundCrate::Name(name)) if name != "idem_runtime" => {
            let name = Ident::new(&name, proc_macro2::Span::call_site());
            quote!(::#name)
        }
        // Itself (its tests, examples and docs, and the library through
        // `extern crate self as idem_runtime`), or not found.
        _ => quote!(::idem_runtime),
    }
}

impl Args {
    /// The error for `lock_ttl >= ttl`, on `lock_ttl` when it was given, on
    /// `ttl` otherwise.
    fn lock_ttl_error(&self, ttl: Duration, lock_ttl: Duration) -> syn::Error {
        let (ttl, lock_ttl) = (human(ttl), human(lock_ttl));
        match (&self.lock_ttl, &self.ttl) {
            (Some(given), Some(_)) => argument_error(
                given,
                format!(
                    "`lock_ttl` ({lock_ttl}) must be shorter than `ttl` ({ttl}): a response \
                     must be kept longer than one execution may hold the key"
                ),
            ),
            (Some(given), None) => argument_error(
                given,
                format!(
                    "`lock_ttl` ({lock_ttl}) must be shorter than `ttl` ({ttl}, the default); \
                     give a longer `ttl` or a shorter `lock_ttl`"
                ),
            ),
            (None, Some(given)) => argument_error(
                given,
                format!(
                    "`ttl` ({ttl}) must be longer than `lock_ttl` ({lock_ttl}, the default); \
                     give a longer `ttl` or a shorter `lock_ttl`"
                ),
            ),
            (None, None) => unreachable!("the default `lock_ttl` is below the default `ttl`"),
        }
    }
}

/// Checks that the annotated function can be an actix-web handler.
pub(crate) fn handler(function: &ItemFn, framework: Framework) -> syn::Result<()> {
    let sig = &function.sig;
    let mut errors = Vec::new();
    if sig.asyncness.is_none() {
        errors.push(syn::Error::new_spanned(
            sig.fn_token,
            "`#[idempotent]` needs an `async fn`: add `async` before `fn`",
        ));
    }
    if let Some(unsafety) = sig.unsafety {
        errors.push(syn::Error::new_spanned(unsafety, format!("an `unsafe fn` cannot be {}", framework.handler())));
    }
    if let Some(receiver) = sig.receiver() {
        errors.push(syn::Error::new_spanned(
            receiver,
            format!(
                "`#[idempotent]` handlers cannot take `self`: {} is a free function; reach shared state \
                 through an extractor such as {}",
                framework.handler(),
                framework.state()
            ),
        ));
    }
    for param in &sig.generics.params {
        if let syn::GenericParam::Lifetime(lifetime) = param {
            errors.push(syn::Error::new_spanned(
                lifetime,
                format!(
                    "{} cannot have lifetime parameters: its extractors own what they hold ({}); remove the \
                     lifetime",
                    capitalized(framework.handler()),
                    framework.owning()
                ),
            ));
        }
    }
    for input in &sig.inputs {
        if let syn::FnArg::Typed(typed) = input
            && matches!(*typed.ty, syn::Type::ImplTrait(_))
        {
            let message = match framework {
                Framework::Actix => {
                    "an `impl Trait` argument cannot be named when the handler is registered; use a \
                     type parameter (`async fn create<R: Repo>(repo: web::Data<R>)`) and register \
                     `create::<MyRepo>`"
                }
                Framework::Axum => {
                    "an `impl Trait` argument cannot be named when the handler is registered; name the \
                     argument's type (`State<PgRepo>`)"
                }
            };
            errors.push(syn::Error::new_spanned(&typed.ty, message));
        }
    }
    if framework == Framework::Axum {
        errors.extend(axum_only(function));
    }
    for attr in function.attrs.iter().filter(|attr| crate::attrs::is_idempotent(attr)) {
        errors.push(syn::Error::new_spanned(
            attr,
            "`#[idempotent]` is applied twice to this handler (here and above); every request would \
             claim its key twice and get 409 from itself: keep one",
        ));
    }
    match combine(errors) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// What axum handlers may not be under the attribute, which makes each one
/// a type of its own: generic (a type has no turbofish to register it
/// with), or in an `impl` block (no type may be declared there).
fn axum_only(function: &ItemFn) -> Vec<syn::Error> {
    let mut errors = Vec::new();
    if let Some(param) =
        function.sig.generics.params.iter().find(|param| !matches!(param, syn::GenericParam::Lifetime(_)))
    {
        errors.push(syn::Error::new_spanned(
            param,
            "an `#[idempotent]` axum handler cannot be generic: the attribute makes it a type of its own, \
             registered as it is (`post(create_order)`); write the handler for the concrete types and call a \
             generic function from it",
        ));
    }
    if crate::expand::mentions_self(function) {
        errors.push(syn::Error::new_spanned(
            &function.sig.ident,
            "an `#[idempotent]` axum handler cannot name `Self`: the attribute makes it a type of its own, \
             which an `impl` block cannot hold; move the handler out of the `impl` block and name the type",
        ));
    }
    errors
}

/// `text` with its first letter in upper case.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|first| first.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// An error spanning a whole argument, from its name to its value.
fn argument_error<T>(given: &Given<T>, message: impl std::fmt::Display) -> syn::Error {
    // `Span::join` is not stable; `new_spanned` spans from the first token of
    // what it is given to the last one, so two placeholder tokens carrying
    // the two spans do it.
    let tokens: TokenStream =
        [TokenTree::Ident(Ident::new("name", given.name)), TokenTree::Ident(Ident::new("value", given.span))]
            .into_iter()
            .collect();
    syn::Error::new_spanned(tokens, message)
}

/// `5400s` as `1h30m`, in the attribute's own notation.
pub(crate) fn human(duration: Duration) -> String {
    let mut seconds = duration.as_secs();
    let mut text = String::new();
    for (unit, size) in [('d', 86_400), ('h', 3_600), ('m', 60), ('s', 1)] {
        if seconds >= size {
            text.push_str(&format!("{}{unit}", seconds / size));
            seconds %= size;
        }
    }
    if text.is_empty() {
        text.push_str("0s");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(tokens: TokenStream) -> syn::Result<Options> {
        Args::parse(tokens).and_then(Args::build)
    }

    fn message(result: syn::Result<Options>) -> String {
        match result {
            Ok(_) => panic!("expected an error"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn applies_the_defaults() {
        let Ok(options) = build(quote!()) else { panic!("defaults must build") };
        assert_eq!(options.ttl, Duration::from_secs(86_400));
        assert_eq!(options.lock_ttl, Duration::from_secs(30));
        assert_eq!(options.scope, Scope::User, "the safe scope is the default");
        assert_eq!(options.header, "Idempotency-Key");
        assert_eq!(options.key, KeySource::Header);
        assert!(options.fingerprint_headers.is_empty());
        assert!(options.required);
        assert!(matches!(options.in_flight, InFlight::Reject));
        assert_eq!(options.on_lapse, None, "the `Idem` default decides");
        assert_eq!(options.krate.to_string(), ":: idem_runtime");
    }

    #[test]
    fn wait_mode_takes_its_wait() {
        let Ok(options) = build(quote!(in_flight = "wait")) else { panic!("must build") };
        assert!(matches!(options.in_flight, InFlight::Wait(wait) if wait == Duration::from_secs(10)));
        let Ok(options) = build(quote!(in_flight = "wait", wait = "1m")) else { panic!("must build") };
        assert!(matches!(options.in_flight, InFlight::Wait(wait) if wait == Duration::from_secs(60)));
    }

    #[test]
    fn an_explicit_lapse_policy_is_kept() {
        let Ok(options) = build(quote!(on_lapse = "hold")) else { panic!("must build") };
        assert_eq!(options.on_lapse, Some(OnLapse::Hold));
        let Ok(options) = build(quote!(on_lapse = "takeover")) else { panic!("must build") };
        assert_eq!(options.on_lapse, Some(OnLapse::Takeover), "given, even when it is the usual default");
    }

    #[test]
    fn lock_ttl_must_be_below_ttl() {
        let text = message(build(quote!(ttl = "1m", lock_ttl = "1m")));
        assert!(text.starts_with("`lock_ttl` (1m) must be shorter than `ttl` (1m)"), "{text}");
        let text = message(build(quote!(ttl = "20s")));
        assert!(text.starts_with("`ttl` (20s) must be longer than `lock_ttl` (30s, the default)"), "{text}");
        let text = message(build(quote!(lock_ttl = "2d")));
        assert!(text.contains("`ttl` (1d, the default)"), "{text}");
    }

    #[test]
    fn pointless_or_harmful_combinations_are_refused() {
        let text = message(build(quote!(key = "path:id", required = false)));
        assert!(text.starts_with("`required = false` has no effect with `key = \"path:id\"`"), "{text}");
        assert!(build(quote!(key = "json:/id", required = false)).is_ok());
        let text = message(build(quote!(key = ["path:a", "path:b"], required = false)));
        assert!(text.starts_with("`required = false` has no effect with `key = [\"path:a\", \"path:b\"]`"), "{text}");
        assert!(build(quote!(key = ["path:a", "json:/b"], required = false)).is_ok());
        assert!(build(quote!(key = ["header", "path:a"], fingerprint_headers = ["idempotency-key"])).is_err());
        assert!(build(quote!(key = ["header", "path:a"], header = "X-Key")).is_ok());
        assert!(build(quote!(key = "fn:keys::f", header = "X-Key")).is_err());
        let text = message(build(quote!(fingerprint_headers = ["Idempotency-Key"])));
        assert!(text.contains("names the key's own header \"idempotency-key\""), "{text}");
        assert!(build(quote!(header = "X-Key", fingerprint_headers = ["x-key"])).is_err());
        assert!(build(quote!(key = "json:/id", fingerprint_headers = ["idempotency-key"])).is_ok());
    }

    #[test]
    fn header_needs_a_header_key() {
        let text = message(build(quote!(key = "json:/id", header = "X-Key")));
        assert!(text.starts_with("`header` only applies with `key = \"header\"`"), "{text}");
        assert!(build(quote!(key = "header", header = "X-Key")).is_ok());
    }

    #[test]
    fn wait_needs_wait_mode() {
        let text = message(build(quote!(wait = "5s")));
        assert!(text.starts_with("`wait` only applies with `in_flight = \"wait\"`"), "{text}");
        assert!(build(quote!(in_flight = "reject", wait = "5s")).is_err());
    }

    #[test]
    fn checks_the_function() {
        let ok: ItemFn = syn::parse_quote!(
            async fn f(body: String) -> String {
                body
            }
        );
        assert!(handler(&ok, Framework::Actix).is_ok());
        assert!(handler(&ok, Framework::Axum).is_ok());
        let generic: ItemFn = syn::parse_quote!(
            async fn f<R: Repo, const N: usize>(repo: Data<R>) -> String
            where
                R: Clone,
            {
                todo!()
            }
        );
        assert!(handler(&generic, Framework::Actix).is_ok(), "type and const parameters are supported");
        let Err(error) = handler(&generic, Framework::Axum) else { panic!("a generic axum handler") };
        assert!(error.to_string().contains("cannot be generic"), "{error}");
        let bad: ItemFn = syn::parse_quote!(
            #[idempotent]
            unsafe fn f<'a>(&self, repo: impl Repo) {}
        );
        let Err(error) = handler(&bad, Framework::Actix) else { panic!("expected errors") };
        let messages: Vec<String> = error.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages.len(), 6, "{messages:?}");
        assert!(messages.iter().any(|m| m.contains("lifetime parameters")), "{messages:?}");
        assert!(messages.iter().any(|m| m.contains("applied twice")), "{messages:?}");
        let Err(error) = handler(&bad, Framework::Axum) else { panic!("expected errors") };
        let messages: Vec<String> = error.into_iter().map(|e| e.to_string()).collect();
        assert!(messages.iter().any(|m| m.contains("An axum handler cannot have lifetime")), "{messages:?}");
        assert!(messages.iter().any(|m| m.contains("`State<T>`")), "{messages:?}");
        let in_impl: ItemFn = syn::parse_quote!(
            async fn f(state: State<Self>) -> String {
                todo!()
            }
        );
        let Err(error) = handler(&in_impl, Framework::Axum) else { panic!("a handler naming Self") };
        assert!(error.to_string().contains("cannot name `Self`"), "{error}");
    }

    #[test]
    fn human_durations() {
        assert_eq!(human(Duration::from_secs(5_400)), "1h30m");
        assert_eq!(human(Duration::from_secs(93_784)), "1d2h3m4s");
        assert_eq!(human(Duration::from_secs(30)), "30s");
    }
}

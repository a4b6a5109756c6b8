//! Parsing of the `#[idempotent(...)]` arguments.
//!
//! One setter per argument: it refuses a second occurrence, checks the
//! literal's kind (string or bool) and parses the value (duration grammar,
//! scope name, mode name, header name, crate path), each error spanned on the
//! offending token. Checks that involve two arguments live in
//! `Args::build` (in `validate.rs`).
//!
//! This file holds the arguments as written ([`Args`]) and the parse that
//! hands each one to its setter. The setters live with what they read:
//!
//! - `arg.rs`: one argument as written (`name = value`), and the readers
//!   every setter shares (its value, a refused duplicate, a string literal);
//! - `unknown.rs`: the error for a name that is not an argument;
//! - `durations.rs`: `ttl`, `lock_ttl` and `wait`;
//! - `scope.rs`: `scope`;
//! - `key.rs`: `key`, where the key comes from;
//! - `exclude.rs`: `fingerprint_exclude`, and the check of JSON pointers;
//! - `headers.rs`: `header` and `fingerprint_headers`, the header names;
//! - `required.rs`: `required`;
//! - `in_flight.rs`: `in_flight`;
//! - `on_lapse.rs`: `on_lapse`;
//! - `crate_path.rs`: `crate`, the path of the runtime crate.

mod arg;
mod crate_path;
mod durations;
mod exclude;
mod headers;
mod in_flight;
mod key;
mod on_lapse;
mod required;
mod scope;
mod unknown;

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use syn::parse::Parser;

use self::arg::Arg;
pub(crate) use self::in_flight::InFlightMode;
pub(crate) use self::key::KeySource;
pub(crate) use self::on_lapse::OnLapse;
pub(crate) use self::scope::Scope;
use self::unknown::unknown_argument;
use crate::errors::combine;

/// Every argument, in the order the docs list them.
const NAMES: [&str; 12] = [
    "ttl",
    "scope",
    "key",
    "fingerprint_headers",
    "fingerprint_exclude",
    "lock_ttl",
    "header",
    "required",
    "in_flight",
    "wait",
    "on_lapse",
    "crate",
];

/// A value given in the attribute, with the spans of its name and literal.
pub(crate) struct Given<T> {
    pub(crate) value: T,
    /// The argument's name (`ttl` in `ttl = "24h"`).
    pub(crate) name: Span,
    /// The argument's value (`"24h"`).
    pub(crate) span: Span,
}

/// The arguments as written, each one optional until `Args::build` (in `validate.rs`)
/// applies the defaults.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) ttl: Option<Given<Duration>>,
    pub(crate) scope: Option<Given<Scope>>,
    pub(crate) key: Option<Given<KeySource>>,
    pub(crate) fingerprint_headers: Option<Given<Vec<String>>>,
    pub(crate) fingerprint_exclude: Option<Given<Vec<String>>>,
    pub(crate) lock_ttl: Option<Given<Duration>>,
    pub(crate) header: Option<Given<String>>,
    pub(crate) required: Option<Given<bool>>,
    pub(crate) in_flight: Option<Given<InFlightMode>>,
    pub(crate) wait: Option<Given<Duration>>,
    pub(crate) on_lapse: Option<Given<OnLapse>>,
    pub(crate) krate: Option<Given<syn::Path>>,
}

impl Args {
    /// Parses the tokens between the attribute's parentheses.
    ///
    /// Every wrong argument is reported, each on its own token; a syntax
    /// error (`ttl = ,`) ends the parse.
    pub(crate) fn parse(tokens: TokenStream) -> syn::Result<Self> {
        let mut args = Args::default();
        let mut errors = Vec::new();
        let parser = syn::meta::parser(|meta| {
            let arg = Arg::read(&meta)?;
            if let Err(error) = args.set(&arg) {
                errors.push(error);
            }
            Ok(())
        });
        if let Err(error) = parser.parse2(tokens) {
            errors.push(error);
        }
        match combine(errors) {
            Some(error) => Err(error),
            None => Ok(args),
        }
    }

    /// Hands one argument to its setter.
    fn set(&mut self, arg: &Arg) -> syn::Result<()> {
        let name = arg.path.get_ident().map(ToString::to_string);
        match name.as_deref() {
            Some("ttl") => self.set_ttl(arg),
            Some("scope") => self.set_scope(arg),
            Some("key") => self.set_key(arg),
            Some("fingerprint_headers") => self.set_fingerprint_headers(arg),
            Some("fingerprint_exclude") => self.set_fingerprint_exclude(arg),
            Some("lock_ttl") => self.set_lock_ttl(arg),
            Some("header") => self.set_header(arg),
            Some("required") => self.set_required(arg),
            Some("in_flight") => self.set_in_flight(arg),
            Some("wait") => self.set_wait(arg),
            Some("on_lapse") => self.set_on_lapse(arg),
            Some("crate") => self.set_crate(arg),
            _ => {
                let path = &arg.path;
                let name = quote::quote!(#path).to_string().replace(' ', "");
                Err(syn::Error::new_spanned(path, unknown_argument(&name)))
            }
        }
    }
}
#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    fn parse(tokens: TokenStream) -> Args {
        match Args::parse(tokens) {
            Ok(args) => args,
            Err(error) => panic!("unexpected error: {error}"),
        }
    }

    fn error(tokens: TokenStream) -> String {
        match Args::parse(tokens) {
            Ok(_) => panic!("expected an error"),
            Err(error) => error.into_iter().map(|error| error.to_string()).collect::<Vec<_>>().join("\n"),
        }
    }

    #[test]
    fn values_inside_invisible_groups_are_read() {
        // What `macro_rules!` passes for `$s:literal` / `$e:expr`.
        let group = |tokens: TokenStream| {
            proc_macro2::TokenTree::Group(proc_macro2::Group::new(proc_macro2::Delimiter::None, tokens))
        };
        let (scope, required, ttl) = (group(quote!("route")), group(quote!(false)), group(quote!("1h")));
        let args = parse(quote!(scope = #scope, required = #required, ttl = #ttl));
        assert_eq!(args.scope.map(|given| given.value), Some(Scope::Route));
        assert_eq!(args.required.map(|given| given.value), Some(false));
        assert_eq!(args.ttl.map(|given| given.value), Some(Duration::from_secs(3_600)));
    }

    #[test]
    fn empty_arguments_leave_every_default() {
        let args = parse(quote!());
        assert!(args.ttl.is_none() && args.scope.is_none() && args.krate.is_none());
    }

    #[test]
    fn reads_every_argument() {
        let args = parse(quote!(
            ttl = "1h30m",
            scope = "user",
            lock_ttl = "45s",
            header = "X-Request-Key",
            required = false,
            in_flight = "wait",
            wait = "5s",
            on_lapse = "hold",
            crate = "::my_app::idem",
        ));
        assert_eq!(args.ttl.map(|g| g.value), Some(Duration::from_secs(5_400)));
        assert_eq!(args.scope.map(|g| g.value), Some(Scope::User));
        assert_eq!(args.lock_ttl.map(|g| g.value), Some(Duration::from_secs(45)));
        assert_eq!(args.header.map(|g| g.value).as_deref(), Some("X-Request-Key"));
        assert_eq!(args.required.map(|g| g.value), Some(false));
        assert_eq!(args.in_flight.map(|g| g.value), Some(InFlightMode::Wait));
        assert_eq!(args.wait.map(|g| g.value), Some(Duration::from_secs(5)));
        assert_eq!(args.on_lapse.map(|g| g.value), Some(OnLapse::Hold));
        let path = args.krate.map(|g| g.value);
        assert_eq!(quote!(#path).to_string(), ":: my_app :: idem");
    }

    #[test]
    fn unknown_argument_lists_the_allowed_ones() {
        let allowed = "`ttl`, `scope`, `key`, `fingerprint_headers`, `fingerprint_exclude`, `lock_ttl`, `header`, \
                       `required`, `in_flight`, `wait`, `on_lapse`, `crate`";
        assert_eq!(
            error(quote!(tll = "24h")),
            format!("unknown argument `tll`; expected one of {allowed} (did you mean `ttl`?)")
        );
        assert_eq!(error(quote!(expiry = "24h")), format!("unknown argument `expiry`; expected one of {allowed}"));
        assert!(error(quote!(inflight = "wait")).ends_with("(did you mean `in_flight`?)"));
        assert!(error(quote!(Lock_TTL = "1m")).ends_with("(did you mean `lock_ttl`?)"));
        assert!(error(quote!(on_lapses = "hold")).ends_with("(did you mean `on_lapse`?)"));
    }

    #[test]
    fn reads_key_sources_and_fingerprint_headers() {
        let args = parse(quote!(key = "json:/data/object/id", fingerprint_headers = ["X-Account-Id", "x-tenant"]));
        assert_eq!(args.key.map(|g| g.value), Some(KeySource::Json("/data/object/id".into())));
        assert_eq!(args.fingerprint_headers.map(|g| g.value), Some(vec!["x-account-id".into(), "x-tenant".into()]));
        assert_eq!(parse(quote!(key = "path:order_id")).key.map(|g| g.value), Some(KeySource::Path("order_id".into())));
        assert_eq!(parse(quote!(key = "header")).key.map(|g| g.value), Some(KeySource::Header));
        assert_eq!(
            parse(quote!(key = "json:/a~1b/~0c")).key.map(|g| g.value),
            Some(KeySource::Json("/a~1b/~0c".into()))
        );
        assert!(error(quote!(key = "json:id")).contains("a JSON pointer starts with `/`"));
        assert!(error(quote!(key = "json:/a~2")).contains("`~` must be followed by `0`"));
        assert!(error(quote!(key = "path:")).contains("name is missing"));
        assert!(error(quote!(key = "path:{id}")).contains("'{' cannot be part"));
        assert!(error(quote!(key = "query:id")).contains("unknown key source"));
        assert!(error(quote!(fingerprint_headers = "x-a")).contains("expects a list of header names"));
        assert!(error(quote!(fingerprint_headers = ["x a"])).contains("invalid header name"));
        assert!(error(quote!(fingerprint_headers = ["X-A", "x-a"])).contains("twice"));
    }

    #[test]
    fn reads_composite_and_computed_keys() {
        let parts = parse(quote!(key = ["path:order_id", "json:/line_id", "header"])).key.map(|g| g.value);
        let expected = [KeySource::Path("order_id".into()), KeySource::Json("/line_id".into()), KeySource::Header];
        assert_eq!(parts, Some(KeySource::Composite(expected.to_vec())));
        let Some(KeySource::Computed(function)) = parse(quote!(key = "fn:crate::keys::invoice")).key.map(|g| g.value)
        else {
            panic!("a key function")
        };
        assert_eq!(function.name(), "crate::keys::invoice");
        assert!(error(quote!(key = ["path:id"])).contains("write `key = \"path:id\"`"));
        assert!(error(quote!(key = [])).contains("two parts or more"));
        assert!(error(quote!(key = ["path:id", "path:id"])).contains("given twice"));
        assert!(error(quote!(key = ["path:id", "fn:f"])).contains("cannot be a part"));
        assert!(error(quote!(key = ["path:id", "query:q"])).contains("invalid key part \"query:q\""));
        assert!(error(quote!(key = ["path:id", 1])).contains("expects a string literal"));
        assert!(error(quote!(key = "fn:")).contains("path is missing"));
        assert!(error(quote!(key = "fn:not a path")).contains("is not a path to a function"));
    }

    #[test]
    fn reads_fingerprint_exclusions() {
        let excluded = parse(quote!(fingerprint_exclude = ["/attempt", "/meta/sent_at", "/a~1b"]));
        assert_eq!(
            excluded.fingerprint_exclude.map(|g| g.value),
            Some(vec!["/attempt".into(), "/meta/sent_at".into(), "/a~1b".into()])
        );
        assert!(error(quote!(fingerprint_exclude = "/attempt")).contains("expects a list of JSON pointers"));
        assert!(error(quote!(fingerprint_exclude = [""])).contains("the whole body"));
        assert!(error(quote!(fingerprint_exclude = ["attempt"])).contains("starts with `/`"));
        assert!(error(quote!(fingerprint_exclude = ["/a~2"])).contains("`~` must be followed"));
        assert!(error(quote!(fingerprint_exclude = ["/a", "/a"])).contains("given twice"));
        assert!(error(quote!(fingerprint_exclude = ["/meta", "/meta/at"])).contains("inside \"/meta\""));
        assert!(error(quote!(fingerprint_exclude = ["/meta/at", "/meta"])).contains("holds \"/meta/at\""));
        let many: Vec<String> = (0..65).map(|i| format!("/k{i}")).collect();
        assert!(error(quote!(fingerprint_exclude = [#(#many),*])).contains("at most 64"));
    }

    #[test]
    fn reads_lapse_policies() {
        assert_eq!(parse(quote!(on_lapse = "takeover")).on_lapse.map(|g| g.value), Some(OnLapse::Takeover));
        assert_eq!(parse(quote!(on_lapse = "hold")).on_lapse.map(|g| g.value), Some(OnLapse::Hold));
        assert_eq!(
            error(quote!(on_lapse = "retry")),
            "unknown `on_lapse` policy \"retry\"; expected \"takeover\" or \"hold\""
        );
        assert!(error(quote!(on_lapse = "Hold")).starts_with("unknown `on_lapse` policy \"Hold\""));
    }

    #[test]
    fn reports_every_bad_value_at_once() {
        let message = error(quote!(ttl = "5w", scope = "users", header = "Idempotency Key"));
        assert!(message.contains("unknown duration unit `w`"), "{message}");
        assert!(message.contains("unknown scope \"users\""), "{message}");
        assert!(message.contains("' ' is not allowed"), "{message}");
    }

    #[test]
    fn refuses_duplicates_and_missing_values() {
        assert!(error(quote!(ttl = "1h", ttl = "2h")).starts_with("duplicate argument `ttl`"));
        assert_eq!(
            error(quote!(on_lapse = "hold", on_lapse = "hold")),
            "duplicate argument `on_lapse`; each argument may be given once"
        );
        assert_eq!(error(quote!(on_lapse)), "`on_lapse` needs a value, for example `on_lapse = \"hold\"`");
        assert_eq!(error(quote!(ttl)), "`ttl` needs a value, for example `ttl = \"24h\"`");
    }

    #[test]
    fn keeps_value_errors_when_the_syntax_breaks_later() {
        let message = error(quote!(scope = "users", ttl = ,));
        assert!(message.starts_with("unknown scope \"users\""), "{message}");
        assert!(message.lines().count() == 2, "{message}");
        assert_eq!(error(quote!(ttl("24h"))), "`ttl` needs a value, for example `ttl = \"24h\"`");
        assert!(error(quote!(idem::ttl = "24h")).starts_with("unknown argument `idem::ttl`"));
    }

    #[test]
    fn refuses_wrong_literal_kinds() {
        assert_eq!(error(quote!(ttl = 24)), "`ttl` expects a string literal, for example `ttl = \"24h\"`");
        assert!(error(quote!(required = "false")).contains("without quotes"));
        assert!(error(quote!(required = 1)).starts_with("`required` expects a bool literal"));
        assert!(error(quote!(crate = "not a path")).starts_with("`crate` expects a path"));
        assert_eq!(
            error(quote!(on_lapse = hold)),
            "`on_lapse` expects a string literal, for example `on_lapse = \"hold\"`"
        );
    }
}

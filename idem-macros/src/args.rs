//! Parsing of the `#[idempotent(...)]` arguments.
//!
//! One setter per argument: it refuses a second occurrence, checks the
//! literal's kind (string or bool) and parses the value (duration grammar,
//! scope name, mode name, header name, crate path), each error spanned on the
//! offending token. Checks that involve two arguments live in
//! `Args::build` (in `validate.rs`).

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Lit, LitBool, LitStr, Token};

use crate::duration::{hint, parse_duration};
use crate::errors::combine;

/// Every argument, in the order the docs list them.
const NAMES: [&str; 10] =
    ["ttl", "scope", "key", "fingerprint_headers", "lock_ttl", "header", "required", "in_flight", "wait", "crate"];

/// A value given in the attribute, with the spans of its name and literal.
pub(crate) struct Given<T> {
    pub(crate) value: T,
    /// The argument's name (`ttl` in `ttl = "24h"`).
    pub(crate) name: Span,
    /// The argument's value (`"24h"`).
    pub(crate) span: Span,
}

/// Namespace of the key (`scope = "..."`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    User,
    Route,
    Global,
}

/// Where the key comes from (`key = "..."`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KeySource {
    /// The `header` argument's header.
    Header,
    /// A path parameter, by name.
    Path(String),
    /// An RFC 6901 JSON pointer into the body.
    Json(String),
}

/// What a concurrent duplicate gets (`in_flight = "..."`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InFlightMode {
    Reject,
    Wait,
}

/// The arguments as written, each one optional until `Args::build` (in `validate.rs`)
/// applies the defaults.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) ttl: Option<Given<Duration>>,
    pub(crate) scope: Option<Given<Scope>>,
    pub(crate) key: Option<Given<KeySource>>,
    pub(crate) fingerprint_headers: Option<Given<Vec<String>>>,
    pub(crate) lock_ttl: Option<Given<Duration>>,
    pub(crate) header: Option<Given<String>>,
    pub(crate) required: Option<Given<bool>>,
    pub(crate) in_flight: Option<Given<InFlightMode>>,
    pub(crate) wait: Option<Given<Duration>>,
    pub(crate) krate: Option<Given<syn::Path>>,
}

/// One `name = value` pair as written; `value` is `None` when the name
/// stands alone (`ttl`) or takes parentheses (`ttl("24h")`).
struct Arg {
    path: syn::Path,
    value: Option<Expr>,
}

impl Arg {
    /// Reads one argument; only a syntax error (a value that is not an
    /// expression) fails here.
    fn read(meta: &ParseNestedMeta<'_>) -> syn::Result<Self> {
        let value = if meta.input.peek(Token![=]) {
            Some(meta.value()?.parse::<Expr>()?)
        } else {
            if meta.input.peek(syn::token::Paren) {
                meta.input.parse::<proc_macro2::Group>()?;
            }
            None
        };
        Ok(Arg { path: meta.path.clone(), value })
    }

    /// The value, or an error on the name when it has none.
    fn value(&self, name: &str, example: &str) -> syn::Result<&Expr> {
        self.value.as_ref().ok_or_else(|| {
            syn::Error::new_spanned(&self.path, format!("`{name}` needs a value, for example `{name} = {example}`"))
        })
    }

    /// Refuses the second occurrence of an argument, on its name.
    fn once<T>(&self, slot: &Option<T>, name: &str) -> syn::Result<()> {
        match slot {
            Some(_) => Err(syn::Error::new_spanned(
                &self.path,
                format!("duplicate argument `{name}`; each argument may be given once"),
            )),
            None => Ok(()),
        }
    }

    fn given<T>(&self, value: T, span: Span) -> Given<T> {
        Given { value, name: self.path.span(), span }
    }
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
            Some("lock_ttl") => self.set_lock_ttl(arg),
            Some("header") => self.set_header(arg),
            Some("required") => self.set_required(arg),
            Some("in_flight") => self.set_in_flight(arg),
            Some("wait") => self.set_wait(arg),
            Some("crate") => self.set_crate(arg),
            _ => {
                let path = &arg.path;
                let name = quote::quote!(#path).to_string().replace(' ', "");
                Err(syn::Error::new_spanned(path, unknown_argument(&name)))
            }
        }
    }

    fn set_ttl(&mut self, arg: &Arg) -> syn::Result<()> {
        let value = arg.value("ttl", "\"24h\"")?;
        arg.once(&self.ttl, "ttl")?;
        self.ttl = Some(duration(arg, value, "ttl", "\"24h\"")?);
        Ok(())
    }

    fn set_scope(&mut self, arg: &Arg) -> syn::Result<()> {
        let value = arg.value("scope", "\"user\"")?;
        arg.once(&self.scope, "scope")?;
        let lit = string(value, "scope", "\"user\"")?;
        let scope = match lit.value().as_str() {
            "user" => Scope::User,
            "route" => Scope::Route,
            "global" => Scope::Global,
            other => {
                return Err(syn::Error::new(
                    lit.span(),
                    format!("unknown scope \"{other}\"; expected \"user\", \"route\" or \"global\""),
                ));
            }
        };
        self.scope = Some(arg.given(scope, lit.span()));
        Ok(())
    }

    fn set_key(&mut self, arg: &Arg) -> syn::Result<()> {
        let value = arg.value("key", "\"json:/id\"")?;
        arg.once(&self.key, "key")?;
        let lit = string(value, "key", "\"json:/id\"")?;
        let text = lit.value();
        let source = key_source(&text).map_err(|problem| {
            syn::Error::new(
                lit.span(),
                format!(
                    "invalid `key` \"{}\": {problem}; expected \"header\", \"path:NAME\" (a path parameter) \
                     or \"json:/POINTER\" (an RFC 6901 pointer into the body, such as \"json:/id\")",
                    text.escape_debug()
                ),
            )
        })?;
        self.key = Some(arg.given(source, lit.span()));
        Ok(())
    }

    fn set_fingerprint_headers(&mut self, arg: &Arg) -> syn::Result<()> {
        const EXAMPLE: &str = "[\"x-account-id\"]";
        let value = arg.value("fingerprint_headers", EXAMPLE)?;
        arg.once(&self.fingerprint_headers, "fingerprint_headers")?;
        let Expr::Array(array) = ungrouped(value) else {
            return Err(syn::Error::new_spanned(
                value,
                format!(
                    "`fingerprint_headers` expects a list of header names, for example `fingerprint_headers = {EXAMPLE}`"
                ),
            ));
        };
        let mut names: Vec<String> = Vec::new();
        let mut errors = Vec::new();
        for element in &array.elems {
            let lit = match string(element, "fingerprint_headers", EXAMPLE) {
                Ok(lit) => lit,
                Err(error) => {
                    errors.push(error);
                    continue;
                }
            };
            let name = lit.value().to_ascii_lowercase();
            if let Some(problem) = header_name_problem(&name) {
                errors.push(syn::Error::new(
                    lit.span(),
                    format!(
                        "invalid header name \"{}\" in `fingerprint_headers`: {problem}",
                        lit.value().escape_debug()
                    ),
                ));
            } else if names.contains(&name) {
                errors.push(syn::Error::new(
                    lit.span(),
                    format!("`fingerprint_headers` names \"{name}\" twice (header names ignore case); keep one"),
                ));
            } else {
                names.push(name);
            }
        }
        if let Some(error) = combine(errors) {
            return Err(error);
        }
        self.fingerprint_headers = Some(arg.given(names, array.bracket_token.span.join()));
        Ok(())
    }

    fn set_lock_ttl(&mut self, arg: &Arg) -> syn::Result<()> {
        let value = arg.value("lock_ttl", "\"30s\"")?;
        arg.once(&self.lock_ttl, "lock_ttl")?;
        self.lock_ttl = Some(duration(arg, value, "lock_ttl", "\"30s\"")?);
        Ok(())
    }

    fn set_header(&mut self, arg: &Arg) -> syn::Result<()> {
        let value = arg.value("header", "\"Idempotency-Key\"")?;
        arg.once(&self.header, "header")?;
        let lit = string(value, "header", "\"Idempotency-Key\"")?;
        let name = lit.value();
        if let Some(problem) = header_name_problem(&name) {
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "invalid `header` \"{}\": {problem}; an HTTP header name is made of \
                     letters, digits and ! # $ % & ' * + - . ^ _ ` | ~",
                    name.escape_debug()
                ),
            ));
        }
        self.header = Some(arg.given(name, lit.span()));
        Ok(())
    }

    fn set_required(&mut self, arg: &Arg) -> syn::Result<()> {
        let value = arg.value("required", "false")?;
        arg.once(&self.required, "required")?;
        let required = match ungrouped(value) {
            Expr::Lit(ExprLit { lit: Lit::Bool(LitBool { value, span }), .. }) => arg.given(*value, *span),
            Expr::Lit(ExprLit { lit: Lit::Str(lit), .. }) if matches!(lit.value().as_str(), "true" | "false") => {
                return Err(syn::Error::new(
                    lit.span(),
                    format!(
                        "`required` expects a bool, not a string: write `required = {}` \
                         without quotes",
                        lit.value()
                    ),
                ));
            }
            other => {
                return Err(syn::Error::new_spanned(
                    other,
                    "`required` expects a bool literal: `required = true` or `required = false`",
                ));
            }
        };
        self.required = Some(required);
        Ok(())
    }

    fn set_in_flight(&mut self, arg: &Arg) -> syn::Result<()> {
        let value = arg.value("in_flight", "\"wait\"")?;
        arg.once(&self.in_flight, "in_flight")?;
        let lit = string(value, "in_flight", "\"wait\"")?;
        let mode = match lit.value().as_str() {
            "reject" => InFlightMode::Reject,
            "wait" => InFlightMode::Wait,
            other => {
                return Err(syn::Error::new(
                    lit.span(),
                    format!("unknown `in_flight` mode \"{other}\"; expected \"reject\" or \"wait\""),
                ));
            }
        };
        self.in_flight = Some(arg.given(mode, lit.span()));
        Ok(())
    }

    fn set_wait(&mut self, arg: &Arg) -> syn::Result<()> {
        let value = arg.value("wait", "\"10s\"")?;
        arg.once(&self.wait, "wait")?;
        self.wait = Some(duration(arg, value, "wait", "\"10s\"")?);
        Ok(())
    }

    fn set_crate(&mut self, arg: &Arg) -> syn::Result<()> {
        let value = arg.value("crate", "\"idem_runtime\"")?;
        arg.once(&self.krate, "crate")?;
        let lit = string(value, "crate", "\"idem_runtime\"")?;
        // `LitStr::parse` gives every token of the path the literal's span, so
        // a wrong path is reported on the literal.
        let path = lit.parse::<syn::Path>().map_err(|_| {
            syn::Error::new(
                lit.span(),
                format!(
                    "`crate` expects a path such as \"idem_runtime\" or \"::my_app::idem\", \
                     found \"{}\"",
                    lit.value()
                ),
            )
        })?;
        self.krate = Some(arg.given(path, lit.span()));
        Ok(())
    }
}

/// The message for an argument that does not exist: every allowed name,
/// and the closest one when the name looks like a typo of it.
fn unknown_argument(name: &str) -> String {
    let allowed = NAMES.map(|name| format!("`{name}`")).join(", ");
    let mut message = format!("unknown argument `{name}`; expected one of {allowed}");
    let typo = NAMES
        .iter()
        .map(|known| (edit_distance(name, known), known))
        .filter(|(distance, _)| *distance <= 2)
        .min_by_key(|(distance, _)| *distance);
    if let Some((_, known)) = typo {
        message.push_str(&format!(" (did you mean `{known}`?)"));
    }
    message
}

/// Levenshtein distance, ASCII-case-insensitive, `-` counted as `_`.
fn edit_distance(a: &str, b: &str) -> usize {
    let normalize = |text: &str| -> Vec<char> {
        text.chars().map(|ch| if ch == '-' { '_' } else { ch.to_ascii_lowercase() }).collect()
    };
    let (a, b) = (normalize(a), normalize(b));
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

/// `value` without the invisible groups `macro_rules!` puts around the
/// fragments it passes on (`$s:literal`, `$e:expr`).
fn ungrouped(mut value: &Expr) -> &Expr {
    while let Expr::Group(group) = value {
        value = &group.expr;
    }
    value
}

/// The string literal of a `name = "..."` argument.
fn string(value: &Expr, name: &str, example: &str) -> syn::Result<LitStr> {
    match ungrouped(value) {
        Expr::Lit(ExprLit { lit: Lit::Str(lit), .. }) => Ok(lit.clone()),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{name}` expects a string literal, for example `{name} = {example}`"),
        )),
    }
}

/// A duration argument, checked with the runtime's own grammar.
fn duration(arg: &Arg, value: &Expr, name: &str, example: &str) -> syn::Result<Given<Duration>> {
    let lit = string(value, name, example)?;
    let text = lit.value();
    match parse_duration(&text) {
        Ok(duration) => Ok(arg.given(duration, lit.span())),
        Err(error) => {
            let mut message = format!("invalid `{name}` \"{}\": {error}", text.escape_debug());
            if let Some(hint) = hint(&text) {
                message.push_str("; ");
                message.push_str(&hint);
            }
            Err(syn::Error::new(lit.span(), message))
        }
    }
}

/// Reads a key source: `header`, `path:NAME` or `json:/POINTER`.
fn key_source(text: &str) -> Result<KeySource, String> {
    if text == "header" {
        return Ok(KeySource::Header);
    }
    if let Some(name) = text.strip_prefix("path:") {
        if name.is_empty() {
            return Err("the path parameter's name is missing".to_owned());
        }
        if let Some(bad) = name.chars().find(|&ch| !(ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')) {
            return Err(format!(
                "{bad:?} cannot be part of a path parameter's name (write the name alone: \"path:id\" for `{{id}}`)"
            ));
        }
        return Ok(KeySource::Path(name.to_owned()));
    }
    if let Some(pointer) = text.strip_prefix("json:") {
        if !pointer.starts_with('/') {
            return Err("a JSON pointer starts with `/` (\"json:/id\", \"json:/data/object/id\")".to_owned());
        }
        let mut chars = pointer.chars();
        while let Some(ch) = chars.next() {
            if ch == '~' && !matches!(chars.next(), Some('0' | '1')) {
                return Err("in a JSON pointer `~` must be followed by `0` (for `~`) or `1` (for `/`)".to_owned());
            }
        }
        return Ok(KeySource::Json(pointer.to_owned()));
    }
    Err("unknown key source".to_owned())
}

/// Why `name` is not an HTTP header name (an RFC 9110 token), if it is not.
fn header_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("the name is empty".to_owned());
    }
    let bad = name.chars().find(|&ch| !(ch.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(ch)))?;
    Some(format!("{bad:?} is not allowed"))
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
            crate = "::my_app::idem",
        ));
        assert_eq!(args.ttl.map(|g| g.value), Some(Duration::from_secs(5_400)));
        assert_eq!(args.scope.map(|g| g.value), Some(Scope::User));
        assert_eq!(args.lock_ttl.map(|g| g.value), Some(Duration::from_secs(45)));
        assert_eq!(args.header.map(|g| g.value).as_deref(), Some("X-Request-Key"));
        assert_eq!(args.required.map(|g| g.value), Some(false));
        assert_eq!(args.in_flight.map(|g| g.value), Some(InFlightMode::Wait));
        assert_eq!(args.wait.map(|g| g.value), Some(Duration::from_secs(5)));
        let path = args.krate.map(|g| g.value);
        assert_eq!(quote!(#path).to_string(), ":: my_app :: idem");
    }

    #[test]
    fn unknown_argument_lists_the_allowed_ones() {
        let allowed = "`ttl`, `scope`, `key`, `fingerprint_headers`, `lock_ttl`, `header`, `required`, `in_flight`, \
                       `wait`, `crate`";
        assert_eq!(
            error(quote!(tll = "24h")),
            format!("unknown argument `tll`; expected one of {allowed} (did you mean `ttl`?)")
        );
        assert_eq!(error(quote!(expiry = "24h")), format!("unknown argument `expiry`; expected one of {allowed}"));
        assert!(error(quote!(inflight = "wait")).ends_with("(did you mean `in_flight`?)"));
        assert!(error(quote!(Lock_TTL = "1m")).ends_with("(did you mean `lock_ttl`?)"));
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
    fn edit_distances() {
        assert_eq!(edit_distance("ttl", "ttl"), 0);
        assert_eq!(edit_distance("tll", "ttl"), 1);
        assert_eq!(edit_distance("lock-ttl", "lock_ttl"), 0);
        assert_eq!(edit_distance("", "wait"), 4);
        assert_eq!(edit_distance("scope", "crate"), 4);
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
    }

    #[test]
    fn header_names_are_tokens() {
        assert_eq!(header_name_problem("Idempotency-Key"), None);
        assert_eq!(header_name_problem("x-idem_key.v2"), None);
        assert!(header_name_problem("").is_some());
        assert!(header_name_problem("Idempotency:Key").is_some());
        assert!(header_name_problem("clé").is_some());
    }
}

//! Parsing of the `#[idempotent(...)]` arguments.
//!
//! One setter per argument: it refuses a second occurrence, checks the
//! literal's kind (string or bool) and parses the value (duration grammar,
//! scope name, mode name, header name, crate path), each error spanned on the
//! offending token. Checks that involve two arguments live in
//! [`Args::build`](crate::validate).

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Lit, LitBool, LitStr, Token};

use crate::duration::parse_duration;

/// Every argument, as listed in error messages.
pub(crate) const ALLOWED: &str =
    "`ttl`, `scope`, `lock_ttl`, `header`, `required`, `in_flight`, `wait`, `crate`";

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

/// What a concurrent duplicate gets (`in_flight = "..."`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InFlightMode {
    Reject,
    Wait,
}

/// The arguments as written, each one optional until [`Args::build`](crate::validate)
/// applies the defaults.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) ttl: Option<Given<Duration>>,
    pub(crate) scope: Option<Given<Scope>>,
    pub(crate) lock_ttl: Option<Given<Duration>>,
    pub(crate) header: Option<Given<String>>,
    pub(crate) required: Option<Given<bool>>,
    pub(crate) in_flight: Option<Given<InFlightMode>>,
    pub(crate) wait: Option<Given<Duration>>,
    pub(crate) krate: Option<Given<syn::Path>>,
}

impl Args {
    /// Parses the tokens between the attribute's parentheses.
    ///
    /// A malformed list (`ttl` without `= value`, a stray token) stops at the
    /// first error; errors in values are collected so that every wrong
    /// argument is reported at once.
    pub(crate) fn parse(tokens: TokenStream) -> syn::Result<Self> {
        let mut args = Args::default();
        let mut errors: Option<syn::Error> = None;
        let parser = syn::meta::parser(|meta| {
            if let Err(error) = args.set(&meta) {
                match &mut errors {
                    Some(errors) => errors.combine(error),
                    None => errors = Some(error),
                }
            }
            Ok(())
        });
        parser.parse2(tokens)?;
        match errors {
            Some(errors) => Err(errors),
            None => Ok(args),
        }
    }

    /// Dispatches one `name = value` pair to its setter.
    fn set(&mut self, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
        let Some(name) = meta.path.get_ident().map(ToString::to_string) else {
            skip_value(meta)?;
            return Err(unknown(meta));
        };
        match name.as_str() {
            "ttl" => self.set_ttl(meta),
            "scope" => self.set_scope(meta),
            "lock_ttl" => self.set_lock_ttl(meta),
            "header" => self.set_header(meta),
            "required" => self.set_required(meta),
            "in_flight" => self.set_in_flight(meta),
            "wait" => self.set_wait(meta),
            "crate" => self.set_crate(meta),
            _ => {
                skip_value(meta)?;
                Err(unknown(meta))
            }
        }
    }

    fn set_ttl(&mut self, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
        let value = value(meta, "ttl", "\"24h\"")?;
        once(&self.ttl, meta, "ttl")?;
        self.ttl = Some(duration(meta, &value, "ttl", "\"24h\"")?);
        Ok(())
    }

    fn set_scope(&mut self, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
        let value = value(meta, "scope", "\"user\"")?;
        once(&self.scope, meta, "scope")?;
        let lit = string(&value, "scope", "\"user\"")?;
        let scope = match lit.value().as_str() {
            "user" => Scope::User,
            "route" => Scope::Route,
            "global" => Scope::Global,
            other => {
                return Err(syn::Error::new(
                    lit.span(),
                    format!(
                        "unknown scope \"{other}\"; expected \"user\", \"route\" or \"global\""
                    ),
                ));
            }
        };
        self.scope = Some(Given {
            value: scope,
            name: meta.path.span(),
            span: lit.span(),
        });
        Ok(())
    }

    fn set_lock_ttl(&mut self, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
        let value = value(meta, "lock_ttl", "\"30s\"")?;
        once(&self.lock_ttl, meta, "lock_ttl")?;
        self.lock_ttl = Some(duration(meta, &value, "lock_ttl", "\"30s\"")?);
        Ok(())
    }

    fn set_header(&mut self, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
        let value = value(meta, "header", "\"Idempotency-Key\"")?;
        once(&self.header, meta, "header")?;
        let lit = string(&value, "header", "\"Idempotency-Key\"")?;
        let name = lit.value();
        if let Some(problem) = header_name_problem(&name) {
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "invalid `header` \"{}\": {problem}; a header name is one or more of \
                     the letters, digits and ! # $ % & ' * + - . ^ _ ` | ~",
                    name.escape_debug()
                ),
            ));
        }
        self.header = Some(Given {
            value: name,
            name: meta.path.span(),
            span: lit.span(),
        });
        Ok(())
    }

    fn set_required(&mut self, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
        let value = value(meta, "required", "false")?;
        once(&self.required, meta, "required")?;
        let required = match &value {
            Expr::Lit(ExprLit {
                lit: Lit::Bool(LitBool { value, span }),
                ..
            }) => Given {
                value: *value,
                name: meta.path.span(),
                span: *span,
            },
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) if matches!(lit.value().as_str(), "true" | "false") => {
                return Err(syn::Error::new(
                    lit.span(),
                    format!(
                        "`required` expects a bool, not a string: write `required = {}` without quotes",
                        lit.value()
                    ),
                ));
            }
            other => {
                return Err(syn::Error::new(
                    other.span(),
                    "`required` expects a bool literal: `required = true` or `required = false`",
                ));
            }
        };
        self.required = Some(required);
        Ok(())
    }

    fn set_in_flight(&mut self, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
        let value = value(meta, "in_flight", "\"wait\"")?;
        once(&self.in_flight, meta, "in_flight")?;
        let lit = string(&value, "in_flight", "\"wait\"")?;
        let mode = match lit.value().as_str() {
            "reject" => InFlightMode::Reject,
            "wait" => InFlightMode::Wait,
            other => {
                return Err(syn::Error::new(
                    lit.span(),
                    format!(
                        "unknown `in_flight` mode \"{other}\"; expected \"reject\" or \"wait\""
                    ),
                ));
            }
        };
        self.in_flight = Some(Given {
            value: mode,
            name: meta.path.span(),
            span: lit.span(),
        });
        Ok(())
    }

    fn set_wait(&mut self, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
        let value = value(meta, "wait", "\"10s\"")?;
        once(&self.wait, meta, "wait")?;
        self.wait = Some(duration(meta, &value, "wait", "\"10s\"")?);
        Ok(())
    }

    fn set_crate(&mut self, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
        let value = value(meta, "crate", "\"idem_runtime\"")?;
        once(&self.krate, meta, "crate")?;
        let lit = string(&value, "crate", "\"idem_runtime\"")?;
        // `LitStr::parse` gives every token of the path the literal's span, so
        // a wrong path is reported on the literal.
        let path = lit.parse::<syn::Path>().map_err(|_| {
            syn::Error::new(
                lit.span(),
                format!(
                    "`crate` expects a path such as \"idem_runtime\" or \"::my_app::idem\", found \"{}\"",
                    lit.value()
                ),
            )
        })?;
        self.krate = Some(Given {
            value: path,
            name: meta.path.span(),
            span: lit.span(),
        });
        Ok(())
    }
}

/// The value after `name =`; `name` alone or `name(..)` is refused.
fn value(meta: &ParseNestedMeta<'_>, name: &str, example: &str) -> syn::Result<Expr> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse()
    } else {
        skip_value(meta)?;
        Err(meta.error(format_args!(
            "`{name}` needs a value, for example `{name} = {example}`"
        )))
    }
}

/// Consumes whatever follows an argument name that is being refused, so that
/// parsing goes on with the next argument.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.input.parse::<proc_macro2::Group>()?;
    }
    Ok(())
}

/// Refuses the second occurrence of an argument, on its name.
fn once<T>(slot: &Option<T>, meta: &ParseNestedMeta<'_>, name: &str) -> syn::Result<()> {
    match slot {
        Some(_) => Err(meta.error(format_args!(
            "duplicate argument `{name}`; each argument may be given once"
        ))),
        None => Ok(()),
    }
}

fn unknown(meta: &ParseNestedMeta<'_>) -> syn::Error {
    let path = &meta.path;
    let name = quote::quote!(#path).to_string().replace(' ', "");
    meta.error(format_args!(
        "unknown argument `{name}`; expected one of {ALLOWED}"
    ))
}

/// The string literal of a `name = "..."` argument.
fn string(value: &Expr, name: &str, example: &str) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(lit.clone()),
        other => Err(syn::Error::new(
            other.span(),
            format!("`{name}` expects a string literal, for example `{name} = {example}`"),
        )),
    }
}

/// A duration argument, checked with the runtime's own grammar.
fn duration(
    meta: &ParseNestedMeta<'_>,
    value: &Expr,
    name: &str,
    example: &str,
) -> syn::Result<Given<Duration>> {
    let lit = string(value, name, example)?;
    let text = lit.value();
    match parse_duration(&text) {
        Ok(duration) => Ok(Given {
            value: duration,
            name: meta.path.span(),
            span: lit.span(),
        }),
        Err(error) => Err(syn::Error::new(
            lit.span(),
            format!("invalid `{name}` \"{}\": {error}", text.escape_debug()),
        )),
    }
}

/// Why `name` is not an HTTP header name (an RFC 9110 token), if it is not.
fn header_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("the name is empty".to_owned());
    }
    let bad = name
        .chars()
        .find(|&ch| !(ch.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(ch)))?;
    Some(format!("{:?} is not allowed in a header name", bad))
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
            Err(error) => error
                .into_iter()
                .map(|error| error.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
        }
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
        assert_eq!(
            args.lock_ttl.map(|g| g.value),
            Some(Duration::from_secs(45))
        );
        assert_eq!(
            args.header.map(|g| g.value).as_deref(),
            Some("X-Request-Key")
        );
        assert_eq!(args.required.map(|g| g.value), Some(false));
        assert_eq!(args.in_flight.map(|g| g.value), Some(InFlightMode::Wait));
        assert_eq!(args.wait.map(|g| g.value), Some(Duration::from_secs(5)));
        let path = args.krate.map(|g| g.value);
        assert_eq!(quote!(#path).to_string(), ":: my_app :: idem");
    }

    #[test]
    fn unknown_argument_lists_the_allowed_ones() {
        let message = error(quote!(tll = "24h"));
        assert_eq!(
            message,
            format!("unknown argument `tll`; expected one of {ALLOWED}")
        );
    }

    #[test]
    fn reports_every_bad_value_at_once() {
        let message = error(quote!(
            ttl = "5w",
            scope = "users",
            header = "Idempotency Key"
        ));
        assert!(message.contains("unknown duration unit `w`"), "{message}");
        assert!(message.contains("unknown scope \"users\""), "{message}");
        assert!(message.contains("' ' is not allowed"), "{message}");
    }

    #[test]
    fn refuses_duplicates_and_missing_values() {
        assert!(error(quote!(ttl = "1h", ttl = "2h")).starts_with("duplicate argument `ttl`"));
        assert_eq!(
            error(quote!(ttl)),
            "`ttl` needs a value, for example `ttl = \"24h\"`"
        );
    }

    #[test]
    fn refuses_wrong_literal_kinds() {
        assert_eq!(
            error(quote!(ttl = 24)),
            "`ttl` expects a string literal, for example `ttl = \"24h\"`"
        );
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

//! The `key` argument, where the key comes from: the `header` argument's
//! header, a path parameter, a JSON pointer into the body, several of them
//! joined (`key = ["path:order_id", "json:/line_id"]`), or a function of
//! the request (`key = "fn:path::to::function"`).

use quote::ToTokens;
use syn::Expr;

use super::Args;
use super::arg::{Arg, string, ungrouped};
use crate::errors::combine;

/// What the key sources accept, for messages.
const EXPECTED: &str = "expected \"header\", \"path:NAME\" (a path parameter), \"json:/POINTER\" (an RFC 6901 \
                        pointer into the body, such as \"json:/id\"), \"fn:path::to::function\" (a function of the \
                        request) or a list of the first three (`[\"path:order_id\", \"json:/line_id\"]`)";

/// Where the key comes from (`key = "..."`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KeySource {
    /// The `header` argument's header.
    Header,
    /// A path parameter, by name.
    Path(String),
    /// An RFC 6901 JSON pointer into the body.
    Json(String),
    /// Two parts or more, joined.
    Composite(Vec<KeySource>),
    /// A function of the request, by path.
    Computed(Function),
}

/// The path of a key function, as written in the string (its tokens
/// spanned on the literal, so that a wrong signature is reported there).
#[derive(Clone, Debug)]
pub(crate) struct Function {
    pub(crate) path: syn::Path,
    /// The string literal's span.
    pub(crate) span: proc_macro2::Span,
}

impl Function {
    /// The path as written, without spaces (`keys::invoice`).
    pub(crate) fn name(&self) -> String {
        self.path.to_token_stream().to_string().replace(' ', "")
    }
}

impl PartialEq for Function {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Function {}

impl KeySource {
    /// Whether the key, or one of its parts, is read from the key header.
    pub(crate) fn uses_header(&self) -> bool {
        match self {
            Self::Header => true,
            Self::Composite(parts) => parts.contains(&Self::Header),
            _ => false,
        }
    }

    /// Whether every part of the key is a path parameter (always there).
    pub(crate) fn only_path(&self) -> bool {
        match self {
            Self::Path(_) => true,
            Self::Composite(parts) => parts.iter().all(|part| matches!(part, Self::Path(_))),
            _ => false,
        }
    }

    /// The source as the attribute writes it (`"path:order_id"`).
    pub(crate) fn written(&self) -> String {
        match self {
            Self::Header => "header".to_owned(),
            Self::Path(name) => format!("path:{name}"),
            Self::Json(pointer) => format!("json:{pointer}"),
            Self::Composite(parts) => {
                let parts: Vec<String> = parts.iter().map(|part| format!("{:?}", part.written())).collect();
                format!("[{}]", parts.join(", "))
            }
            Self::Computed(function) => format!("fn:{}", function.name()),
        }
    }
}

impl Args {
    pub(super) fn set_key(&mut self, arg: &Arg) -> syn::Result<()> {
        let value = arg.value("key", "\"json:/id\"")?;
        arg.once(&self.key, "key")?;
        if let Expr::Array(array) = ungrouped(value) {
            let source = composite(array)?;
            self.key = Some(arg.given(source, array.bracket_token.span.join()));
            return Ok(());
        }
        let lit = string(value, "key", "\"json:/id\"")?;
        let text = lit.value();
        let invalid = |problem: String| {
            syn::Error::new(lit.span(), format!("invalid `key` \"{}\": {problem}; {EXPECTED}", text.escape_debug()))
        };
        let source = match text.strip_prefix("fn:") {
            Some(path) => KeySource::Computed(function(path, &lit).map_err(invalid)?),
            None => key_source(&text).map_err(invalid)?,
        };
        self.key = Some(arg.given(source, lit.span()));
        Ok(())
    }
}

/// A composite key: two sources or more, each once, none a function.
fn composite(array: &syn::ExprArray) -> syn::Result<KeySource> {
    const EXAMPLE: &str = "[\"path:order_id\", \"json:/line_id\"]";
    let mut parts: Vec<KeySource> = Vec::new();
    let mut errors = Vec::new();
    for element in &array.elems {
        let lit = match string(element, "key", EXAMPLE) {
            Ok(lit) => lit,
            Err(error) => {
                errors.push(error);
                continue;
            }
        };
        let text = lit.value();
        let problem = match key_source(&text) {
            Ok(part) if parts.contains(&part) => {
                format!("the part \"{}\" is given twice; keep one", text.escape_debug())
            }
            Ok(part) => {
                parts.push(part);
                continue;
            }
            Err(_) if text.starts_with("fn:") => {
                "a key function cannot be a part: it can read every source itself; give `key = \"fn:..\"` alone"
                    .to_owned()
            }
            Err(problem) => format!(
                "invalid key part \"{}\": {problem}; expected \"header\", \"path:NAME\" or \"json:/POINTER\"",
                text.escape_debug()
            ),
        };
        errors.push(syn::Error::new(lit.span(), problem));
    }
    if let Some(error) = combine(errors) {
        return Err(error);
    }
    if parts.len() < 2 {
        let message = match parts.first() {
            Some(part) => {
                format!("a composite key needs two parts or more; for one source write `key = \"{}\"`", part.written())
            }
            None => format!("a composite key needs two parts or more, for example `key = {EXAMPLE}`"),
        };
        return Err(syn::Error::new(array.bracket_token.span.join(), message));
    }
    Ok(KeySource::Composite(parts))
}

/// The path of a key function, its tokens spanned on `lit`.
fn function(path: &str, lit: &syn::LitStr) -> Result<Function, String> {
    if path.trim().is_empty() {
        return Err("the function's path is missing (\"fn:keys::invoice_key\")".to_owned());
    }
    let spanned = syn::LitStr::new(path, lit.span());
    let path = spanned.parse::<syn::Path>().map_err(|_| format!("`{path}` is not a path to a function"))?;
    Ok(Function { path, span: lit.span() })
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
        return super::exclude::pointer_problem(pointer).map_or(Ok(KeySource::Json(pointer.to_owned())), Err);
    }
    Err("unknown key source".to_owned())
}

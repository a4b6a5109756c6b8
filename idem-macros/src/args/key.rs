//! The `key` argument, where the key comes from: the `header` argument's
//! header, a path parameter or a JSON pointer into the body.

use super::Args;
use super::arg::{Arg, string};

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

impl Args {
    pub(super) fn set_key(&mut self, arg: &Arg) -> syn::Result<()> {
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

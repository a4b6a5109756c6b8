//! The arguments that name HTTP headers: `header`, the one that carries the
//! key, and `fingerprint_headers`, the list hashed into the fingerprint.
//! Both are checked as RFC 9110 tokens.

use syn::Expr;

use super::Args;
use super::arg::{Arg, string, ungrouped};
use crate::errors::combine;

impl Args {
    pub(super) fn set_header(&mut self, arg: &Arg) -> syn::Result<()> {
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

    pub(super) fn set_fingerprint_headers(&mut self, arg: &Arg) -> syn::Result<()> {
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
    use super::*;

    #[test]
    fn header_names_are_tokens() {
        assert_eq!(header_name_problem("Idempotency-Key"), None);
        assert_eq!(header_name_problem("x-idem_key.v2"), None);
        assert!(header_name_problem("").is_some());
        assert!(header_name_problem("Idempotency:Key").is_some());
        assert!(header_name_problem("clé").is_some());
    }
}

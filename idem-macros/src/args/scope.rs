//! The `scope` argument: the namespace of the key.

use super::Args;
use super::arg::{Arg, string};

/// Namespace of the key (`scope = "..."`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    User,
    Route,
    Global,
}

impl Args {
    pub(super) fn set_scope(&mut self, arg: &Arg) -> syn::Result<()> {
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
}

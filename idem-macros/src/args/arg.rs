//! One argument as written (`name = value`), and the readers every setter
//! shares: its value, the refusal of a second occurrence, a string literal.

use proc_macro2::Span;
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Lit, LitStr, Token};

use super::Given;

/// One `name = value` pair as written; `value` is `None` when the name
/// stands alone (`ttl`) or takes parentheses (`ttl("24h")`).
pub(super) struct Arg {
    pub(super) path: syn::Path,
    value: Option<Expr>,
}

impl Arg {
    /// Reads one argument; only a syntax error (a value that is not an
    /// expression) fails here.
    pub(super) fn read(meta: &ParseNestedMeta<'_>) -> syn::Result<Self> {
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
    pub(super) fn value(&self, name: &str, example: &str) -> syn::Result<&Expr> {
        self.value.as_ref().ok_or_else(|| {
            syn::Error::new_spanned(&self.path, format!("`{name}` needs a value, for example `{name} = {example}`"))
        })
    }

    /// Refuses the second occurrence of an argument, on its name.
    pub(super) fn once<T>(&self, slot: &Option<T>, name: &str) -> syn::Result<()> {
        match slot {
            Some(_) => Err(syn::Error::new_spanned(
                &self.path,
                format!("duplicate argument `{name}`; each argument may be given once"),
            )),
            None => Ok(()),
        }
    }

    pub(super) fn given<T>(&self, value: T, span: Span) -> Given<T> {
        Given { value, name: self.path.span(), span }
    }
}

/// `value` without the invisible groups `macro_rules!` puts around the
/// fragments it passes on (`$s:literal`, `$e:expr`).
pub(super) fn ungrouped(mut value: &Expr) -> &Expr {
    while let Expr::Group(group) = value {
        value = &group.expr;
    }
    value
}

/// The string literal of a `name = "..."` argument.
pub(super) fn string(value: &Expr, name: &str, example: &str) -> syn::Result<LitStr> {
    match ungrouped(value) {
        Expr::Lit(ExprLit { lit: Lit::Str(lit), .. }) => Ok(lit.clone()),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{name}` expects a string literal, for example `{name} = {example}`"),
        )),
    }
}

//! The `required` argument, a bool literal: whether a request must carry
//! the key (`false` lets one without it run without idempotency).

use syn::{Expr, ExprLit, Lit, LitBool};

use super::Args;
use super::arg::{Arg, ungrouped};

impl Args {
    pub(super) fn set_required(&mut self, arg: &Arg) -> syn::Result<()> {
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
}

//! The `crate` argument: the path of the runtime crate, when it is renamed
//! or re-exported.

use super::Args;
use super::arg::{Arg, string};

impl Args {
    pub(super) fn set_crate(&mut self, arg: &Arg) -> syn::Result<()> {
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

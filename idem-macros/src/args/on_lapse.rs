//! The `on_lapse` argument: what a retry does with an execution whose lease
//! lapsed unfinished.

use super::Args;
use super::arg::{Arg, string};

/// What a retry does with an execution whose lease lapsed unfinished
/// (`on_lapse = "..."`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnLapse {
    Takeover,
    Hold,
}

impl Args {
    pub(super) fn set_on_lapse(&mut self, arg: &Arg) -> syn::Result<()> {
        let value = arg.value("on_lapse", "\"hold\"")?;
        arg.once(&self.on_lapse, "on_lapse")?;
        let lit = string(value, "on_lapse", "\"hold\"")?;
        let policy = match lit.value().as_str() {
            "takeover" => OnLapse::Takeover,
            "hold" => OnLapse::Hold,
            other => {
                return Err(syn::Error::new(
                    lit.span(),
                    format!("unknown `on_lapse` policy \"{other}\"; expected \"takeover\" or \"hold\""),
                ));
            }
        };
        self.on_lapse = Some(arg.given(policy, lit.span()));
        Ok(())
    }
}

//! The `in_flight` argument: what a concurrent duplicate gets.

use super::Args;
use super::arg::{Arg, string};

/// What a concurrent duplicate gets (`in_flight = "..."`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InFlightMode {
    Reject,
    Wait,
}

impl Args {
    pub(super) fn set_in_flight(&mut self, arg: &Arg) -> syn::Result<()> {
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
}

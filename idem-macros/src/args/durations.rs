//! The three duration arguments, `ttl`, `lock_ttl` and `wait`, read with
//! the runtime's own grammar (`crate::duration`).

use std::time::Duration;

use syn::Expr;

use super::arg::{Arg, string};
use super::{Args, Given};
use crate::duration::{hint, parse_duration};

impl Args {
    pub(super) fn set_ttl(&mut self, arg: &Arg) -> syn::Result<()> {
        let value = arg.value("ttl", "\"24h\"")?;
        arg.once(&self.ttl, "ttl")?;
        self.ttl = Some(duration(arg, value, "ttl", "\"24h\"")?);
        Ok(())
    }

    pub(super) fn set_lock_ttl(&mut self, arg: &Arg) -> syn::Result<()> {
        let value = arg.value("lock_ttl", "\"30s\"")?;
        arg.once(&self.lock_ttl, "lock_ttl")?;
        self.lock_ttl = Some(duration(arg, value, "lock_ttl", "\"30s\"")?);
        Ok(())
    }

    pub(super) fn set_wait(&mut self, arg: &Arg) -> syn::Result<()> {
        let value = arg.value("wait", "\"10s\"")?;
        arg.once(&self.wait, "wait")?;
        self.wait = Some(duration(arg, value, "wait", "\"10s\"")?);
        Ok(())
    }
}

/// A duration argument, checked with the runtime's own grammar.
fn duration(arg: &Arg, value: &Expr, name: &str, example: &str) -> syn::Result<Given<Duration>> {
    let lit = string(value, name, example)?;
    let text = lit.value();
    match parse_duration(&text) {
        Ok(duration) => Ok(arg.given(duration, lit.span())),
        Err(error) => {
            let mut message = format!("invalid `{name}` \"{}\": {error}", text.escape_debug());
            if let Some(hint) = hint(&text) {
                message.push_str("; ");
                message.push_str(&hint);
            }
            Err(syn::Error::new(lit.span(), message))
        }
    }
}

//! The `fingerprint_exclude` argument: JSON pointers whose values a JSON
//! body's fingerprint leaves out (a delivery counter, a send time), and the
//! RFC 6901 check every pointer in the attribute gets.

use syn::Expr;

use super::Args;
use super::arg::{Arg, string, ungrouped};
use crate::errors::combine;

/// Most pointers one route may exclude (as the runtime counts them).
const MAX_EXCLUDED: usize = 64;

impl Args {
    pub(super) fn set_fingerprint_exclude(&mut self, arg: &Arg) -> syn::Result<()> {
        const EXAMPLE: &str = "[\"/attempt\"]";
        let value = arg.value("fingerprint_exclude", EXAMPLE)?;
        arg.once(&self.fingerprint_exclude, "fingerprint_exclude")?;
        let Expr::Array(array) = ungrouped(value) else {
            return Err(syn::Error::new_spanned(
                value,
                format!(
                    "`fingerprint_exclude` expects a list of JSON pointers, for example \
                     `fingerprint_exclude = {EXAMPLE}`"
                ),
            ));
        };
        let mut pointers: Vec<String> = Vec::new();
        let mut errors = Vec::new();
        for element in &array.elems {
            let lit = match string(element, "fingerprint_exclude", EXAMPLE) {
                Ok(lit) => lit,
                Err(error) => {
                    errors.push(error);
                    continue;
                }
            };
            let pointer = lit.value();
            let problem = if pointer.is_empty() {
                Some("the empty pointer names the whole body: every body would be the same request".to_owned())
            } else if let Some(problem) = pointer_problem(&pointer) {
                Some(problem)
            } else if pointers.contains(&pointer) {
                Some("this pointer is given twice; keep one".to_owned())
            } else {
                nested(&pointer, &pointers)
            };
            match problem {
                Some(problem) => errors.push(syn::Error::new(
                    lit.span(),
                    format!("invalid pointer \"{}\" in `fingerprint_exclude`: {problem}", pointer.escape_debug()),
                )),
                None => pointers.push(pointer),
            }
        }
        if let Some(error) = combine(errors) {
            return Err(error);
        }
        if pointers.len() > MAX_EXCLUDED {
            return Err(syn::Error::new(
                array.bracket_token.span.join(),
                format!("`fingerprint_exclude` names {} pointers; at most {MAX_EXCLUDED} are allowed", pointers.len()),
            ));
        }
        self.fingerprint_exclude = Some(arg.given(pointers, array.bracket_token.span.join()));
        Ok(())
    }
}

/// Why `pointer` is not an RFC 6901 JSON pointer, if it is not.
pub(super) fn pointer_problem(pointer: &str) -> Option<String> {
    if !pointer.starts_with('/') {
        return Some("a JSON pointer starts with `/` (\"/id\", \"/data/object/id\")".to_owned());
    }
    let mut chars = pointer.chars();
    while let Some(ch) = chars.next() {
        if ch == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Some("in a JSON pointer `~` must be followed by `0` (for `~`) or `1` (for `/`)".to_owned());
        }
    }
    None
}

/// Why `pointer` is pointless beside the `earlier` ones: inside one of them,
/// or holding one.
fn nested(pointer: &str, earlier: &[String]) -> Option<String> {
    let inside = |inner: &str, outer: &str| inner.strip_prefix(outer).is_some_and(|rest| rest.starts_with('/'));
    earlier.iter().find_map(|other| {
        if inside(pointer, other) {
            Some(format!("it is inside \"{other}\", which is excluded whole"))
        } else if inside(other, pointer) {
            Some(format!("it holds \"{other}\", given too; keep the one you mean"))
        } else {
            None
        }
    })
}

//! The error for a name that is not an argument: every allowed name, and
//! the closest one when the name looks like a typo of it.

use super::NAMES;

/// The message for an argument that does not exist: every allowed name,
/// and the closest one when the name looks like a typo of it.
pub(super) fn unknown_argument(name: &str) -> String {
    let allowed = NAMES.map(|name| format!("`{name}`")).join(", ");
    let mut message = format!("unknown argument `{name}`; expected one of {allowed}");
    let typo = NAMES
        .iter()
        .map(|known| (edit_distance(name, known), known))
        .filter(|(distance, _)| *distance <= 2)
        .min_by_key(|(distance, _)| *distance);
    if let Some((_, known)) = typo {
        message.push_str(&format!(" (did you mean `{known}`?)"));
    }
    message
}

/// Levenshtein distance, ASCII-case-insensitive, `-` counted as `_`.
fn edit_distance(a: &str, b: &str) -> usize {
    let normalize = |text: &str| -> Vec<char> {
        text.chars().map(|ch| if ch == '-' { '_' } else { ch.to_ascii_lowercase() }).collect()
    };
    let (a, b) = (normalize(a), normalize(b));
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("ttl", "ttl"), 0);
        assert_eq!(edit_distance("tll", "ttl"), 1);
        assert_eq!(edit_distance("lock-ttl", "lock_ttl"), 0);
        assert_eq!(edit_distance("", "wait"), 4);
        assert_eq!(edit_distance("scope", "crate"), 4);
    }
}

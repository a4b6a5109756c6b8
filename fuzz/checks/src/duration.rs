//! Target `duration`: the attribute's durations (`ttl = "1h30m"`), parsed
//! at compile time by the macro crate.
//!
//! A proc-macro crate exports nothing but its macros, so the parser's file
//! (`idem-macros/src/duration.rs`, std only) is compiled in here as a
//! module of its own. Properties, for any text:
//!
//! - never a panic, in the parser, its error messages or its hints;
//! - the parser agrees with a plain reading of the grammar (parts
//!   `<digits><unit>`, units `d h m s` each at most once and largest first,
//!   a total above zero that fits in `u64` seconds);
//! - a parsed duration, written back in that grammar, parses to itself;
//! - a hint offers only a text that parses.

#[path = "../../../idem-macros/src/duration.rs"]
mod parser;

/// Checks one duration text.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let parsed = parser::parse_duration(text);
    let seconds = parsed.as_ref().ok().map(std::time::Duration::as_secs);
    assert_eq!(seconds, plain_reading(text), "{text:?}: {parsed:?}");
    match &parsed {
        Ok(duration) => {
            let written = write(duration.as_secs());
            assert_eq!(parser::parse_duration(&written), Ok(*duration), "{text:?} written as {written:?}");
            assert_eq!(duration.subsec_nanos(), 0, "{text:?}");
        }
        Err(error) => assert!(!error.to_string().is_empty()),
    }
    let hint = parser::hint(text);
    if let Some(fixed) = hint.as_deref().and_then(|hint| hint.strip_prefix("write \"")?.split('"').next()) {
        assert!(parser::parse_duration(fixed).is_ok(), "{text:?}: the hint {hint:?} does not parse");
    }
}

/// The grammar read plainly: `Some(seconds)` for a valid duration.
fn plain_reading(text: &str) -> Option<u64> {
    let mut rest = text;
    let mut total: u64 = 0;
    let mut units = "dhms";
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let (number, after) = rest.split_at(digits);
        let unit = after.chars().next()?;
        if number.is_empty() {
            return None;
        }
        let position = units.find(unit)?;
        units = &units[position + 1..];
        let scale = match unit {
            'd' => 86_400,
            'h' => 3_600,
            'm' => 60,
            _ => 1,
        };
        total = total.checked_add(number.parse::<u64>().ok()?.checked_mul(scale)?)?;
        rest = &after[1..];
    }
    (total > 0).then_some(total)
}

/// A duration in the grammar, largest unit first.
fn write(mut seconds: u64) -> String {
    let mut text = String::new();
    for (unit, scale) in [('d', 86_400), ('h', 3_600), ('m', 60), ('s', 1)] {
        if seconds >= scale {
            text.push_str(&format!("{}{unit}", seconds / scale));
            seconds %= scale;
        }
    }
    text
}

//! Human durations such as `"24h"`, `"90s"`, `"1h30m"` and `"7d"`.
//!
//! The attribute's arguments are checked at compile time, so this grammar
//! lives in the macro crate alone: the runtime only ever sees `Duration`s.
//!
//! Grammar: one or more `<digits><unit>` parts, units `d`, `h`, `m`, `s`,
//! each unit at most once and in that order (`"1d12h"`, not `"12h1d"`), no
//! spaces, no sign, and a total above zero.

use std::fmt;
use std::time::Duration;

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum DurationError {
    /// The string was empty.
    Empty,
    /// A unit letter came without a number before it.
    MissingNumber {
        /// Byte offset of the unit letter.
        at: usize,
    },
    /// A number came without a unit after it (`"30"`).
    MissingUnit {
        /// The number that had no unit.
        number: String,
    },
    /// A character that is neither a digit nor one of `d h m s`.
    UnknownUnit {
        /// The offending character.
        unit: char,
    },
    /// A unit appeared twice, or after a smaller one (`"1m1h"`).
    UnitOrder {
        /// The offending unit.
        unit: char,
    },
    /// The total is zero.
    Zero,
    /// The total does not fit in a `u64` number of seconds.
    Overflow,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("empty duration; expected something like \"24h\" or \"1h30m\""),
            Self::MissingNumber { at } => {
                write!(f, "unit at byte {at} has no number before it; expected something like \"30s\"")
            }
            Self::MissingUnit { number } => {
                write!(f, "\"{number}\" has no unit; add one of `s`, `m`, `h`, `d` (for example \"{number}s\")")
            }
            Self::UnknownUnit { unit } => {
                write!(f, "unknown duration unit `{unit}`; the units are `s`, `m`, `h`, `d`")
            }
            Self::UnitOrder { unit } => write!(
                f,
                "unit `{unit}` is repeated or out of order; write each unit once, largest first (\"1d2h3m4s\")"
            ),
            Self::Zero => f.write_str("duration must be greater than zero"),
            Self::Overflow => f.write_str("duration is too large"),
        }
    }
}

impl std::error::Error for DurationError {}

/// Parses a duration such as `"24h"`, `"90s"`, `"1h30m"` or `"7d"`.
///
/// `"1h30m"` is 5400 seconds; `"0s"`, `"30"` and `"5w"` are refused with a
/// [`DurationError`] that says why.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total: u64 = 0;
    let mut number: Option<u64> = None;
    let mut digits_start = 0;
    // Rank of the last unit seen: units must strictly descend (d > h > m > s).
    let mut last_rank = u8::MAX;
    for (at, ch) in text.char_indices() {
        if let Some(digit) = ch.to_digit(10) {
            if number.is_none() {
                digits_start = at;
            }
            let value = number.unwrap_or(0);
            let value = value.checked_mul(10).and_then(|v| v.checked_add(u64::from(digit)));
            number = Some(value.ok_or(DurationError::Overflow)?);
            continue;
        }
        let (rank, seconds) = match ch {
            'd' => (3, 86_400),
            'h' => (2, 3_600),
            'm' => (1, 60),
            's' => (0, 1),
            other => return Err(DurationError::UnknownUnit { unit: other }),
        };
        let value = number.take().ok_or(DurationError::MissingNumber { at })?;
        if rank >= last_rank {
            return Err(DurationError::UnitOrder { unit: ch });
        }
        last_rank = rank;
        total = value.checked_mul(seconds).and_then(|part| total.checked_add(part)).ok_or(DurationError::Overflow)?;
    }
    if number.is_some() {
        return Err(DurationError::MissingUnit { number: text[digits_start..].to_owned() });
    }
    if total == 0 {
        return Err(DurationError::Zero);
    }
    Ok(Duration::from_secs(total))
}

/// A hint for a refused duration written the way other tools write
/// durations (`"500ms"`, `"30min"`, `"24H"`, `"1h 30m"`): what is allowed,
/// and the fixed text when there is one.
pub(crate) fn hint(text: &str) -> Option<String> {
    if text.trim_end().ends_with("ms") && text.trim_end_matches("ms").bytes().all(|b| b.is_ascii_digit()) {
        return Some(
            "durations are whole seconds, the smallest unit is `s` (a lease or TTL under a second cannot be \
             kept across a network): write \"1s\""
                .to_owned(),
        );
    }
    let words = [
        ("seconds", "s"),
        ("second", "s"),
        ("secs", "s"),
        ("sec", "s"),
        ("minutes", "m"),
        ("minute", "m"),
        ("mins", "m"),
        ("min", "m"),
        ("hours", "h"),
        ("hour", "h"),
        ("hrs", "h"),
        ("hr", "h"),
        ("days", "d"),
        ("day", "d"),
    ];
    let mut fixed: String = text.chars().filter(|c| !c.is_whitespace()).collect::<String>().to_ascii_lowercase();
    for (word, unit) in words {
        fixed = fixed.replace(word, unit);
    }
    (fixed != text && parse_duration(&fixed).is_ok())
        .then(|| format!("write \"{fixed}\" (units `s` `m` `h` `d`, lower-case, largest first, no spaces)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_fix_durations_written_as_elsewhere() {
        for (text, fixed) in
            [("30min", "30m"), ("24H", "24h"), ("1h 30m", "1h30m"), ("2 hours", "2h"), ("10secs", "10s")]
        {
            let hint = hint(text).unwrap_or_else(|| panic!("no hint for {text}"));
            assert!(hint.starts_with(&format!("write \"{fixed}\" (")), "{text}: {hint}");
            assert!(hint.contains("no spaces"), "{hint}");
        }
        assert!(hint("500ms").unwrap().contains("the smallest unit is `s`"));
        assert_eq!(hint("5w"), None);
        assert_eq!(hint("0s"), None);
    }

    fn secs(text: &str) -> Result<u64, DurationError> {
        parse_duration(text).map(|d| d.as_secs())
    }

    #[test]
    fn accepts_single_and_combined_units() {
        assert_eq!(secs("90s"), Ok(90));
        assert_eq!(secs("30m"), Ok(1_800));
        assert_eq!(secs("24h"), Ok(86_400));
        assert_eq!(secs("7d"), Ok(604_800));
        assert_eq!(secs("1h30m"), Ok(5_400));
        assert_eq!(secs("1d2h3m4s"), Ok(93_784));
        assert_eq!(secs("0h5m"), Ok(300));
    }

    #[test]
    fn refuses_malformed_input() {
        assert_eq!(secs(""), Err(DurationError::Empty));
        assert_eq!(secs("h"), Err(DurationError::MissingNumber { at: 0 }));
        assert_eq!(secs("1hm"), Err(DurationError::MissingNumber { at: 2 }));
        assert_eq!(secs("1h30"), Err(DurationError::MissingUnit { number: "30".into() }));
        assert_eq!(secs("5w"), Err(DurationError::UnknownUnit { unit: 'w' }));
        assert_eq!(secs("5 s"), Err(DurationError::UnknownUnit { unit: ' ' }));
        assert_eq!(secs("-5s"), Err(DurationError::UnknownUnit { unit: '-' }));
        assert_eq!(secs("5ms"), Err(DurationError::MissingNumber { at: 2 }));
        assert_eq!(secs("1m1h"), Err(DurationError::UnitOrder { unit: 'h' }));
        assert_eq!(secs("1h1h"), Err(DurationError::UnitOrder { unit: 'h' }));
        assert_eq!(secs("0s"), Err(DurationError::Zero));
        assert_eq!(secs("0d0h"), Err(DurationError::Zero));
        assert_eq!(secs("99999999999999999999s"), Err(DurationError::Overflow));
        assert_eq!(secs("999999999999999999d"), Err(DurationError::Overflow));
    }

    #[test]
    fn errors_read_well() {
        let message = parse_duration("5w").unwrap_err().to_string();
        assert!(message.contains("`w`") && message.contains("`s`, `m`, `h`, `d`"));
        let message = parse_duration("30").unwrap_err().to_string();
        assert!(message.contains("\"30s\""), "{message}");
    }
}

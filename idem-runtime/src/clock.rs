//! Instants ahead of another, saturating instead of overflowing.

use std::time::{Duration, Instant};

/// What an end too far to count is cut to: about a century ahead.
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 86_400);

/// `at + by`, or about a century after `at` where that sum is beyond what
/// an `Instant` counts (a TTL, lease or wait of any whole number of days
/// is accepted).
pub(crate) fn later(at: Instant, by: Duration) -> Instant {
    at.checked_add(by).unwrap_or_else(|| at + FAR_FUTURE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_end_beyond_the_clock_saturates_about_a_century_ahead() {
        let now = Instant::now();
        assert_eq!(later(now, Duration::from_secs(5)), now + Duration::from_secs(5));
        assert_eq!(later(now, Duration::MAX), now + FAR_FUTURE);
    }
}

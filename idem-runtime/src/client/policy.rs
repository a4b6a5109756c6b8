//! When to try again: exponential backoff with full jitter under a number
//! of attempts and a total deadline, and `Retry-After` honoured up to a cap.
//! Pure, so that it can be tested with a paused clock.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// How the client retries one logical request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    max_attempts: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
    deadline: Duration,
    max_retry_after: Duration,
}

impl Default for RetryPolicy {
    /// 8 attempts within 30 s; backoff from 100 ms doubling up to 5 s, with
    /// full jitter; a `Retry-After` of up to 10 s honoured.
    fn default() -> Self {
        Self {
            max_attempts: 8,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            deadline: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// Attempts in all, the first included (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// The ceiling of the first backoff; each retry doubles it.
    pub fn initial_backoff(mut self, backoff: Duration) -> Self {
        self.initial_backoff = backoff;
        self
    }

    /// The highest ceiling a backoff reaches.
    pub fn max_backoff(mut self, backoff: Duration) -> Self {
        self.max_backoff = backoff;
        self
    }

    /// The time, from the first attempt, after which no attempt starts.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The longest `Retry-After` honoured as given; a longer one is cut to
    /// this.
    pub fn max_retry_after(mut self, cap: Duration) -> Self {
        self.max_retry_after = cap;
        self
    }

    /// The ceiling of the backoff before retry number `retry` (0 for the
    /// first retry): the initial backoff doubled `retry` times, at most the
    /// maximum.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.min(31));
        self.initial_backoff.saturating_mul(factor).min(self.max_backoff)
    }

    /// The backoff before retry number `retry`, with full jitter: `unit`
    /// (uniform in `[0, 1)`) times the [ceiling](Self::ceiling).
    pub fn backoff(&self, retry: u32, unit: f64) -> Duration {
        self.ceiling(retry).mul_f64(unit.clamp(0.0, 1.0))
    }

    /// The wait before retry number `retry`: the backoff, or the server's
    /// `Retry-After` (capped) when it asked for longer. Never sooner than
    /// asked (up to the cap), and never a burst of immediate retries when
    /// it asks for none.
    pub fn wait(&self, retry: u32, retry_after: Option<Duration>, unit: f64) -> Duration {
        let backoff = self.backoff(retry, unit);
        match retry_after {
            Some(asked) => asked.min(self.max_retry_after).max(backoff),
            None => backoff,
        }
    }
}

/// A `Retry-After` value: delay-seconds, or an HTTP date (relative to
/// `now`; a date in the past is no wait). `None` when it is neither.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The attempts of one logical request so far, against its policy.
#[derive(Debug)]
pub(crate) struct Schedule {
    policy: RetryPolicy,
    started: Instant,
    attempts: u32,
}

impl Schedule {
    /// A request whose first attempt starts now.
    pub(crate) fn start(policy: RetryPolicy) -> Self {
        Self { policy, started: Instant::now(), attempts: 0 }
    }

    /// Counts an attempt about to be sent.
    pub(crate) fn attempt(&mut self) {
        self.attempts += 1;
    }

    /// Attempts sent so far.
    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Time left before the deadline.
    pub(crate) fn remaining(&self) -> Duration {
        self.policy.deadline.saturating_sub(self.started.elapsed())
    }

    /// How long to wait before the next attempt, or `None` when there is
    /// none: the attempts are spent, or it would start past the deadline.
    pub(crate) fn next(&self, retry_after: Option<Duration>, unit: f64) -> Option<Duration> {
        if self.attempts >= self.policy.max_attempts {
            return None;
        }
        let wait = self.policy.wait(self.attempts.saturating_sub(1), retry_after, unit);
        let end = self.started.elapsed().checked_add(wait);
        end.is_some_and(|end| end <= self.policy.deadline).then_some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy::default()
            .initial_backoff(Duration::from_millis(100))
            .max_backoff(Duration::from_secs(2))
            .max_attempts(6)
            .deadline(Duration::from_secs(10))
            .max_retry_after(Duration::from_secs(5))
    }

    #[test]
    fn the_ceiling_doubles_up_to_the_maximum() {
        let ceilings: Vec<u64> = (0..7).map(|retry| policy().ceiling(retry).as_millis() as u64).collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1600, 2000, 2000]);
        assert_eq!(policy().ceiling(u32::MAX), Duration::from_secs(2), "no overflow");
    }

    #[test]
    fn full_jitter_stays_within_zero_and_the_ceiling() {
        let policy = policy();
        assert_eq!(policy.backoff(3, 0.0), Duration::ZERO);
        assert_eq!(policy.backoff(3, 0.5), Duration::from_millis(400));
        assert!(policy.backoff(3, 0.999_999) < Duration::from_millis(800));
        assert_eq!(policy.backoff(3, 7.0), Duration::from_millis(800), "a unit out of range is clamped");
        let mut rng = fastrand::Rng::with_seed(7);
        let waits: Vec<Duration> = (0..1000).map(|_| policy.backoff(2, rng.f64())).collect();
        assert!(waits.iter().all(|wait| *wait < Duration::from_millis(400)));
        let mean = waits.iter().sum::<Duration>() / 1000;
        assert!(mean > Duration::from_millis(170) && mean < Duration::from_millis(230), "uniform: {mean:?}");
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let policy = policy();
        assert_eq!(policy.wait(0, Some(Duration::from_secs(3)), 0.5), Duration::from_secs(3));
        assert_eq!(policy.wait(0, Some(Duration::from_secs(86_400)), 0.5), Duration::from_secs(5));
        assert_eq!(policy.wait(4, None, 0.5), Duration::from_millis(800));
        assert_eq!(policy.wait(4, Some(Duration::ZERO), 0.5), Duration::from_millis(800), "never sooner than backoff");
        assert_eq!(policy.wait(0, Some(Duration::MAX), 1.0), Duration::from_secs(5), "a hostile value, capped");
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_784_000_000);
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(parse_retry_after(&later, now), Some(Duration::from_secs(90)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(parse_retry_after(&past, now), Some(Duration::ZERO), "a past date: no wait");
        let huge = u64::MAX.to_string();
        assert_eq!(parse_retry_after(&huge, now), Some(Duration::from_secs(u64::MAX)), "capped by the policy");
        for junk in ["", "-3", "1.5", "soon", "Wed, 99 Foo 2026 00:00:00 GMT"] {
            assert_eq!(parse_retry_after(junk, now), None, "{junk:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_schedule_stops_at_the_attempts_and_the_deadline() {
        let mut schedule = Schedule::start(policy());
        let mut waits = Vec::new();
        loop {
            schedule.attempt();
            let Some(wait) = schedule.next(None, 1.0) else { break };
            waits.push(wait.as_millis() as u64);
            tokio::time::sleep(wait).await;
        }
        assert_eq!(schedule.attempts(), 6, "the maximum number of attempts");
        assert_eq!(waits, [100, 200, 400, 800, 1600]);

        // The deadline: a Retry-After that would start past it ends here.
        let mut schedule = Schedule::start(policy());
        schedule.attempt();
        assert_eq!(schedule.next(Some(Duration::from_secs(5)), 0.0), Some(Duration::from_secs(5)));
        tokio::time::sleep(Duration::from_secs(6)).await;
        schedule.attempt();
        assert_eq!(schedule.next(Some(Duration::from_secs(4)), 0.0), Some(Duration::from_secs(4)), "ends at 10 s");
        assert_eq!(schedule.next(Some(Duration::from_secs(5)), 0.0), None, "would start at 11 s");
        tokio::time::sleep(Duration::from_secs(4)).await;
        schedule.attempt();
        assert_eq!(schedule.next(None, 0.0), Some(Duration::ZERO), "right at the deadline");
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(schedule.next(None, 0.0), None, "past it");

        // No deadline to speak of, and no cap: no overflow either.
        let mut schedule = Schedule::start(policy().deadline(Duration::MAX).max_retry_after(Duration::MAX));
        schedule.attempt();
        assert_eq!(schedule.next(Some(Duration::MAX), 0.0), Some(Duration::MAX));
    }
}

//! The one JSON line a run prints, read by `scripts/lib/bench.py`.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// What one run measured. Latencies are of every answered request (an
/// answer other than 201 included), in milliseconds; `null` when no request
/// was answered.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The target rate, requests per second.
    pub rate: u64,
    /// Answered requests per second, from the end of the warm-up to the last
    /// answer.
    pub achieved: f64,
    /// Requests the measured part of the schedule called for.
    pub requests: u64,
    /// Of those, the ones not answered 201: another status, a failed or
    /// timed-out exchange, or a request never sent because the run overran.
    pub errors: u64,
    /// The median latency.
    pub p50_ms: Option<f64>,
    /// The 99th percentile.
    pub p99_ms: Option<f64>,
    /// The 99.9th percentile.
    pub p999_ms: Option<f64>,
    /// The highest latency.
    pub max_ms: Option<f64>,
}

impl Report {
    /// The report of a run at `rate` whose answered requests took the
    /// latencies in `micros` (microseconds), over `elapsed`.
    pub fn new(rate: u64, micros: &Histogram<u64>, requests: u64, errors: u64, elapsed: Duration) -> Self {
        let answered = micros.len();
        let ms = |value: u64| (answered > 0).then(|| round(value as f64 / 1000.0, 3));
        let seconds = elapsed.as_secs_f64();
        Report {
            rate,
            achieved: if seconds > 0.0 { round(answered as f64 / seconds, 1) } else { 0.0 },
            requests,
            errors,
            p50_ms: ms(micros.value_at_quantile(0.5)),
            p99_ms: ms(micros.value_at_quantile(0.99)),
            p999_ms: ms(micros.value_at_quantile(0.999)),
            max_ms: ms(micros.max()),
        }
    }

    /// The report as one line of JSON.
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("a report serializes")
    }
}

/// `value` to `places` decimal places.
fn round(value: f64, places: i32) -> f64 {
    let scale = 10f64.powi(places);
    (value * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_with_the_percentiles_in_milliseconds() {
        let mut micros = Histogram::<u64>::new(3).unwrap();
        for value in 1..=1000 {
            micros.record(value).unwrap();
        }
        let report = Report::new(2000, &micros, 1003, 3, Duration::from_millis(500));
        assert_eq!(
            report.to_line(),
            r#"{"rate":2000,"achieved":2000.0,"requests":1003,"errors":3,"p50_ms":0.5,"p99_ms":0.99,"p999_ms":0.999,"max_ms":1.0}"#
        );
    }

    #[test]
    fn no_answer_no_latencies() {
        let micros = Histogram::<u64>::new(3).unwrap();
        let report = Report::new(2000, &micros, 16000, 16000, Duration::ZERO);
        assert_eq!(
            report.to_line(),
            r#"{"rate":2000,"achieved":0.0,"requests":16000,"errors":16000,"p50_ms":null,"p99_ms":null,"p999_ms":null,"max_ms":null}"#
        );
    }
}

//! When each request is meant to leave, and from when its latency counts.
//!
//! The schedule is open: request `n` of the run (numbered across all
//! connections) is meant to leave `n / rate` seconds after the start,
//! whatever became of the requests before it. Connection `c` of `C` takes
//! requests `c`, `c + C`, `c + 2C`, ...: each connection sends at
//! `rate / C`, on a schedule offset by `c / rate` from the others', so that
//! together their sends are evenly spaced. Integer arithmetic keeps request
//! `n` at exactly `n / rate` however long the run.
//!
//! A closed-loop tool (wrk) sends a connection's next request when the last
//! answer arrives, so a stall of the server delays the requests it should
//! have been charged for, and they go unmeasured: coordinated omission. Here
//! a request's latency counts from its intended time whenever its connection
//! was still busy at that time, so a stall is charged to every request it
//! holds up, as wrk2 does. When the connection was free, it counts from the
//! moment the request actually left: the generator's timer wakes up to 1 ms
//! after the intended time, and that delay is the generator's, not the
//! server's.

use std::time::Duration;

use tokio::time::Instant;

/// The requests of one run: how many, at what rate, the first ones a
/// warm-up that is not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Requests per second, all connections together.
    rate: u64,
    /// Connections sharing the schedule.
    connections: u64,
    /// Requests sent before the measured ones: the warm-up.
    warmup: u64,
    /// Requests in the run, the warm-up's included.
    total: u64,
}

impl Schedule {
    /// `rate` requests per second over `connections`, `warmup` seconds not
    /// recorded, then `seconds` recorded. `rate` and `connections` are at
    /// least 1.
    pub fn new(rate: u64, connections: u64, warmup: u64, seconds: u64) -> Self {
        assert!(rate > 0 && connections > 0, "a schedule needs a rate and a connection");
        Schedule { rate, connections, warmup: rate * warmup, total: rate * (warmup + seconds) }
    }

    /// The numbers of the requests connection `connection` sends, in order.
    pub fn requests(&self, connection: u64) -> impl Iterator<Item = u64> + use<> {
        (connection..self.total).step_by(self.connections as usize)
    }

    /// When request `n` is meant to leave, after the start.
    pub fn offset(&self, n: u64) -> Duration {
        let nanos = u128::from(n) * 1_000_000_000 / u128::from(self.rate);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// Whether request `n` is recorded (it is past the warm-up).
    pub fn is_measured(&self, n: u64) -> bool {
        n >= self.warmup
    }

    /// When the recorded requests begin, after the start.
    pub fn measured_from(&self) -> Duration {
        self.offset(self.warmup)
    }

    /// When the last request is meant to leave, after the start.
    pub fn last_offset(&self) -> Duration {
        self.offset(self.total.saturating_sub(1))
    }
}

/// From when a request's latency counts: its `intended` send time if its
/// connection was busy until after it (`free_at`: the end of the previous
/// exchange, or of the connection's set-up), else the moment it was `sent`.
pub fn latency_start(intended: Instant, sent: Instant, free_at: Instant) -> Instant {
    if free_at > intended { intended } else { sent }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_together_send_evenly_spaced() {
        let schedule = Schedule::new(1000, 4, 0, 1);
        let mut offsets: Vec<Duration> =
            (0..4).flat_map(|c| schedule.requests(c)).map(|n| schedule.offset(n)).collect();
        offsets.sort();
        assert_eq!(offsets.len(), 1000);
        for (n, offset) in offsets.iter().enumerate() {
            assert_eq!(*offset, Duration::from_millis(n as u64));
        }
    }

    #[test]
    fn each_connection_sends_at_its_share_of_the_rate() {
        let schedule = Schedule::new(2000, 16, 1, 8);
        let sends: Vec<Duration> = schedule.requests(3).map(|n| schedule.offset(n)).collect();
        assert_eq!(sends.len(), 2000 * 9 / 16);
        assert_eq!(sends[0], Duration::from_micros(1500));
        assert!(sends.windows(2).all(|pair| pair[1] - pair[0] == Duration::from_millis(8)));
    }

    #[test]
    fn the_warm_up_is_not_measured() {
        let schedule = Schedule::new(3, 2, 1, 2);
        let measured: Vec<u64> =
            (0..2).flat_map(|c| schedule.requests(c)).filter(|&n| schedule.is_measured(n)).collect();
        assert_eq!(measured.len(), 6);
        assert_eq!(schedule.measured_from(), Duration::from_secs(1));
        assert_eq!(schedule.last_offset(), Duration::from_nanos(8 * 1_000_000_000 / 3));
    }

    #[test]
    fn a_stall_is_charged_from_the_intended_time() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        // The previous answer came 40 ms late: the request left late because of the server.
        assert_eq!(latency_start(at(10), at(50), at(50)), at(10));
        // The connection was free: the timer's delay is the generator's own.
        assert_eq!(latency_start(at(10), at(11), at(5)), at(11));
    }
}

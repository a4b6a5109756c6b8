//! The Lua scripts behind each store operation, and their arguments.
//!
//! Every script touches exactly one key, the record, so it runs unchanged on
//! Redis Cluster. All time is the Redis server's: a record's TTL is its
//! key's expiry (`PX`, `PEXPIRE`, read back with `PTTL`), so a record past
//! its TTL is simply a missing key, and a lease is a mark in the record
//! that the key's `PTTL` is compared with (see `layout.rs`). No script reads
//! a clock as a number.

use std::time::Duration;

use redis::Script;

/// Source of each script, in the order of [`Scripts::all`].
const SOURCES: [&str; 5] = [
    include_str!("claim.lua"),
    include_str!("renew.lua"),
    include_str!("complete.lua"),
    include_str!("release.lua"),
    include_str!("get.lua"),
];

/// Longest expiry handed to Redis (about 2,200 years): Redis refuses expiry
/// times that overflow when added to its clock.
const MAX_EXPIRE_MS: u64 = 1 << 46;

/// The store's scripts; `redis::Script` sends them with `EVALSHA` and falls
/// back to loading them when the server answers `NOSCRIPT` (after a restart
/// or a `SCRIPT FLUSH`).
#[derive(Debug)]
pub(super) struct Scripts {
    pub(super) claim: Script,
    pub(super) renew: Script,
    pub(super) complete: Script,
    pub(super) release: Script,
    pub(super) get: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        let [claim, renew, complete, release, get] = SOURCES.map(Script::new);
        Self { claim, renew, complete, release, get }
    }

    /// Each script with its source, for `SCRIPT LOAD`.
    pub(super) fn all(&self) -> [(&Script, &'static str); 5] {
        let [claim, renew, complete, release, get] = SOURCES;
        [
            (&self.claim, claim),
            (&self.renew, renew),
            (&self.complete, complete),
            (&self.release, release),
            (&self.get, get),
        ]
    }
}

/// A lease or TTL as the milliseconds argument of the scripts: rounded up,
/// at least 1 (`PEXPIRE 0` would delete the record at once) and capped, so
/// that a lease end in milliseconds since 1970 stays an exact Lua number.
pub(super) fn millis(duration: Duration) -> u64 {
    let ms = duration.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX).clamp(1, MAX_EXPIRE_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_up_to_whole_milliseconds() {
        assert_eq!(millis(Duration::ZERO), 1);
        assert_eq!(millis(Duration::from_nanos(1)), 1);
        assert_eq!(millis(Duration::from_micros(1_500)), 2);
        assert_eq!(millis(Duration::from_millis(300)), 300);
        assert_eq!(millis(Duration::from_secs(86_400)), 86_400_000);
        assert_eq!(millis(Duration::MAX), MAX_EXPIRE_MS);
    }

    #[test]
    fn every_script_touches_only_its_one_key() {
        let scripts = Scripts::new();
        for (script, source) in scripts.all() {
            assert_eq!(script.get_hash().len(), 40);
            // Cluster safety: no script names a key other than KEYS[1].
            assert!(!source.contains("KEYS[2]"), "{source}");
            for call in ["'KEYS'", "'SCAN'"] {
                assert!(!source.contains(call), "{source} calls {call}");
            }
        }
    }

    #[test]
    fn every_script_reading_a_lease_uses_the_server_clock() {
        for (_, source) in Scripts::new().all() {
            // Each script reads the record; a lease is judged by the key's
            // expiry on the server (its mark against PTTL), never by a time
            // sent by the application or read from another clock (claim.lua
            // reads the server's TIME for a record of the earlier layout
            // only). Completions and releases are fenced by the token alone.
            assert!(source.contains("('GET', KEYS[1])"), "{source}");
            if source.contains("string.sub(record, 51)") {
                assert!(source.contains("redis.call('PTTL', KEYS[1])"), "{source}");
            }
            assert!(!source.contains("os."), "{source} reads a clock other than the server's");
            assert_eq!(source.contains("'TIME'"), source.contains("earlier layout"), "{source}");
        }
    }
}

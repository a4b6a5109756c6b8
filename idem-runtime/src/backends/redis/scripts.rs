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

/// How every script reads and writes a record: put at the start of each.
const LAYOUT: &str = include_str!("layout.lua");

/// Source of each script, in the order of [`Scripts::all`], before
/// [`LAYOUT`] is put in.
const SOURCES: [&str; 7] = [
    include_str!("claim.lua"),
    include_str!("renew.lua"),
    include_str!("complete.lua"),
    include_str!("release.lua"),
    include_str!("get.lua"),
    include_str!("step.lua"),
    include_str!("settle.lua"),
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
    pub(super) step: Script,
    pub(super) settle: Script,
    /// Each script's whole source, as loaded.
    sources: [String; 7],
}

impl Scripts {
    pub(super) fn new() -> Self {
        let sources = SOURCES.map(|source| with_layout(&planted(source)));
        let [claim, renew, complete, release, get, step, settle] = sources.each_ref().map(|source| Script::new(source));
        Self { claim, renew, complete, release, get, step, settle, sources }
    }

    /// Each script with its source, for `SCRIPT LOAD`.
    pub(super) fn all(&self) -> [(&Script, &str); 7] {
        let [claim, renew, complete, release, get, step, settle] = self.sources.each_ref().map(String::as_str);
        [
            (&self.claim, claim),
            (&self.renew, renew),
            (&self.complete, complete),
            (&self.release, release),
            (&self.get, get),
            (&self.step, step),
            (&self.settle, settle),
        ]
    }
}

/// The bugs `scripts/campaign --mutant NAME` can plant, to show that the
/// campaign finds them: (NAME, the first words of the script, the line
/// planted over, the bug). A mutant is built with
/// `RUSTFLAGS='--cfg idem_mutant="NAME"'`, never by a cargo feature, so
/// that no build of the workspace can have one.
///
/// - `hold-ignored`: a claim takes over a lapsed execution on a route whose
///   lapse policy is `hold`;
/// - `unfenced-completion`: a completion stores its response without
///   checking that the record holds its token.
const MUTANTS: [(&str, &str, &str, &str); 2] = [
    ("hold-ignored", "-- Claims one", "if ARGV[5] == 'hold' then", "if false then"),
    (
        "unfenced-completion",
        "#!lua flags=allow-oom\n-- Stores the response",
        "local fenced = string.sub(value, 34, 49) == ARGV[1]",
        "local fenced = true",
    ),
];

/// The mutant this build plants, if any.
#[cfg(idem_mutant = "hold-ignored")]
const PLANTED: Option<&str> = Some("hold-ignored");
/// The mutant this build plants, if any.
#[cfg(idem_mutant = "unfenced-completion")]
const PLANTED: Option<&str> = Some("unfenced-completion");
/// The mutant this build plants, if any.
#[cfg(not(any(idem_mutant = "hold-ignored", idem_mutant = "unfenced-completion")))]
const PLANTED: Option<&str> = None;

/// `source`, with the bug of [`PLANTED`] if it is this script's.
fn planted(source: &'static str) -> std::borrow::Cow<'static, str> {
    for (name, script, line, bug) in MUTANTS {
        if PLANTED == Some(name) && source.starts_with(script) {
            assert!(source.contains(line), "the line of mutant {name} is no longer in its script");
            return source.replacen(line, bug, 1).into();
        }
    }
    source.into()
}

/// Where a script wants [`LAYOUT`], when not at its start: a script's whole
/// text runs on every call, so one with a common case that needs none of
/// the layout's functions (complete.lua) answers it before they are defined.
const LAYOUT_HERE: &str = "\n-- layout.lua\n";

/// `source` with [`LAYOUT`] put in: at its [`LAYOUT_HERE`] line if it has
/// one, else after its `#!lua` line if it has one (the server reads flags
/// from the first line only), else first.
fn with_layout(source: &str) -> String {
    if let Some((before, after)) = source.split_once(LAYOUT_HERE) {
        return format!("{before}\n{LAYOUT}{after}");
    }
    match source.split_once('\n') {
        Some((shebang, rest)) if shebang.starts_with("#!") => format!("{shebang}\n{LAYOUT}{rest}"),
        _ => format!("{LAYOUT}{source}"),
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
    fn each_mutant_finds_its_line_in_exactly_one_script() {
        for (name, script, line, _) in MUTANTS {
            let scripts: Vec<_> = SOURCES.iter().filter(|source| source.starts_with(script)).collect();
            assert_eq!(scripts.len(), 1, "mutant {name}: one script starts with {script:?}");
            assert_eq!(scripts[0].matches(line).count(), 1, "mutant {name}: its line, once");
        }
        assert_eq!(Scripts::new().sources.map(|s| s.len()), SOURCES.map(|s| with_layout(s).len()), "no mutant here");
    }

    #[test]
    fn the_layout_goes_where_a_script_asks_for_it_on_a_line_of_its_own() {
        let asking: Vec<_> = SOURCES.iter().filter(|source| source.contains(LAYOUT_HERE)).collect();
        assert_eq!(asking.len(), 1, "complete.lua only");
        let complete = with_layout(asking[0]);
        let (before, after) = complete.split_once(LAYOUT).unwrap();
        assert!(before.starts_with("#!lua flags=allow-oom\n"), "flags first");
        assert!(before.contains("local fenced ="), "the common case before the layout");
        assert!(after.contains("read(value)"), "the other cases after it");
        let inline = "#!lua\nlocal x = 1 -- layout.lua\nreturn x\n";
        assert!(with_layout(inline).starts_with(&format!("#!lua\n{LAYOUT}")), "a marker within a line is no marker");
    }

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
            // Cluster safety: every command a script runs names KEYS[1],
            // and nothing else, or no key at all (claim.lua's TIME).
            let calls = source.split("redis.call(").skip(1).chain(source.split("redis.pcall(").skip(1));
            for call in calls {
                let (command, rest) = call.split_once('\'').and_then(|(_, rest)| rest.split_once('\'')).unwrap();
                assert!(rest.starts_with(", KEYS[1]") || command == "TIME", "{command}{rest}");
                assert!(!matches!(command, "KEYS" | "SCAN"), "{source} calls {command}");
            }
            assert!(!source.contains("KEYS[2]"), "{source}");
        }
    }

    #[test]
    fn every_script_reading_a_lease_uses_the_server_clock() {
        for (_, source) in Scripts::new().all() {
            // Each script reads the record; a lease is judged by the key's
            // expiry on the server (its mark against PTTL), never by a time
            // sent by the application or read from another clock (claim.lua
            // reads the server's TIME for a record of the earlier layout
            // only). Completions, releases, steps and settlements are fenced
            // by the token alone. The claim time, the application's, is
            // written and kept, never read as a number.
            assert!(source.contains("('GET', KEYS[1])"), "{source}");
            if source.contains("- record.mark") || source.contains("record.mark +") {
                assert!(source.contains("redis.call('PTTL', KEYS[1])"), "{source}");
            }
            assert!(!source.contains("os."), "{source} reads a clock other than the server's");
            assert_eq!(source.contains("'TIME'"), source.contains("earlier layout"), "{source}");
            assert!(!source.contains("tonumber(ARGV[6])") && !source.contains("tonumber(string.sub(value, 66"));
        }
    }

    #[test]
    fn scripts_keep_their_flags_first() {
        let scripts = Scripts::new();
        for ((_, source), original) in scripts.all().into_iter().zip(SOURCES) {
            assert!(source.contains(LAYOUT) && source.contains(original.lines().last().unwrap()));
            let flags = original.lines().next().filter(|line| line.starts_with("#!"));
            assert_eq!(flags, source.lines().next().filter(|line| line.starts_with("#!")));
        }
        // The writes that running handlers and operators need at
        // maxmemory; a claim or a step (which may be large) is refused.
        let oom = |script: &Script| scripts.all().into_iter().find(|(s, _)| std::ptr::eq(*s, script)).unwrap().1;
        for script in [&scripts.renew, &scripts.complete, &scripts.release, &scripts.settle] {
            assert!(oom(script).starts_with("#!lua flags=allow-oom\n"));
        }
        for script in [&scripts.claim, &scripts.step, &scripts.get] {
            assert!(!oom(script).starts_with("#!"));
        }
    }
}

//! A shard's index of its records' ends, soonest first.
//!
//! Records mostly come in the order they end: a route's claims end at
//! `now + ttl`, one after the other. So the index keeps a few runs, each a
//! queue whose ends only grow: an entry joins the back of the run whose
//! last end is the latest not after its own, and finding, adding and taking
//! the soonest entry touch a few queue ends, whatever the index holds. A
//! binary heap of hundreds of thousands of entries instead walks down about
//! twenty levels, a cache miss each, for every record it frees.
//!
//! An entry whose record's end moved later is put back when it comes up,
//! at that later end: such entries come up in about the order they went
//! in, so they mostly form a run of their own too. Entries that fit no run
//! (more routes' lifetimes than [`MAX_RUNS`], or moved ends far out of
//! order) go to a heap; it only ever holds those.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Instant;

use super::Key;

/// Most runs kept besides the heap.
const MAX_RUNS: usize = 4;

/// Largest emptied run kept for the next run to start in: a sparse shard
/// starts and ends one-entry runs all the time, and the allocation is
/// reused; a larger one is given back.
const SPARE_CAPACITY: usize = 64;

/// Records' ends (see the module's docs).
#[derive(Debug, Default)]
pub(super) struct Deadlines {
    /// Each in order of its ends; never empty.
    runs: Vec<VecDeque<(Instant, Key)>>,
    rest: BinaryHeap<Reverse<(Instant, Key)>>,
    /// An emptied run's allocation (see [`SPARE_CAPACITY`]).
    spare: VecDeque<(Instant, Key)>,
    /// The soonest end held: a look for what is due (every claim's) reads
    /// this, not the fronts of the runs, which went in long ago and have
    /// left the cache.
    next: Option<Instant>,
}

/// Where the soonest entry is.
#[derive(Clone, Copy)]
enum Soonest {
    Run(usize),
    Rest,
}

impl Deadlines {
    /// An index of `entries`, in any order.
    pub(super) fn of(entries: impl Iterator<Item = (Instant, Key)>) -> Self {
        let mut sorted: Vec<(Instant, Key)> = entries.collect();
        sorted.sort_unstable_by_key(|&(at, _)| at);
        let next = sorted.first().map(|&(at, _)| at);
        let runs = if sorted.is_empty() { Vec::new() } else { vec![VecDeque::from(sorted)] };
        Self { runs, rest: BinaryHeap::new(), spare: VecDeque::new(), next }
    }

    /// Entries held.
    pub(super) fn len(&self) -> usize {
        self.runs.iter().map(VecDeque::len).sum::<usize>() + self.rest.len()
    }

    /// Adds `key`'s end `at`.
    pub(super) fn push(&mut self, at: Instant, key: Key) {
        self.next = Some(self.next.map_or(at, |next| next.min(at)));
        // The run whose last end is the latest not after `at`.
        let fit = self
            .runs
            .iter()
            .enumerate()
            .filter_map(|(i, run)| run.back().filter(|(last, _)| *last <= at).map(|(last, _)| (i, *last)))
            .max_by_key(|&(_, last)| last);
        match fit {
            Some((i, _)) => self.runs[i].push_back((at, key)),
            None if self.runs.len() < MAX_RUNS => {
                let mut run = std::mem::take(&mut self.spare);
                run.push_back((at, key));
                self.runs.push(run);
            }
            None => self.rest.push(Reverse((at, key))),
        }
    }

    /// Entries in the heap, and runs (for tests).
    #[cfg(test)]
    pub(super) fn shape(&self) -> (usize, usize) {
        (self.rest.len(), self.runs.len())
    }

    /// The soonest end (for tests).
    #[cfg(test)]
    pub(super) fn peek(&self) -> Option<Instant> {
        self.soonest().map(|(at, _)| at)
    }

    /// Where the soonest entry is, and its end.
    fn soonest(&self) -> Option<(Instant, Soonest)> {
        let runs =
            self.runs.iter().enumerate().filter_map(|(i, run)| run.front().map(|(at, _)| (*at, Soonest::Run(i))));
        let rest = self.rest.peek().map(|Reverse((at, _))| (*at, Soonest::Rest));
        runs.chain(rest).min_by_key(|&(at, _)| at)
    }

    /// Takes the entry with the soonest end, if that end is at or before
    /// `now`.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<(Instant, Key)> {
        if self.next? > now {
            return None;
        }
        let (_, place) = self.soonest()?;
        let entry = match place {
            Soonest::Run(i) => {
                let entry = self.runs[i].pop_front();
                if self.runs[i].is_empty() {
                    let run = self.runs.swap_remove(i);
                    if run.capacity() <= SPARE_CAPACITY {
                        self.spare = run;
                    }
                }
                entry
            }
            Soonest::Rest => self.rest.pop().map(|Reverse(entry)| entry),
        };
        self.next = self.soonest().map(|(at, _)| at);
        entry
    }
}

#[cfg(test)]
#[path = "deadlines_tests.rs"]
mod tests;

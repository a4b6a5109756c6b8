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
//! Entries in no such order (more routes' lifetimes than [`MAX_RUNS`], or
//! records whose end moved, put back as they come up) go to a heap; it only
//! ever holds those.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Instant;

use super::shard::Key;

/// Most runs kept besides the heap.
const MAX_RUNS: usize = 4;

/// Records' ends (see the module's docs).
#[derive(Debug, Default)]
pub(super) struct Deadlines {
    /// Each in order of its ends; never empty.
    runs: Vec<VecDeque<(Instant, Key)>>,
    rest: BinaryHeap<Reverse<(Instant, Key)>>,
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
        let runs = if sorted.is_empty() { Vec::new() } else { vec![VecDeque::from(sorted)] };
        Self { runs, rest: BinaryHeap::new() }
    }

    /// Entries held.
    pub(super) fn len(&self) -> usize {
        self.runs.iter().map(VecDeque::len).sum::<usize>() + self.rest.len()
    }

    /// Adds `key`'s end `at`.
    pub(super) fn push(&mut self, at: Instant, key: Key) {
        // The run whose last end is the latest not after `at`.
        let fit = self
            .runs
            .iter()
            .enumerate()
            .filter_map(|(i, run)| run.back().filter(|(last, _)| *last <= at).map(|(last, _)| (i, *last)))
            .max_by_key(|&(_, last)| last);
        match fit {
            Some((i, _)) => self.runs[i].push_back((at, key)),
            None if self.runs.len() < MAX_RUNS => self.runs.push(VecDeque::from([(at, key)])),
            None => self.rest.push(Reverse((at, key))),
        }
    }

    /// Entries in the heap, and runs (for tests).
    #[cfg(test)]
    pub(super) fn shape(&self) -> (usize, usize) {
        (self.rest.len(), self.runs.len())
    }

    fn soonest(&self) -> Option<(Instant, Soonest)> {
        let runs =
            self.runs.iter().enumerate().filter_map(|(i, run)| run.front().map(|(at, _)| (*at, Soonest::Run(i))));
        let rest = self.rest.peek().map(|Reverse((at, _))| (*at, Soonest::Rest));
        runs.chain(rest).min_by_key(|&(at, _)| at)
    }

    /// The soonest end.
    pub(super) fn peek(&self) -> Option<Instant> {
        self.soonest().map(|(at, _)| at)
    }

    /// Takes the entry with the soonest end.
    pub(super) fn pop(&mut self) -> Option<(Instant, Key)> {
        match self.soonest()?.1 {
            Soonest::Run(i) => {
                let entry = self.runs[i].pop_front();
                if self.runs[i].is_empty() {
                    self.runs.swap_remove(i);
                }
                entry
            }
            Soonest::Rest => self.rest.pop().map(|Reverse(entry)| entry),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn key(n: u8) -> Key {
        [n; 32]
    }

    /// Every entry comes out, soonest first, whatever order they went in.
    #[test]
    fn entries_come_out_soonest_first_in_any_order() {
        let base = Instant::now();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for shape in 0..4 {
            let mut index = Deadlines::default();
            let mut pushed = Vec::new();
            for n in 0..2_000u64 {
                // In order; in order with small inversions; several
                // interleaved orders (routes' lifetimes); at random.
                let millis = match shape {
                    0 => n,
                    1 => n + next() % 5,
                    2 => n + [0, 3_600, 86_400, 60, 7, 5][(n % 6) as usize] * 1_000,
                    _ => next() % 100_000,
                };
                let at = base + Duration::from_millis(millis);
                index.push(at, key((n % 251) as u8));
                pushed.push(at);
                // Some taken out while others go in.
                if n % 7 == 0 {
                    let soonest = *pushed.iter().min().unwrap();
                    assert_eq!(index.peek(), Some(soonest));
                    let (at, _) = index.pop().unwrap();
                    assert_eq!(at, soonest);
                    pushed.remove(pushed.iter().position(|&p| p == at).unwrap());
                }
            }
            assert_eq!(index.len(), pushed.len());
            assert!(index.runs.len() <= MAX_RUNS);
            pushed.sort();
            let mut out = Vec::new();
            while let Some((at, _)) = index.pop() {
                out.push(at);
            }
            assert_eq!(out, pushed, "shape {shape}");
            assert_eq!(index.len(), 0);
            assert_eq!(index.peek(), None);
        }
    }

    /// A route's records, in the order they end, stay in one run: the heap
    /// holds none of them.
    #[test]
    fn records_in_order_use_no_heap() {
        let base = Instant::now();
        let mut index = Deadlines::default();
        for n in 0..1_000u64 {
            index.push(base + Duration::from_millis(n), key(1));
            index.push(base + Duration::from_secs(86_400) + Duration::from_millis(n), key(2));
        }
        assert_eq!(index.runs.len(), 2);
        assert!(index.rest.is_empty());
    }

    #[test]
    fn an_index_built_from_records_is_in_order() {
        let base = Instant::now();
        let entries = [5u64, 1, 3, 2, 4].map(|s| (base + Duration::from_secs(s), key(s as u8)));
        let mut index = Deadlines::of(entries.into_iter());
        let out: Vec<u8> = std::iter::from_fn(|| index.pop()).map(|(_, key)| key[0]).collect();
        assert_eq!(out, [1, 2, 3, 4, 5]);
        assert!(Deadlines::of(std::iter::empty()).runs.is_empty());
    }
}

//! The deadline index against a sorted model, and the shapes it takes.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;

fn key(n: u8) -> Key {
    [n; 32]
}

/// At most [`MAX_RUNS`] runs, none empty, each in order, and the soonest
/// end known.
fn assert_well_formed(index: &Deadlines) {
    assert!(index.runs.len() <= MAX_RUNS);
    assert_eq!(index.next, index.soonest().map(|(at, _)| at), "the soonest end out of date");
    for run in &index.runs {
        assert!(!run.is_empty(), "an empty run kept");
        assert!(run.iter().zip(run.iter().skip(1)).all(|(a, b)| a.0 <= b.0), "a run out of order");
    }
}

/// Takes one `(at, key)` out of the model.
fn take(model: &mut BTreeMap<(Instant, Key), usize>, entry: (Instant, Key)) {
    let count = model.get_mut(&entry).expect("an entry never pushed came out");
    *count -= 1;
    if *count == 0 {
        model.remove(&entry);
    }
}

/// Pushes, takings of what is due (some put back later, as a record whose
/// end moved) and rebuilds, with a clock that moves on, one to six
/// lifetimes, ties, ends out of order and ends about a century ahead:
/// what comes out is always the soonest of what went in, and only once due.
#[test]
fn the_index_gives_the_soonest_due_entry_as_a_sorted_model_does() {
    let base = Instant::now();
    let lifetimes = [1_000u64, 3_000, 60_000, 86_400_000, 5, 0];
    for seed in 1..=40u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut index = Deadlines::default();
        let mut model: BTreeMap<(Instant, Key), usize> = BTreeMap::new();
        let mut clock = 0u64;
        let kinds = 1 + rng.u64(..lifetimes.len() as u64);
        for step in 0..3_000u32 {
            clock += rng.u64(..3);
            let now = base + Duration::from_millis(clock);
            match rng.u64(..100) {
                0..55 => {
                    let life = lifetimes[rng.u64(..kinds) as usize];
                    let at = if rng.u64(..500) == 0 {
                        base + Duration::from_secs(100 * 365 * 86_400)
                    } else {
                        base + Duration::from_millis((clock + life + rng.u64(..4)).saturating_sub(rng.u64(..3)))
                    };
                    let entry = (at, key(rng.u64(..8) as u8));
                    index.push(entry.0, entry.1);
                    *model.entry(entry).or_default() += 1;
                }
                55..97 => {
                    for _ in 0..rng.u64(..6) {
                        let soonest = model.keys().next().map(|&(at, _)| at);
                        assert_eq!(index.peek(), soonest, "seed {seed} step {step}");
                        let Some(entry) = index.pop_due(now) else {
                            assert!(soonest.is_none_or(|at| at > now), "seed {seed} step {step}: a due entry kept");
                            break;
                        };
                        assert!(entry.0 <= now, "seed {seed} step {step}: an entry out before it was due");
                        assert_eq!(Some(entry.0), soonest, "seed {seed} step {step}");
                        take(&mut model, entry);
                        if rng.u64(..3) == 0 {
                            let moved = (now + Duration::from_millis(1 + rng.u64(..50)), entry.1);
                            index.push(moved.0, moved.1);
                            *model.entry(moved).or_default() += 1;
                        }
                    }
                }
                _ => {
                    let entries: Vec<_> = model.iter().flat_map(|(&e, &n)| std::iter::repeat_n(e, n)).collect();
                    index = Deadlines::of(entries.into_iter().rev());
                }
            }
            assert_well_formed(&index);
            assert_eq!(index.len(), model.values().sum::<usize>());
        }
        let end = base + Duration::from_secs(200 * 365 * 86_400);
        let mut last = None;
        while let Some(entry) = index.pop_due(end) {
            assert!(last.is_none_or(|at| at <= entry.0));
            last = Some(entry.0);
            take(&mut model, entry);
            assert_well_formed(&index);
        }
        assert!(model.is_empty());
        assert_eq!(index.len(), 0);
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
    assert_eq!(index.shape(), (0, 2));
}

/// A shard with a record now and then starts and ends a one-entry run
/// for each: the emptied run's allocation is kept for the next.
#[test]
fn an_emptied_small_run_is_reused() {
    let base = Instant::now();
    let mut index = Deadlines::default();
    index.push(base + Duration::from_secs(10), key(1));
    index.push(base + Duration::from_secs(5), key(2));
    assert_eq!(index.pop_due(base + Duration::from_secs(5)).map(|(_, k)| k[0]), Some(2));
    assert!(index.spare.capacity() > 0);
    index.push(base + Duration::from_secs(7), key(3));
    assert_eq!(index.spare.capacity(), 0, "the next run starts in the spare allocation");
    assert_eq!(index.shape(), (0, 2));
}

#[test]
fn an_index_built_from_records_is_in_order() {
    let base = Instant::now();
    let entries = [5u64, 1, 3, 2, 4].map(|s| (base + Duration::from_secs(s), key(s as u8)));
    let mut index = Deadlines::of(entries.into_iter());
    assert_well_formed(&index);
    assert_eq!(index.pop_due(base + Duration::from_secs(3)).map(|(_, k)| k[0]), Some(1));
    let out: Vec<u8> = std::iter::from_fn(|| index.pop_due(base + Duration::from_secs(3))).map(|(_, k)| k[0]).collect();
    assert_eq!(out, [2, 3], "only what is due");
    assert_eq!(index.peek(), Some(base + Duration::from_secs(4)));
    assert_eq!(Deadlines::of(std::iter::empty()).shape(), (0, 0));
}

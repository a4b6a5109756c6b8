//! Driving a real store through a sequence, next to the reference, and
//! comparing every answer.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use super::super::cases::fresh_key;
use super::ops::{Op, Request, SHORT_LEASE, SHORT_TTL, Token, millis, response, step};
use super::reference::{Answer, Choices, Events, MARGIN, Reference};
use crate::store::{Claim, ClaimTerms, Fence, Record, RecordState, Renewal, StorageKey, Store, StoreError};

/// What a store answered to one operation.
#[derive(Debug)]
pub enum Got {
    /// A claim's answer.
    Claim(Claim),
    /// A fenced operation's answer.
    Fence(Fence),
    /// One fence per renewal.
    Fences(Vec<Fence>),
    /// What `get` found.
    Record(Option<Record>),
}

/// Why a sequence stopped.
#[derive(Debug)]
pub enum Stop {
    /// A store's answer is not the reference's, all operations sent on time.
    Differs(String),
    /// An answer differed, but an operation was sent later than the margin
    /// allows (a stalled machine): no conclusion.
    Inconclusive(String),
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::Differs(why) | Stop::Inconclusive(why) => f.write_str(why),
        }
    }
}

/// A store's runs, shared by its lanes: what they count.
#[derive(Debug, Default)]
pub struct Totals {
    /// Sequences that ran to their end.
    pub sequences: AtomicU64,
    /// Operations sent in them.
    pub sent: AtomicU64,
    /// Sequences stopped as inconclusive.
    pub inconclusive: AtomicU64,
    /// The latest any operation was sent after its time, in microseconds.
    pub latest_us: AtomicU64,
    /// [`Events::lapses`].
    pub lapses: AtomicU64,
    /// [`Events::graces`].
    pub graces: AtomicU64,
    /// [`Events::takeovers`].
    pub takeovers: AtomicU64,
    /// [`Events::holds`].
    pub holds: AtomicU64,
    /// [`Events::expiries`].
    pub expiries: AtomicU64,
    /// [`Events::after_releases`].
    pub after_releases: AtomicU64,
    /// [`Events::replays`].
    pub replays: AtomicU64,
}

impl Totals {
    fn add(&self, events: Events, sent: u64) {
        let add = |counter: &AtomicU64, n: u64| counter.fetch_add(n, Ordering::Relaxed);
        add(&self.sequences, 1);
        add(&self.sent, sent);
        add(&self.lapses, events.lapses);
        add(&self.graces, events.graces);
        add(&self.takeovers, events.takeovers);
        add(&self.holds, events.holds);
        add(&self.expiries, events.expiries);
        add(&self.after_releases, events.after_releases);
        add(&self.replays, events.replays);
    }
}

impl fmt::Display for Totals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        write!(
            f,
            "{} sequences ({} inconclusive), {} operations; {} lapses, {} graces, {} takeovers, {} holds, \
             {} expiries, {} claims after a release, {} replays; latest operation {} ms after its time",
            n(&self.sequences),
            n(&self.inconclusive),
            n(&self.sent),
            n(&self.lapses),
            n(&self.graces),
            n(&self.takeovers),
            n(&self.holds),
            n(&self.expiries),
            n(&self.after_releases),
            n(&self.replays),
            n(&self.latest_us) / 1000,
        )
    }
}

/// Runs `ops` over `keys` fresh keys of `store`, comparing each answer
/// with the reference's for a store that made `choices`; `seen` counts
/// the operations reached (for the shrinker: those after a failure are
/// dropped first).
pub async fn run(
    (store, choices): (&dyn Store, Choices),
    keys: usize,
    ops: &[Op],
    seen: Option<&AtomicUsize>,
    totals: &Totals,
) -> Result<(), Stop> {
    let storage_keys: Vec<StorageKey> = (0..keys).map(|_| fresh_key()).collect();
    let mut reference = Reference::new(keys, choices);
    let (started, wall) = (Instant::now(), SystemTime::now());
    // How late (after its model time) an operation was answered, at most:
    // the store's clock ran this much ahead of the model's, at worst.
    let mut late = Duration::ZERO;
    let mut sent = 0;
    for (i, op) in ops.iter().enumerate() {
        if let Some(seen) = seen {
            seen.fetch_add(1, Ordering::SeqCst);
        }
        let expected = reference.apply(op);
        if !op.is_sent() {
            tokio::time::sleep_until((started + reference.now()).into()).await;
            continue;
        }
        let got = send(store, &storage_keys, op).await;
        late = late.max(started.elapsed().saturating_sub(reference.now()));
        sent += 1;
        let got = got.map_err(|error| Stop::Differs(format!("operation {i}, {op:?}: the store failed: {error}")))?;
        if let Err(why) = agree(&expected, &got, late, wall) {
            let why = format!(
                "operation {i}, {op:?}, at {:?} (sent up to {late:?} late):\n  the reference answers {expected:?}\n  \
                 the store answered {got:?}\n  {why}",
                reference.now()
            );
            totals.latest_us.fetch_max(late.as_micros() as u64, Ordering::Relaxed);
            return Err(if late >= MARGIN - SLACK { Stop::Inconclusive(why) } else { Stop::Differs(why) });
        }
    }
    totals.latest_us.fetch_max(late.as_micros() as u64, Ordering::Relaxed);
    totals.add(reference.events(), sent);
    Ok(())
}

/// One of each operation on a fresh key, so that a store opens its
/// connections and makes its first-call checks before anything is timed.
pub async fn warm_up(store: &dyn Store) -> Result<(), StoreError> {
    let key = fresh_key();
    let token = Token(1).fencing();
    let terms = ClaimTerms::new(millis(SHORT_LEASE), millis(SHORT_TTL));
    let _ = store.claim_with(&key, &Request::A.fingerprint(), token, &terms).await?;
    let _ = store.renew_many(&[Renewal { key: key.clone(), token, lease: terms.lease }]).await?;
    let _ = store.record_step(&key, token, &step("warm-up", 0)).await?;
    store.get(&key).await?;
    let _ = store.release(&key, token).await?;
    Ok(())
}

/// Clock granularity and rounding allowed on top of lateness (Redis
/// counts milliseconds).
const SLACK: Duration = Duration::from_millis(5);

/// Sends `op` to `store`.
async fn send(store: &dyn Store, keys: &[StorageKey], op: &Op) -> Result<Got, StoreError> {
    Ok(match *op {
        Op::Claim { key, request, token, .. } => {
            let terms = op.terms().expect("a claim has terms");
            Got::Claim(store.claim_with(&keys[key], &request.fingerprint(), token.fencing(), &terms).await?)
        }
        Op::RecordStep { key, token, name, result } => {
            Got::Fence(store.record_step(&keys[key], token.fencing(), &step(name, result)).await?)
        }
        Op::Renew { key, token, lease } => Got::Fence(store.renew(&keys[key], token.fencing(), millis(lease)).await?),
        Op::RenewMany(ref renewals) => {
            let renewals: Vec<Renewal> = renewals
                .iter()
                .map(|&(key, token, lease)| Renewal {
                    key: keys[key].clone(),
                    token: token.fencing(),
                    lease: millis(lease),
                })
                .collect();
            Got::Fences(store.renew_many(&renewals).await?)
        }
        Op::Complete { key, token, response: n, ttl } => {
            Got::Fence(store.complete(&keys[key], token.fencing(), &response(n), millis(ttl)).await?)
        }
        Op::Release { key, token } => Got::Fence(store.release(&keys[key], token.fencing()).await?),
        Op::Get { key } => Got::Record(store.get(&keys[key]).await?),
        Op::Wait(_) => unreachable!("a wait is not sent"),
    })
}

/// Whether `got` is what the reference answered, durations within `late`
/// (and [`SLACK`]); `wall` is when the sequence began, by the system clock.
fn agree(expected: &Answer, got: &Got, late: Duration, wall: SystemTime) -> Result<(), String> {
    let tolerance = late + SLACK;
    let close = |what: &str, model: Duration, store: Duration| {
        let off = model.abs_diff(store);
        if off <= tolerance { Ok(()) } else { Err(format!("{what}: {store:?}, not {model:?} (±{tolerance:?})")) }
    };
    match (expected, got) {
        (Answer::Claim(Claim::InFlight { retry_after: model }), Got::Claim(Claim::InFlight { retry_after })) => {
            close("retry_after", *model, *retry_after)
        }
        (Answer::Claim(model), Got::Claim(claim)) if model == claim => Ok(()),
        (Answer::Fence(model), Got::Fence(fence)) if model == fence => Ok(()),
        (Answer::HeldOrLost, Got::Fence(Fence::Held | Fence::Lost)) => Ok(()),
        (Answer::Fences(model), Got::Fences(fences)) if model == fences => Ok(()),
        (Answer::Record(None), Got::Record(None)) => Ok(()),
        (Answer::Record(Some((model, claimed))), Got::Record(Some(record))) => {
            let (mut model_rest, mut rest) = (model.clone(), record.clone());
            rest.claimed_at = None;
            zero_durations(&mut model_rest.state);
            zero_durations(&mut rest.state);
            if model_rest != rest {
                return Err("the records differ".into());
            }
            for ((what, model), (_, store)) in durations(&model.state).into_iter().zip(durations(&record.state)) {
                close(what, model, store)?;
            }
            // Sent at its time, or up to `late` after it; Redis keeps
            // milliseconds.
            let at = record.claimed_at.ok_or("no claim time")?.duration_since(wall).unwrap_or_default();
            if at + SLACK < *claimed || at > *claimed + tolerance {
                return Err(format!("claimed_at: {at:?} after the sequence began, not {claimed:?} (+{tolerance:?})"));
            }
            Ok(())
        }
        _ => Err("the answers differ".into()),
    }
}

/// `state` with its durations zeroed, to compare the rest.
fn zero_durations(state: &mut RecordState) {
    match state {
        RecordState::InFlight { lease_left, ttl_left, .. } => {
            (*lease_left, *ttl_left) = (Duration::ZERO, Duration::ZERO)
        }
        RecordState::Held { ttl_left, .. }
        | RecordState::Released { ttl_left }
        | RecordState::Completed { ttl_left, .. } => *ttl_left = Duration::ZERO,
    }
}

/// The durations of `state`, named.
fn durations(state: &RecordState) -> Vec<(&'static str, Duration)> {
    match *state {
        RecordState::InFlight { lease_left, ttl_left, .. } => vec![("lease_left", lease_left), ("ttl_left", ttl_left)],
        RecordState::Held { ttl_left, .. }
        | RecordState::Released { ttl_left }
        | RecordState::Completed { ttl_left, .. } => vec![("ttl_left", ttl_left)],
    }
}

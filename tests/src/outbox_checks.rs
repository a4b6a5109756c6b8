//! The outbox's transports (§10) on any backend: every published event is
//! delivered; a delivery is hidden from the other receivers for its
//! visibility timeout; one not acknowledged comes back after it, to
//! whichever receiver asks; an acknowledged one never does.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::{Duration, Instant};

use idem_runtime::outbox::{Event, Message, Transport};

use crate::http::fresh_key;

/// The visibility timeout the transports under test must be built with.
pub const VISIBILITY: Duration = Duration::from_secs(3);

/// How many events the check publishes.
const EVENTS: usize = 24;

/// Publishes events through `publish`, receives them with two receivers of
/// one outbox (`first`, `second`, built with [`VISIBILITY`]), acknowledges
/// all but every fourth, and checks that exactly those come back after the
/// visibility timeout, and that nothing is left after they are
/// acknowledged. Messages of other runs (a shared table) are ignored.
pub async fn assert_transport<P, F>(first: &dyn Transport, second: &dyn Transport, publish: P)
where
    P: Fn(Event) -> F,
    F: Future<Output = ()>,
{
    let run = fresh_key();
    let ids: Vec<String> = (0..EVENTS).map(|n| format!("check-{run}-{n}")).collect();
    for (n, id) in ids.iter().enumerate() {
        publish(Event::new(id.clone(), "check.published", format!("{{\"n\":{n}}}"))).await;
    }

    // Both receivers at once until every event arrived: none twice.
    let mut seen = BTreeMap::<String, Message>::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.len() < EVENTS {
        assert!(Instant::now() < deadline, "only {} of {EVENTS} events delivered", seen.len());
        let (a, b) = tokio::join!(first.receive(5), second.receive(5));
        for message in a.expect("receiving").into_iter().chain(b.expect("receiving")) {
            if !message.id.starts_with(&format!("check-{run}-")) {
                continue;
            }
            assert!(!message.redelivered, "a first delivery: {message:?}");
            assert_eq!(message.topic, "check.published");
            let previous = seen.insert(message.id.clone(), message);
            assert!(previous.is_none(), "delivered twice within its visibility: {previous:?}");
        }
    }
    let left: BTreeSet<String> = ids.iter().step_by(4).cloned().collect();
    for (id, message) in &seen {
        if !left.contains(id) {
            first.ack(message).await.expect("acknowledging");
        }
    }
    let acked_at = Instant::now();

    // Hidden while the visibility lasts; then exactly the unacknowledged
    // ones come back, marked as redelivered, to either receiver.
    let early = ours(first.receive(EVENTS).await.expect("receiving"), &run);
    if acked_at.elapsed() < VISIBILITY - Duration::from_millis(500) {
        assert!(early.is_empty(), "redelivered before the visibility lapsed: {early:?}");
    }
    let mut back = BTreeMap::<String, Message>::new();
    let deadline = Instant::now() + VISIBILITY + Duration::from_secs(15);
    while back.len() < left.len() {
        assert!(Instant::now() < deadline, "only {:?} of {left:?} came back", back.keys());
        for message in ours(second.receive(EVENTS).await.expect("receiving"), &run) {
            assert!(left.contains(&message.id), "an acknowledged event came back: {message:?}");
            assert!(message.redelivered, "{message:?}");
            back.insert(message.id.clone(), message);
        }
    }
    for message in back.values() {
        second.ack(message).await.expect("acknowledging");
    }
    tokio::time::sleep(VISIBILITY + Duration::from_millis(200)).await;
    let after = ours(first.receive(EVENTS).await.expect("receiving"), &run);
    assert!(after.is_empty(), "nothing comes back once acknowledged: {after:?}");
}

fn ours(messages: Vec<Message>, run: &str) -> Vec<Message> {
    messages.into_iter().filter(|message| message.id.starts_with(&format!("check-{run}-"))).collect()
}

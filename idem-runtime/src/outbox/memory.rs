//! The outbox of a single process: events published and received in
//! memory, with the same visibility timeout as the other transports.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{DEFAULT_VISIBILITY, Event, Message, RECEIVE_WAIT, Receipt, Transport};
use crate::store::StoreError;

/// An outbox in this process, for services on the memory store: publish an
/// event in the same critical section as the write that causes it, and
/// receive it here. Events live as long as the process. Clones share the
/// events.
#[derive(Debug, Clone)]
pub struct MemoryOutbox {
    shared: Arc<Shared>,
    visibility: Duration,
}

#[derive(Debug, Default)]
struct Shared {
    events: Mutex<Events>,
    published: Notify,
}

#[derive(Debug, Default)]
struct Events {
    next: i64,
    /// Unacknowledged events by sequence number, oldest first.
    pending: BTreeMap<i64, Pending>,
}

#[derive(Debug)]
struct Pending {
    event: Event,
    /// When it may be delivered (again).
    visible_at: Instant,
    delivered: bool,
}

impl Default for MemoryOutbox {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryOutbox {
    /// An empty outbox with the [default visibility timeout](DEFAULT_VISIBILITY).
    pub fn new() -> Self {
        Self { shared: Arc::default(), visibility: DEFAULT_VISIBILITY }
    }

    /// How long a received message stays hidden unless acknowledged.
    pub fn visibility(mut self, visibility: Duration) -> Self {
        self.visibility = visibility;
        self
    }

    /// Publishes `event`; a waiting receiver wakes up.
    pub fn publish(&self, event: Event) {
        let mut events = self.shared.events.lock();
        let sequence = events.next;
        events.next += 1;
        events.pending.insert(sequence, Pending { event, visible_at: Instant::now(), delivered: false });
        drop(events);
        self.shared.published.notify_waiters();
    }

    /// Takes up to `max` visible events, hiding them; or, if there is none,
    /// the instant the next one becomes visible.
    fn take(&self, max: usize) -> Result<Vec<Message>, Option<Instant>> {
        let now = Instant::now();
        let mut events = self.shared.events.lock();
        let mut taken = Vec::new();
        let mut next = None::<Instant>;
        for (&sequence, pending) in &mut events.pending {
            if taken.len() == max {
                break;
            }
            if pending.visible_at > now {
                next = Some(next.map_or(pending.visible_at, |next| next.min(pending.visible_at)));
                continue;
            }
            taken.push(Message {
                id: pending.event.id.clone(),
                topic: pending.event.topic.clone(),
                payload: pending.event.payload.clone(),
                redelivered: pending.delivered,
                receipt: Receipt::Sequence(sequence),
            });
            pending.delivered = true;
            pending.visible_at = now + self.visibility;
        }
        if taken.is_empty() { Err(next) } else { Ok(taken) }
    }
}

#[async_trait]
impl Transport for MemoryOutbox {
    async fn receive(&self, max: usize) -> Result<Vec<Message>, StoreError> {
        let deadline = Instant::now() + RECEIVE_WAIT;
        loop {
            // Registered before looking, so that a publish in between wakes it.
            let published = self.shared.published.notified();
            let next = match self.take(max.max(1)) {
                Ok(messages) => return Ok(messages),
                Err(next) => next.map_or(deadline, |next| next.min(deadline)),
            };
            if Instant::now() >= deadline {
                return Ok(Vec::new());
            }
            let _ = tokio::time::timeout_at(next, published).await;
        }
    }

    async fn ack(&self, message: &Message) -> Result<(), StoreError> {
        if let Receipt::Sequence(sequence) = message.receipt {
            self.shared.events.lock().pending.remove(&sequence);
        }
        Ok(())
    }

    async fn backlog(&self) -> Result<u64, StoreError> {
        Ok(self.shared.events.lock().pending.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: u32) -> Event {
        Event::new(format!("e{n}"), "test", format!("{{\"n\":{n}}}"))
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_not_acknowledged_comes_back_after_its_visibility_timeout() {
        let outbox = MemoryOutbox::new().visibility(Duration::from_secs(5));
        outbox.publish(event(1));
        outbox.publish(event(2));
        let first = outbox.receive(10).await.unwrap();
        assert_eq!(first.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["e1", "e2"]);
        assert!(first.iter().all(|m| !m.redelivered));
        outbox.ack(&first[0]).await.unwrap();
        // Hidden while its visibility runs: nothing within the receive wait.
        assert!(outbox.receive(10).await.unwrap().is_empty());
        tokio::time::advance(Duration::from_secs(5)).await;
        let again = outbox.receive(10).await.unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!((again[0].id.as_str(), again[0].redelivered), ("e2", true));
        outbox.ack(&again[0]).await.unwrap();
        assert_eq!(outbox.backlog().await.unwrap(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_receiver_wakes_up_for_a_publish() {
        let outbox = MemoryOutbox::new();
        let receiver = outbox.clone();
        let received = tokio::spawn(async move { receiver.receive(1).await.unwrap() });
        tokio::time::sleep(Duration::from_millis(300)).await;
        outbox.publish(event(7));
        let received = received.await.unwrap();
        assert_eq!(received.len(), 1, "woken before the wait ended");
        assert_eq!(received[0].payload, "{\"n\":7}");
    }
}

//! The consumer loop: receive events from the outbox's transport, notify
//! each order once through the inbox, acknowledge.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::inbox::{Delivery, Inbox, InboxError, MessageContext};
use idem_runtime::outbox::{Message, Transport};
use sqlx::PgConnection;

use crate::event::{ORDER_CREATED, OrderCreated};
use crate::outlet::{Outlet, OutletError};

/// The inbox's consumer name: the ids it records are this consumer's.
pub const CONSUMER: &str = "order-notifier";

/// How many messages one receive asks for.
const BATCH: usize = 32;

/// The label of the derived key each notification is sent under.
const NOTIFICATION: &str = "notification";

/// How long a shutdown waits for a notification being sent.
const DRAIN: Duration = Duration::from_secs(10);

/// A notifier: the transport it receives from, its inbox, its outlet.
pub struct Consumer {
    transport: Arc<dyn Transport>,
    inbox: Inbox,
    outlet: Outlet,
    redeliver_rate: f64,
    crash_after_send: bool,
    crash_before_ack: bool,
}

/// What to do with a message once handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Ack,
    /// Leave it unacknowledged: the transport delivers it again after its
    /// visibility timeout.
    Leave,
}

impl Consumer {
    /// A notifier reading `transport`, deduplicating through `inbox`,
    /// sending to `outlet`.
    pub fn new(transport: Arc<dyn Transport>, inbox: Inbox, outlet: Outlet) -> Self {
        Self { transport, inbox, outlet, redeliver_rate: 0.0, crash_after_send: false, crash_before_ack: false }
    }

    /// The fraction of messages (0 to 1) left unacknowledged on purpose,
    /// after they are handled, so that the transport delivers them again.
    pub fn redeliver_rate(mut self, rate: f64) -> Self {
        self.redeliver_rate = rate.clamp(0.0, 1.0);
        self
    }

    /// Fault injection, for tests: abort the process right after the first
    /// notification is sent, before the inbox records it.
    pub fn crash_after_send(mut self, crash: bool) -> Self {
        self.crash_after_send = crash;
        self
    }

    /// Fault injection, for tests: abort the process once the first
    /// notification is sent and recorded, before its message is
    /// acknowledged.
    pub fn crash_before_ack(mut self, crash: bool) -> Self {
        self.crash_before_ack = crash;
        self
    }

    /// Receives and handles messages until `stop` completes, then waits for
    /// the notification being sent (at most 10 s).
    pub async fn run(&self, stop: impl Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        loop {
            let received = tokio::select! {
                () = &mut stop => break,
                received = self.transport.receive(BATCH) => received,
            };
            match received {
                Ok(messages) => {
                    for message in &messages {
                        // A stop between two messages leaves the rest to
                        // be delivered again.
                        if futures_util::FutureExt::now_or_never(&mut stop).is_some() {
                            return self.drain().await;
                        }
                        self.handle(message).await;
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "receiving events failed; trying again in a second");
                    tokio::select! {
                        () = &mut stop => break,
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
        }
        self.drain().await;
    }

    async fn drain(&self) {
        let drained = self.inbox.drain(DRAIN).await;
        tracing::info!(still_running = drained.still_running, "order-notifier stopped");
    }

    async fn handle(&self, message: &Message) {
        let then = self.notify(message).await;
        if then == Then::Leave || fastrand::f64() < self.redeliver_rate {
            tracing::debug!(id = %message.id, "left unacknowledged: it will be delivered again");
            return;
        }
        if let Err(error) = self.transport.ack(message).await {
            tracing::warn!(id = %message.id, %error, "acknowledging failed; it will be delivered again");
        }
    }

    /// Sends the notification of `message` unless its inbox says it was
    /// sent (or is being sent).
    async fn notify(&self, message: &Message) -> Then {
        if message.topic != ORDER_CREATED {
            tracing::warn!(id = %message.id, topic = %message.topic, "not an event this notifier handles; dropped");
            return Then::Ack;
        }
        let order = match serde_json::from_str::<OrderCreated>(&message.payload) {
            Ok(order) => order,
            Err(error) => {
                tracing::error!(id = %message.id, %error, "unreadable order.created event; dropped");
                return Then::Ack;
            }
        };
        let crash = self.crash_after_send;
        let delivery = match &self.outlet {
            Outlet::Postgres(_) => {
                let work = async |context: MessageContext, tx: &mut PgConnection| {
                    Outlet::send_in(tx, &context.derived_key(NOTIFICATION), &order).await?;
                    crash_here(crash, "--crash-after-send");
                    Ok(())
                };
                self.inbox.process_in_tx(&message.id, work).await
            }
            outlet => {
                let work = |context: MessageContext| async move {
                    outlet.send(&context.derived_key(NOTIFICATION), &order).await?;
                    crash_here(crash, "--crash-after-send");
                    Ok(())
                };
                self.inbox.process(&message.id, work).await
            }
        };
        self.then(message, delivery)
    }

    fn then(&self, message: &Message, delivery: Result<Delivery<()>, InboxError<OutletError, ()>>) -> Then {
        match delivery {
            Ok(Delivery::Processed(())) => {
                tracing::debug!(id = %message.id, redelivered = message.redelivered, "notification sent");
                crash_here(self.crash_before_ack, "--crash-before-ack");
                Then::Ack
            }
            Ok(Delivery::Duplicate) => {
                tracing::debug!(id = %message.id, "already notified");
                Then::Ack
            }
            Ok(Delivery::InProgress { .. }) => Then::Leave,
            // Sent, but recorded late: another delivery may run it again,
            // and sends nothing new under the same key.
            Err(InboxError::LeaseLost(())) => Then::Ack,
            // An id no inbox can take never will: dropped, loudly.
            Err(error @ InboxError::InvalidId(_)) => {
                tracing::error!(id = %message.id, %error, "an event id the inbox cannot take; dropped");
                Then::Ack
            }
            Err(error) => {
                tracing::warn!(id = %message.id, %error, "not notified; it will be delivered again");
                Then::Leave
            }
        }
    }
}

/// Aborts the process, like a crash, if `armed`.
fn crash_here(armed: bool, knob: &str) {
    if armed {
        tracing::error!("{knob}: aborting the process on purpose");
        std::process::abort();
    }
}

//! The order notifier: consumes the order service's `order.created` events
//! from its transactional outbox (a Redis Stream, or the Postgres outbox
//! table) and sends one notification per order through idem's inbox, so
//! that redeliveries, crashes and several notifier processes never notify
//! an order twice. See the README for the event path.

pub mod consumer;
pub mod event;
pub mod outlet;

pub use consumer::Consumer;
pub use event::OrderCreated;
pub use outlet::Outlet;

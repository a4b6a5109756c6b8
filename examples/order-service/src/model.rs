//! Orders, payments and charges, and the validation of what clients send.

use idem_runtime::outbox::Event;
use order_notifier::OrderCreated;
use serde::{Deserialize, Serialize};

/// The body of `POST /orders`.
#[derive(Debug, Deserialize)]
pub struct NewOrder {
    /// The customer the order is for.
    pub customer_id: String,
    /// Amount in cents, above zero.
    pub amount_cents: i64,
    /// ISO 4217 code: three upper-case letters.
    pub currency: String,
}

impl NewOrder {
    /// Checks the values; the error says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.customer_id.trim().is_empty() || self.customer_id.len() > 255 {
            return Err("customer_id must be a non-empty string of at most 255 bytes".into());
        }
        check_amount(self.amount_cents)?;
        if self.currency.len() != 3 || !self.currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!("currency must be three upper-case letters, such as \"EUR\"; got {:?}", self.currency));
        }
        Ok(())
    }
}

/// The body of `POST /orders/{id}/payments`.
#[derive(Debug, Deserialize)]
pub struct NewPayment {
    /// Amount in cents, above zero.
    pub amount_cents: i64,
}

impl NewPayment {
    /// Checks the values; the error says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        check_amount(self.amount_cents)
    }
}

fn check_amount(amount: i64) -> Result<(), String> {
    if amount > 0 { Ok(()) } else { Err(format!("amount_cents must be an integer above zero; got {amount}")) }
}

/// An order, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// Order id: UUID-shaped, made from the execution's derived key (see
    /// [`uuid_shaped`]).
    pub id: String,
    /// The user (`X-User-ID`) who created it.
    pub owner: String,
    /// The customer the order is for.
    pub customer_id: String,
    /// Amount in cents.
    pub amount_cents: i64,
    /// Currency code.
    pub currency: String,
    /// Always `created` in this example.
    pub status: String,
    /// RFC 3339 creation time.
    pub created_at: String,
}

impl Order {
    /// A new order `id` for `owner`.
    pub fn new(id: String, owner: &str, new: NewOrder) -> Self {
        Self {
            id,
            owner: owner.to_owned(),
            customer_id: new.customer_id,
            amount_cents: new.amount_cents,
            currency: new.currency,
            status: "created".into(),
            created_at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
        }
    }

    /// The body clients get: the order without its owner.
    pub fn body(&self) -> OrderBody<'_> {
        OrderBody {
            amount_cents: self.amount_cents,
            created_at: &self.created_at,
            currency: &self.currency,
            customer_id: &self.customer_id,
            id: &self.id,
            status: &self.status,
        }
    }
}

// The response bodies below list their fields alphabetically: that is the
// order the service has always sent them in (serde_json's maps sort their
// keys), so the bytes on the wire stay the same.

/// An order as `POST /orders`, `GET /orders` and `GET /orders/{id}` return it.
#[derive(Debug, Serialize)]
pub struct OrderBody<'a> {
    /// Amount in cents.
    pub amount_cents: i64,
    /// RFC 3339 creation time.
    pub created_at: &'a str,
    /// Currency code.
    pub currency: &'a str,
    /// The customer the order is for.
    pub customer_id: &'a str,
    /// Order id.
    pub id: &'a str,
    /// `created`.
    pub status: &'a str,
}

/// A charge as the simulated payment provider records it (its own ledger,
/// apart from the service's rows).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    /// The provider's charge id (`ch_` and a UUID).
    pub id: String,
    /// The order paid.
    pub order_id: String,
    /// Amount in cents.
    pub amount_cents: i64,
    /// Always `captured` in this example.
    pub status: String,
}

impl Charge {
    /// A new captured charge, with an id of the provider's.
    pub fn captured(order_id: &str, amount_cents: i64) -> Self {
        Self {
            id: format!("ch_{}", uuid::Uuid::new_v4().simple()),
            order_id: order_id.to_owned(),
            amount_cents,
            status: "captured".into(),
        }
    }
}

/// A payment of an order: the service's record of a charge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payment {
    /// Payment id: UUID-shaped, made from the execution's derived key (see
    /// [`uuid_shaped`]).
    pub id: String,
    /// The order paid.
    pub order_id: String,
    /// The provider's charge.
    pub charge_id: String,
    /// Amount in cents.
    pub amount_cents: i64,
    /// The charge's status: `captured`.
    pub status: String,
}

impl Payment {
    /// The payment `id` that `charge` captured.
    pub fn new(id: String, charge: Charge) -> Self {
        Self {
            id,
            order_id: charge.order_id,
            charge_id: charge.id,
            amount_cents: charge.amount_cents,
            status: charge.status,
        }
    }

    /// The body clients get.
    pub fn body(&self) -> PaymentBody<'_> {
        PaymentBody { amount_cents: self.amount_cents, id: &self.id, order_id: &self.order_id, status: &self.status }
    }
}

/// A payment as `POST /orders/{id}/payments` returns it.
#[derive(Debug, Serialize)]
pub struct PaymentBody<'a> {
    /// Amount in cents.
    pub amount_cents: i64,
    /// Payment id.
    pub id: &'a str,
    /// The order paid.
    pub order_id: &'a str,
    /// `captured`.
    pub status: &'a str,
}

/// An id for a row the handler writes, from one of its execution's derived
/// keys (`ExecutionContext::derived_key`, 64 hex digits): the first 32
/// digits shaped as a UUID (8-4-4-4-12). Every execution of one
/// idempotency key builds the same id, so a repeated execution finds the
/// row of the first instead of writing a second.
pub fn uuid_shaped(derived_key: &str) -> String {
    let hex = derived_key.get(..32).filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
    let hex = hex.unwrap_or_else(|| panic!("a derived key has 64 hex digits; got {derived_key:?}"));
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

impl Order {
    /// The `order.created` event this order emits through the outbox.
    pub fn created_event(&self) -> Event {
        let created = OrderCreated {
            order_id: self.id.clone(),
            owner: self.owner.clone(),
            amount_cents: self.amount_cents,
            currency: self.currency.clone(),
        };
        created.event()
    }
}

/// Side-effect counts across every process sharing the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Orders created.
    pub orders_created: u64,
    /// Charges the payment provider captured.
    pub charges: u64,
    /// Refunds the provider reported through its webhook, one per event.
    pub refunds: u64,
    /// Notifications the order notifier sent, one per created order.
    pub notifications_sent: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(customer: &str, amount: i64, currency: &str) -> NewOrder {
        NewOrder { customer_id: customer.into(), amount_cents: amount, currency: currency.into() }
    }

    #[test]
    fn validation_names_the_bad_field() {
        assert!(order("c1", 1, "EUR").validate().is_ok());
        assert!(order("", 1, "EUR").validate().unwrap_err().contains("customer_id"));
        assert!(order("c1", 0, "EUR").validate().unwrap_err().contains("amount_cents"));
        assert!(order("c1", -5, "EUR").validate().unwrap_err().contains("amount_cents"));
        for currency in ["eur", "EU", "EURO", "E1R", ""] {
            assert!(order("c1", 1, currency).validate().unwrap_err().contains("currency"), "{currency}");
        }
        assert!(NewPayment { amount_cents: 0 }.validate().is_err());
    }

    #[test]
    fn bodies_keep_their_wire_format() {
        let order = Order {
            id: "o1".into(),
            owner: "alice".into(),
            customer_id: "c1".into(),
            amount_cents: 1500,
            currency: "EUR".into(),
            status: "created".into(),
            created_at: "2025-01-02T03:04:05.678Z".into(),
        };
        assert_eq!(
            serde_json::to_string(&order.body()).unwrap(),
            r#"{"amount_cents":1500,"created_at":"2025-01-02T03:04:05.678Z","currency":"EUR","customer_id":"c1","id":"o1","status":"created"}"#,
            "the owner stays private"
        );
        let charge = Charge::captured("o1", 1500);
        assert!(charge.id.starts_with("ch_"), "{}", charge.id);
        let payment = Payment::new("p1".into(), charge);
        assert_eq!(
            serde_json::to_string(&payment.body()).unwrap(),
            r#"{"amount_cents":1500,"id":"p1","order_id":"o1","status":"captured"}"#
        );
        let stats = Stats { orders_created: 2, charges: 1, refunds: 3, notifications_sent: 2 };
        assert_eq!(
            serde_json::to_string(&stats).unwrap(),
            r#"{"orders_created":2,"charges":1,"refunds":3,"notifications_sent":2}"#
        );
    }

    #[test]
    fn new_orders_are_created_now() {
        let order = Order::new("o1".into(), "alice", order("c1", 100, "EUR"));
        assert_eq!((order.owner.as_str(), order.status.as_str()), ("alice", "created"));
        assert!(order.created_at.ends_with('Z'), "{}", order.created_at);
    }

    #[test]
    fn derived_keys_make_uuid_shaped_ids() {
        let key = "0123456789abcdef0123456789abcdefffffffffffffffffffffffffffffffff";
        assert_eq!(uuid_shaped(key), "01234567-89ab-cdef-0123-456789abcdef");
        assert_eq!(uuid::Uuid::parse_str(&uuid_shaped(key)).unwrap().simple().to_string(), &key[..32]);
    }
}

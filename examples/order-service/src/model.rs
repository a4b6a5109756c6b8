//! Orders, payments and charges, and the validation of what clients send.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

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
    /// Order id (a UUID).
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
    /// A new order for `owner`.
    pub fn new(owner: &str, new: NewOrder) -> Self {
        Self {
            id: uuid::Uuid::new_v4().to_string(),
            owner: owner.to_owned(),
            customer_id: new.customer_id,
            amount_cents: new.amount_cents,
            currency: new.currency,
            status: "created".into(),
            created_at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
        }
    }

    /// The public representation (the owner is not part of it).
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "customer_id": self.customer_id,
            "amount_cents": self.amount_cents,
            "currency": self.currency,
            "status": self.status,
            "created_at": self.created_at,
        })
    }
}

/// A captured charge at the simulated payment provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    /// Payment id (a UUID).
    pub id: String,
    /// The order paid.
    pub order_id: String,
    /// Amount in cents.
    pub amount_cents: i64,
    /// Always `captured` in this example.
    pub status: String,
}

impl Charge {
    /// The public representation.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "order_id": self.order_id,
            "amount_cents": self.amount_cents,
            "status": self.status,
        })
    }
}

/// Side-effect counts across every process sharing the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Orders created.
    pub orders_created: u64,
    /// Charges captured.
    pub charges: u64,
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
    fn the_owner_stays_private() {
        let order = Order::new("alice", order("c1", 100, "EUR"));
        let json = order.to_json();
        assert!(json.get("owner").is_none());
        assert_eq!(json["status"], "created");
        assert!(json["created_at"].as_str().unwrap().ends_with('Z'));
    }
}

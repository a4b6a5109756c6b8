//! Command-line flags, each with an environment variable and a default.

use clap::Parser;

/// The order service's configuration: flag, then environment, then default.
#[derive(Debug, Parser)]
#[command(name = "order-service", version, about = "Orders and payments, safe to retry with #[idempotent].")]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "ORDER_SERVICE_ADDR", default_value = "127.0.0.1:8080")]
    pub addr: String,

    /// Where idempotency records, orders and charges live: `memory`, a
    /// `redis://` URL or a `postgres://` URL.
    #[arg(long, env = "IDEM_STORE", default_value = "memory", value_parser = StoreUrl::parse)]
    pub store: StoreUrl,

    /// Latency of the simulated payment provider, in milliseconds.
    #[arg(long = "charge-delay-ms", env = "ORDER_SERVICE_CHARGE_DELAY_MS", default_value_t = 0)]
    pub charge_delay_ms: u64,
}

/// The backend named by `--store`.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// Everything in this process.
    Memory,
    /// A Redis (or Valkey) server.
    Redis(String),
    /// A PostgreSQL database.
    Postgres(String),
}

impl StoreUrl {
    fn parse(text: &str) -> Result<Self, String> {
        let scheme = text.split_once("://").map(|(scheme, _)| scheme.to_ascii_lowercase());
        match (text, scheme.as_deref()) {
            ("memory", _) => Ok(Self::Memory),
            (_, Some("redis" | "rediss" | "valkey" | "valkeys")) => Ok(Self::Redis(text.to_owned())),
            (_, Some("postgres" | "postgresql")) => Ok(Self::Postgres(text.to_owned())),
            _ => Err("expected `memory`, a redis:// URL or a postgres:// URL".to_owned()),
        }
    }

    /// `memory`, `redis` or `postgres`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Redis(_) => "redis",
            Self::Postgres(_) => "postgres",
        }
    }
}

/// Never print a store URL, even through `Debug`: it may hold a password.
/// The stores show where they connect, password masked, in their own
/// `Debug` output and errors.
impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Memory => f.write_str("memory"),
            _ => write!(f, "{}://<hidden>", self.kind()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls_are_recognized() {
        assert_eq!(StoreUrl::parse("memory"), Ok(StoreUrl::Memory));
        assert_eq!(StoreUrl::parse("redis://h/1").map(|s| s.kind()), Ok("redis"));
        assert_eq!(StoreUrl::parse("postgresql://h/db").map(|s| s.kind()), Ok("postgres"));
        assert!(StoreUrl::parse("mysql://h").is_err());
        assert!(StoreUrl::parse("").is_err());
    }

    #[test]
    fn passwords_never_show() {
        let url = StoreUrl::parse("postgres://app:s3cret@db:5432/orders?sslmode=require&password=other").unwrap();
        assert_eq!(format!("{url:?}"), "postgres://<hidden>");
        let url = StoreUrl::parse("redis://:pw@127.0.0.1:6379/0").unwrap();
        assert_eq!(format!("{url:?}"), "redis://<hidden>");
    }
}

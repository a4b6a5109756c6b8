//! Command-line flags, each with an environment variable and a default.

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Parser, ValueEnum};
use idem_runtime::OnLapse;
use idem_runtime::sealing::RecordsKey;

use crate::faults::{DurableStep, Faults};
use crate::signature::WebhookSecret;

/// The order service's configuration: flag, then environment, then default.
#[derive(Debug, Parser)]
#[command(
    name = "order-service",
    version,
    about = "Orders and payments, safe to retry with #[idempotent].",
    after_help = "Environment only (never a flag, never printed):\n  ORDER_SERVICE_RECORDS_KEY  64 hexadecimal \
                  digits: idempotency records are encrypted with this key (Idem::encrypt_records)"
)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "ORDER_SERVICE_ADDR", default_value = "127.0.0.1:8080")]
    pub addr: String,

    /// Where idempotency records, orders and charges live: `memory`, a
    /// `redis://` URL, a Redis Cluster's seed nodes
    /// (`redis-cluster://host:port,host:port,...`) or a `postgres://` URL.
    /// Prefer the environment variable for a URL with a password: the value
    /// is never printed, not even by `--help` or a parse error.
    #[arg(long, env = "IDEM_STORE", hide_env_values = true, default_value = "memory", value_parser = StoreUrl::read)]
    pub store: StoreUrl,

    /// Latency of the simulated payment provider, in milliseconds.
    #[arg(long = "charge-delay-ms", env = "ORDER_SERVICE_CHARGE_DELAY_MS", default_value_t = 0)]
    pub charge_delay_ms: u64,

    /// How long a payment's handler waits after the provider charged,
    /// before it returns, in milliseconds: a slow step after the side
    /// effect (a test can take the store away between the charge and the
    /// completion).
    #[arg(long = "post-charge-delay-ms", env = "ORDER_SERVICE_POST_CHARGE_DELAY_MS", default_value_t = 0)]
    pub post_charge_delay_ms: u64,

    /// Most executions of idempotent requests running at once in this
    /// process; past it, 503 with `Retry-After` before anything is claimed.
    /// Default: the runtime's (`Idem::DEFAULT_MAX_RUNNING`).
    #[arg(long = "max-running", env = "ORDER_SERVICE_MAX_RUNNING")]
    pub max_running: Option<usize>,

    /// Whether the simulated payment provider deduplicates charges by the
    /// idempotency key it is given, as Stripe does. `off` makes it charge
    /// on every call, even with a key it has seen: a downstream without
    /// idempotency, which only the payment's durable step `charge` keeps
    /// from charging twice after a crash.
    #[arg(long = "provider-dedup", env = "ORDER_SERVICE_PROVIDER_DEDUP", value_enum, default_value_t = Switch::On)]
    pub provider_dedup: Switch,

    /// On Redis and Redis Cluster: how many replicas of a record's primary
    /// must acknowledge each claim that wins a key, each completion and
    /// each renewal batch (`WAIT`, 500 ms) before it counts; 0 (the
    /// default) waits for none. With 1, a primary that fails over keeps
    /// every key that reached its handler.
    #[arg(long = "replica-acks", env = "ORDER_SERVICE_REPLICA_ACKS", default_value_t = 0)]
    pub replica_acks: u32,

    /// What a retry does with a payment or order whose execution lapsed
    /// unfinished (its process crashed): `takeover` runs it again, handing
    /// back its recorded durable steps; `hold` never runs it again by
    /// itself: the key answers 409 `execution-held` until an operator
    /// releases or resolves it with the `idem` tool. The `Idem` default for
    /// every route.
    #[arg(long = "on-lapse", env = "ORDER_SERVICE_ON_LAPSE", value_enum, default_value_t = LapsePolicy::Takeover)]
    pub on_lapse: LapsePolicy,

    /// The secret the payment provider signs its webhook deliveries with.
    /// Prefer the environment variable: the value is never printed.
    #[arg(
        long,
        env = "ORDER_SERVICE_WEBHOOK_SECRET",
        hide_env_values = true,
        default_value = crate::signature::DEFAULT_SECRET,
        hide_default_value = true
    )]
    #[arg(value_parser = WebhookSecret::read)]
    pub webhook_secret: WebhookSecret,

    /// Fault injection, for tests: abort the process right after the
    /// payment provider recorded a charge, before the handler returns.
    /// The variable takes `1`/`true` (`0`/`false` leave it off).
    #[arg(long, env = "ORDER_SERVICE_CRASH_AFTER_CHARGE", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub crash_after_charge: bool,

    /// Fault injection, for tests: abort the process right after the runtime
    /// recorded the payment's durable step NAME (`charge`, the provider's
    /// call), before the handler returns.
    #[arg(long, env = "ORDER_SERVICE_CRASH_AFTER_STEP", value_name = "NAME", value_enum)]
    pub crash_after_step: Option<DurableStep>,

    /// Fault injection, for tests: abort the process right after the order
    /// row is written (on Postgres: before its transaction commits), before
    /// the handler returns. The variable takes `1`/`true`.
    #[arg(long, env = "ORDER_SERVICE_CRASH_AFTER_ORDER_INSERT", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub crash_after_order_insert: bool,
}

/// The environment variable that holds the records key.
pub const RECORDS_KEY_VARIABLE: &str = "ORDER_SERVICE_RECORDS_KEY";

/// The key idempotency records are sealed with, from
/// `ORDER_SERVICE_RECORDS_KEY` (64 hexadecimal digits): never a flag, so
/// that it is in no process listing, and never printed, not even when it
/// is malformed. `None` when the variable is unset; set but empty is an
/// error (a secret that did not arrive must not turn encryption off).
pub fn records_key() -> Result<Option<RecordsKey>, String> {
    records_key_in(std::env::var_os(RECORDS_KEY_VARIABLE).as_deref())
}

/// The records key `value` holds, as [`records_key`] reads the variable.
fn records_key_in(value: Option<&std::ffi::OsStr>) -> Result<Option<RecordsKey>, String> {
    let Some(value) = value else { return Ok(None) };
    let Some(text) = value.to_str() else {
        return Err(format!("{RECORDS_KEY_VARIABLE}: not 64 hexadecimal digits"));
    };
    RecordsKey::from_hex(text).map(Some).map_err(|error| format!("{RECORDS_KEY_VARIABLE}: {error}"))
}

impl Config {
    /// The armed crash points.
    pub fn faults(&self) -> Faults {
        Faults {
            crash_after_charge: self.crash_after_charge,
            crash_after_step: self.crash_after_step,
            crash_after_order_insert: self.crash_after_order_insert,
        }
    }
}

/// A setting that is `on` or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    /// On.
    On,
    /// Off.
    Off,
}

impl Switch {
    /// Whether it is on.
    pub fn is_on(self) -> bool {
        self == Self::On
    }
}

/// `--on-lapse`: the runtime's [`OnLapse`], as the flag spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LapsePolicy {
    /// Run the lapsed execution again ([`OnLapse::Takeover`]).
    Takeover,
    /// Hold it for an operator ([`OnLapse::Hold`]).
    Hold,
}

impl From<LapsePolicy> for OnLapse {
    fn from(policy: LapsePolicy) -> Self {
        match policy {
            LapsePolicy::Takeover => Self::Takeover,
            LapsePolicy::Hold => Self::Hold,
        }
    }
}

/// The backend named by `--store`.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// Everything in this process.
    Memory,
    /// A Redis (or Valkey) server.
    Redis(String),
    /// A Redis Cluster, by its seed nodes:
    /// `redis-cluster://[user:password@]host:port,host:port,...` (or
    /// `rediss-cluster://`, `valkey-cluster://`, `valkeys-cluster://`).
    RedisCluster(String),
    /// A PostgreSQL database.
    Postgres(String),
    /// Anything else, refused when the service connects (not while parsing
    /// flags, whose errors would quote the value and its password).
    Unknown {
        /// The URL scheme, if there is one.
        scheme: Option<String>,
    },
}

impl StoreUrl {
    /// Reads `--store`; never fails, see [`StoreUrl::Unknown`].
    fn read(text: &str) -> Result<Self, std::convert::Infallible> {
        Ok(Self::parse(text))
    }

    fn parse(text: &str) -> Self {
        let scheme = text.split_once("://").map(|(scheme, _)| scheme.to_ascii_lowercase());
        match (text, scheme.as_deref()) {
            ("memory", _) => Self::Memory,
            (_, Some("redis" | "rediss" | "valkey" | "valkeys")) => Self::Redis(text.to_owned()),
            (_, Some("redis-cluster" | "rediss-cluster" | "valkey-cluster" | "valkeys-cluster")) => {
                Self::RedisCluster(text.to_owned())
            }
            (_, Some("postgres" | "postgresql")) => Self::Postgres(text.to_owned()),
            _ => Self::Unknown {
                scheme: scheme.filter(|s| s.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))),
            },
        }
    }

    /// `memory`, `redis`, `redis-cluster` or `postgres`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Redis(_) => "redis",
            Self::RedisCluster(_) => "redis-cluster",
            Self::Postgres(_) => "postgres",
            Self::Unknown { .. } => "unknown",
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
            Self::Unknown { scheme } => write!(f, "{}://<hidden>", scheme.as_deref().unwrap_or("?")),
            _ => write!(f, "{}://<hidden>", self.kind()),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn store_urls_are_recognized() {
        assert_eq!(StoreUrl::parse("memory"), StoreUrl::Memory);
        assert_eq!(StoreUrl::parse("redis://h/1").kind(), "redis");
        assert_eq!(StoreUrl::parse("valkeys://h").kind(), "redis");
        assert_eq!(StoreUrl::parse("postgresql://h/db").kind(), "postgres");
        assert_eq!(StoreUrl::parse("mysql://u:pw@h"), StoreUrl::Unknown { scheme: Some("mysql".into()) });
        assert_eq!(StoreUrl::parse(""), StoreUrl::Unknown { scheme: None });
    }

    #[test]
    fn redis_cluster_urls_are_recognized() {
        let seeds = "redis-cluster://127.0.0.1:7000,127.0.0.1:7001";
        assert_eq!(StoreUrl::parse(seeds), StoreUrl::RedisCluster(seeds.to_owned()));
        for url in ["REDIS-CLUSTER://h:1", "rediss-cluster://h:1,h:2", "valkey-cluster://h:1", "valkeys-cluster://h:1"]
        {
            assert_eq!(StoreUrl::parse(url).kind(), "redis-cluster", "{url}");
        }
        // Through the flag and the environment's name alike.
        let config = Config::try_parse_from(["order-service", "--store", seeds]).unwrap();
        assert_eq!(config.store, StoreUrl::RedisCluster(seeds.to_owned()));
        // Not a cluster scheme: refused at connect, like any unknown one.
        assert_eq!(StoreUrl::parse("cluster://h:1"), StoreUrl::Unknown { scheme: Some("cluster".into()) });
    }

    #[test]
    fn passwords_never_show() {
        let url = StoreUrl::parse("postgres://app:s3cret@db:5432/orders?sslmode=require&password=other");
        assert_eq!(format!("{url:?}"), "postgres://<hidden>");
        let url = StoreUrl::parse("redis://:pw@127.0.0.1:6379/0");
        assert_eq!(format!("{url:?}"), "redis://<hidden>");
        let url = StoreUrl::parse("redis-cluster://app:s3cret@10.0.0.1:7000,10.0.0.2:7001/?protocol=resp3");
        assert_eq!(format!("{url:?}"), "redis-cluster://<hidden>");
        let config = Config::try_parse_from(["order-service", "--store", "rediss-cluster://:s3cret@h:1,h:2"]).unwrap();
        assert!(!format!("{config:?}").contains("s3cret"), "{config:?}");
        assert_eq!(format!("{:?}", StoreUrl::parse("pw@h")), "?://<hidden>");
    }

    #[test]
    fn delays_and_the_bound_come_from_flags_or_the_environment() {
        let config = Config::try_parse_from(["order-service"]).unwrap();
        assert_eq!((config.post_charge_delay_ms, config.max_running), (0, None));
        let config =
            Config::try_parse_from(["order-service", "--post-charge-delay-ms", "250", "--max-running", "8"]).unwrap();
        assert_eq!((config.post_charge_delay_ms, config.max_running), (250, Some(8)));
        assert!(Config::try_parse_from(["order-service", "--max-running", "many"]).is_err());
    }

    #[test]
    fn crash_knobs_are_off_unless_asked_for() {
        let config = Config::try_parse_from(["order-service"]).unwrap();
        assert!(!config.crash_after_charge && !config.crash_after_order_insert);
        let config = Config::try_parse_from(["order-service", "--crash-after-charge"]).unwrap();
        assert!(config.crash_after_charge && !config.crash_after_order_insert);
        let config = Config::try_parse_from(["order-service", "--crash-after-order-insert"]).unwrap();
        assert!(!config.crash_after_charge && config.crash_after_order_insert);
    }

    #[test]
    fn a_crash_after_a_step_names_a_known_step() {
        let config = Config::try_parse_from(["order-service"]).unwrap();
        assert_eq!(config.faults().crash_after_step, None);
        let config = Config::try_parse_from(["order-service", "--crash-after-step", "charge"]).unwrap();
        assert_eq!(config.faults().crash_after_step, Some(DurableStep::Charge));
        assert!(!config.crash_after_charge, "a knob of its own");
        // An unknown step is refused at start, with the steps there are.
        let refused = Config::try_parse_from(["order-service", "--crash-after-step", "refund"]).unwrap_err();
        let message = refused.to_string();
        assert!(message.contains("refund") && message.contains("[possible values: charge]"), "{message}");
    }

    #[test]
    fn the_provider_deduplicates_and_lapses_are_taken_over_by_default() {
        let config = Config::try_parse_from(["order-service"]).unwrap();
        assert_eq!((config.provider_dedup, OnLapse::from(config.on_lapse)), (Switch::On, OnLapse::Takeover));
        let config =
            Config::try_parse_from(["order-service", "--provider-dedup", "off", "--on-lapse", "hold"]).unwrap();
        assert_eq!((config.provider_dedup, OnLapse::from(config.on_lapse)), (Switch::Off, OnLapse::Hold));
        assert!(Config::try_parse_from(["order-service", "--provider-dedup", "maybe"]).is_err());
        assert!(Config::try_parse_from(["order-service", "--on-lapse", "retry"]).is_err());
    }

    #[test]
    fn a_bad_store_value_is_never_echoed() {
        // Neither by a parse error nor by `--help` showing the environment.
        let config = Config::try_parse_from(["order-service", "--store", "mysql://u:s3cret@h"]).unwrap();
        assert!(!format!("{config:?}").contains("s3cret"));
        let help = Config::command().render_help().to_string();
        assert!(help.contains("IDEM_STORE") && !help.contains("IDEM_STORE="), "{help}");
        assert!(help.contains("ORDER_SERVICE_WEBHOOK_SECRET") && !help.contains("whsec_test"), "{help}");
        let config = Config::try_parse_from(["order-service", "--webhook-secret", "whsec_s3cret"]).unwrap();
        assert!(!format!("{config:?}").contains("s3cret"), "{config:?}");
    }

    #[test]
    fn the_records_key_is_read_and_never_shown() {
        let key = "ab".repeat(32);
        let read = records_key_in(Some(std::ffi::OsStr::new(&key))).expect("a key").expect("some key");
        assert!(!format!("{read:?}").contains("abab"));
        assert!(records_key_in(None).expect("no key").is_none());
        for bad in [" ".to_owned(), "ab".repeat(31), "zz".repeat(32), format!("{key}00")] {
            let error = records_key_in(Some(std::ffi::OsStr::new(&bad))).expect_err("refused");
            let shown = bad.get(..8).unwrap_or("never");
            assert!(error.starts_with("ORDER_SERVICE_RECORDS_KEY: ") && !error.contains(shown), "{error}");
        }
    }
}

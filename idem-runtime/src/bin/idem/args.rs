//! The command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use idem_runtime::store::Scope;
use idem_runtime::store::{FencingToken, StateName};

/// Lists, inspects and repairs idempotency records.
#[derive(Debug, Parser)]
#[command(name = "idem", version, about = "Lists, inspects, releases and resolves idempotency records on Redis, Redis Cluster and Postgres.", long_about = None)]
pub(crate) struct Cli {
    /// The store: redis://..., redis-cluster://h:p,h:p,...
    /// or postgres://... (a password in it is never printed).
    #[arg(long, env = "IDEM_STORE", hide_env_values = true, global = true, default_value = "")]
    pub(crate) store: String,
    /// The Postgres table the records are in, as `PostgresStore::with_table`.
    #[arg(long, global = true)]
    pub(crate) table: Option<String>,
    /// The Redis key prefix, as `RedisStore::with_key_prefix`.
    #[arg(long, global = true)]
    pub(crate) key_prefix: Option<String>,
    /// JSON output, one object per record, for scripts.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// The grace a release or resolve gives the holder of an execution whose
    /// lease it finds lapsed, before a later one applies: at least half the
    /// route's `lock_ttl`, and longer than the services' store timeout.
    #[arg(long, global = true, default_value = "30s")]
    pub(crate) grace: humantime::Duration,
    /// A file holding the records keys of services that seal their records
    /// (`Idem::encrypt_records`): 64 hexadecimal digits each, separated by
    /// commas or new lines, the key new records are sealed with first. The
    /// environment variable IDEM_RECORDS_KEY may hold them instead; never
    /// give a key itself on the command line. Without a key, sealed parts
    /// show as sealed.
    #[arg(long, global = true)]
    pub(crate) records_key_file: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// One line per record: its id, state, route, age, attempt and recorded steps.
    List {
        /// Only records in this state.
        #[arg(long, value_parser = state)]
        state: Option<StateName>,
        /// Only records claimed longer ago than this (`90s`, `10m`, `2h`).
        #[arg(long)]
        older_than: Option<humantime::Duration>,
        /// Only records of this route, such as 'POST /orders'.
        #[arg(long)]
        route: Option<String>,
        /// At most this many records.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Every field of one record, its steps and their results.
    Inspect {
        #[command(flatten)]
        record: RecordArgs,
    },
    /// Ends an in-flight or held execution without a response, leaving a
    /// tombstone: the same request may run again (getting the recorded
    /// steps back), another one is refused.
    Release {
        #[command(flatten)]
        record: RecordArgs,
        /// Forget the recorded steps too: the next execution runs every
        /// step again (only for effects you undid, such as a refunded charge).
        #[arg(long)]
        forget_steps: bool,
        #[command(flatten)]
        expect: ExpectArgs,
    },
    /// Completes an in-flight or held execution with the response you
    /// established (from the provider's dashboard, say): retries replay it.
    Resolve {
        #[command(flatten)]
        record: RecordArgs,
        /// The response's status.
        #[arg(long)]
        status: u16,
        /// A response header, 'name: value' (repeat for more).
        #[arg(long, value_parser = header)]
        header: Vec<(String, Vec<u8>)>,
        /// A file holding the response's body.
        #[arg(long)]
        body: PathBuf,
        #[command(flatten)]
        expect: ExpectArgs,
    },
}

/// What a write expects the record to still be.
#[derive(Debug, Args)]
pub(crate) struct ExpectArgs {
    /// Refuse unless the execution's token is still this one (from `inspect`).
    #[arg(long, value_parser = token)]
    pub(crate) expect_token: Option<FencingToken>,
    /// Refuse unless the record is still in this state.
    #[arg(long, value_parser = state)]
    pub(crate) expect_state: Option<StateName>,
    /// Settle an in-flight execution whose lease is still live (its holder
    /// is running: it would lose its completion, and a retry could run it
    /// again).
    #[arg(long)]
    pub(crate) force: bool,
}

impl ExpectArgs {
    /// The operator's expectation.
    pub(crate) fn expect(&self) -> idem_runtime::operate::Expect {
        idem_runtime::operate::Expect { token: self.expect_token, state: self.expect_state, force: self.force }
    }
}

/// A record, by its id or by what its storage key is derived from.
#[derive(Debug, Args)]
pub(crate) struct RecordArgs {
    /// The record's id (32 hex digits, as `list` and the request's log span show it).
    pub(crate) id: Option<String>,
    /// The route, such as 'POST /orders/{id}/payments'.
    #[arg(long, conflicts_with = "id", requires = "key")]
    pub(crate) route: Option<String>,
    /// The route's scope.
    #[arg(long, value_parser = scope, default_value = "user")]
    pub(crate) scope: Scope,
    /// The subject (scope user).
    #[arg(long)]
    pub(crate) subject: Option<String>,
    /// The idempotency key, as the client sent it.
    #[arg(long, conflicts_with = "id", requires = "route")]
    pub(crate) key: Option<String>,
}

fn state(text: &str) -> Result<StateName, String> {
    text.parse().map_err(|error: idem_runtime::store::UnknownState| error.to_string())
}

fn token(text: &str) -> Result<FencingToken, String> {
    FencingToken::from_hex(text).ok_or_else(|| "a token is 32 hex digits".to_owned())
}

fn scope(text: &str) -> Result<Scope, String> {
    match text {
        "user" => Ok(Scope::User),
        "route" => Ok(Scope::Route),
        "global" => Ok(Scope::Global),
        other => Err(format!("unknown scope `{other}`: expected user, route or global")),
    }
}

fn header(text: &str) -> Result<(String, Vec<u8>), String> {
    let (name, value) = text.split_once(':').ok_or_else(|| "a header is 'name: value'".to_owned())?;
    let name = name.trim().to_ascii_lowercase();
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)) {
        return Err(format!("`{name}` is not a header name"));
    }
    Ok((name, value.trim().as_bytes().to_vec()))
}

//! What Redis can lose, and what the store does about it: the server
//! settings read at connect (`maxmemory-policy`, `appendonly`), and the
//! opt-in replica acknowledgements (`WAIT`).

use std::time::Duration;

use redis::Value;

use super::connection::RedisConnection;
use super::error::Endpoint;
use crate::store::StoreError;

/// What [`RedisStore::check_server`](super::RedisStore::check_server) does
/// when a server's settings can lose records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnEviction {
    /// Refuse to connect when a server evicts keys under memory pressure
    /// (`maxmemory-policy` other than `noeviction`): an evicted lease or
    /// record lets a retry run the handler a second time. The default of
    /// [`RedisStore::connect`](super::RedisStore::connect).
    #[default]
    Refuse,
    /// Log a warning and connect anyway.
    Warn,
}

/// Replica acknowledgements a store waits for: see
/// [`RedisStore::with_replica_acks`](super::RedisStore::with_replica_acks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ReplicaAcks {
    /// How many replicas must acknowledge each write.
    pub(super) replicas: u32,
    /// Longest wait for them.
    pub(super) timeout: Duration,
}

impl ReplicaAcks {
    /// The `WAIT` command for these acknowledgements.
    pub(super) fn wait(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(self.replicas).arg(u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX).max(1));
        cmd
    }

    /// Reads `WAIT`'s answer: `Ok` when enough replicas acknowledged,
    /// else the error that fails the operation closed.
    pub(super) fn check(&self, operation: &str, answer: &Value) -> Result<(), StoreError> {
        match answer {
            Value::Int(acked) if *acked >= i64::from(self.replicas) => Ok(()),
            Value::Int(acked) => Err(StoreError::Unavailable {
                store: "redis",
                message: format!(
                    "{operation}: {acked} of the {} replicas asked for acknowledged the write within {:?}; \
                     a failover now could lose it",
                    self.replicas, self.timeout
                ),
                source: None,
            }),
            other => Err(StoreError::Corrupt { store: "redis", message: format!("WAIT answered {other:?}") }),
        }
    }
}

/// The settings of one server that decide what it may lose.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Settings {
    /// Which node, for messages (`None` for the one server).
    node: Option<String>,
    maxmemory_policy: Option<String>,
    appendonly: Option<String>,
}

/// Reads `maxmemory-policy` and `appendonly` on every primary and acts on
/// them as `on_eviction` says. A server that refuses `CONFIG` (renamed or
/// disabled, as managed services do, or denied by an ACL) is logged and
/// accepted: its settings are then the operator's to check.
pub(super) async fn check_settings(
    connection: &mut RedisConnection,
    endpoint: &Endpoint,
    on_eviction: OnEviction,
) -> Result<(), StoreError> {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory-policy").arg("appendonly");
    let answers = match connection.on_every_primary(cmd).await {
        Ok(answers) => answers,
        Err(error) if refuses_config(&error.to_string()) => {
            warn_unchecked(&error.to_string());
            return Ok(());
        }
        // Anything else (a server loading, a cluster down, a lost
        // connection) is no answer: fail rather than accept unchecked.
        Err(error) => return Err(endpoint.error("read the server's settings", error)),
    };
    let target = endpoint.display().unwrap_or("the caller's connection").to_owned();
    if connection.is_cluster() {
        warn_unanswered(connection, answers.len()).await;
    }
    for (node, answer) in answers {
        if let Value::ServerError(error) = &answer {
            let text = format!("{error:?}");
            if !refuses_config(&text) {
                let node = node.unwrap_or_else(|| target.clone());
                return Err(StoreError::Unavailable {
                    store: "redis",
                    message: format!("read the server's settings on {node}: {text}"),
                    source: None,
                });
            }
            warn_unchecked(&text);
            continue;
        }
        let settings = read(node, answer);
        let node = settings.node.clone().unwrap_or_else(|| target.clone());
        match settings.maxmemory_policy.as_deref() {
            Some("noeviction") => {}
            None => tracing::warn!(%node, "the server did not report its maxmemory-policy; make sure it is noeviction"),
            Some(policy) => {
                let message = format!(
                    "{node} has maxmemory-policy {policy}: under memory pressure it evicts idempotency records and \
                     leases, and a retry then runs its handler a second time; set `maxmemory-policy noeviction` \
                     (a full server then refuses new claims with 503 and keeps every record)"
                );
                match on_eviction {
                    OnEviction::Refuse => return Err(StoreError::Misconfigured { store: "redis", message }),
                    OnEviction::Warn => tracing::warn!("{message}"),
                }
            }
        }
        if settings.appendonly.as_deref() == Some("no") {
            tracing::warn!(
                %node,
                "appendonly is off: a restart of this server forgets its idempotency records (retries of completed \
                 requests would run again); use `appendonly yes` where that matters"
            );
        }
    }
    Ok(())
}

/// Logs when fewer primaries answered than the cluster has (one not
/// connected yet is skipped by the client's fan-out): their settings went
/// unchecked.
async fn warn_unanswered(connection: &mut RedisConnection, answered: usize) {
    let nodes: redis::RedisResult<String> = redis::cmd("CLUSTER").arg("NODES").query_async(connection).await;
    let Ok(nodes) = nodes else { return };
    // <id> <address> <flags> <primary> <ping> <pong> <epoch> <link> <slot>...
    let primaries = nodes
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .filter(|fields| fields.len() > 8 && fields[2].split(',').any(|flag| flag == "master"))
        .count();
    if answered < primaries {
        tracing::warn!(
            answered,
            primaries,
            "not every Redis Cluster primary answered CONFIG GET at connect; check maxmemory-policy noeviction on the \
             others by hand"
        );
    }
}

/// Whether an error says `CONFIG` is refused for good (renamed, disabled
/// or denied by an ACL), as opposed to a server that cannot answer now.
fn refuses_config(error: &str) -> bool {
    let error = error.to_ascii_lowercase();
    error.contains("noperm") || error.contains("unknown command") || error.contains("unknown subcommand")
}

fn warn_unchecked(error: &str) {
    tracing::warn!(
        error,
        "could not read maxmemory-policy and appendonly (CONFIG GET refused); check by hand that the Redis servers \
         use `maxmemory-policy noeviction`, or an evicted record lets a retry run its handler again"
    );
}

/// Reads a `CONFIG GET` answer: a map (RESP3) or a flat array of names and
/// values (RESP2).
fn read(node: Option<String>, answer: Value) -> Settings {
    let pairs: Vec<(Value, Value)> = match answer {
        Value::Map(pairs) => pairs,
        Value::Array(items) => {
            let mut items = items.into_iter();
            std::iter::from_fn(|| Some((items.next()?, items.next()?))).collect()
        }
        _ => Vec::new(),
    };
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    };
    let mut settings = Settings { node, maxmemory_policy: None, appendonly: None };
    for (name, value) in &pairs {
        match text(name).as_deref() {
            Some("maxmemory-policy") => settings.maxmemory_policy = text(value),
            Some("appendonly") => settings.appendonly = text(value),
            _ => {}
        }
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn config_answers_read_alike_in_both_protocols() {
        let resp2 = Value::Array(vec![bulk("maxmemory-policy"), bulk("allkeys-lru"), bulk("appendonly"), bulk("no")]);
        let resp3 = Value::Map(vec![(bulk("appendonly"), bulk("no")), (bulk("maxmemory-policy"), bulk("allkeys-lru"))]);
        for answer in [resp2, resp3] {
            let settings = read(None, answer);
            assert_eq!(settings.maxmemory_policy.as_deref(), Some("allkeys-lru"));
            assert_eq!(settings.appendonly.as_deref(), Some("no"));
        }
        assert_eq!(read(None, Value::Nil).maxmemory_policy, None);
    }

    #[test]
    fn only_a_refused_config_command_is_accepted_unchecked() {
        assert!(refuses_config("ERR unknown command 'CONFIG', with args beginning with: 'GET'"));
        assert!(refuses_config("NOPERM User app has no permissions to run the 'config|get' command"));
        assert!(!refuses_config("LOADING Redis is loading the dataset in memory"));
        assert!(!refuses_config("CLUSTERDOWN The cluster is down"));
        assert!(!refuses_config("broken pipe"));
    }

    #[test]
    fn too_few_acknowledgements_fail_closed() {
        let acks = ReplicaAcks { replicas: 1, timeout: Duration::from_millis(250) };
        assert!(acks.check("claim", &Value::Int(1)).is_ok());
        assert!(acks.check("claim", &Value::Int(2)).is_ok());
        let error = acks.check("claim", &Value::Int(0)).unwrap_err();
        assert!(matches!(&error, StoreError::Unavailable { message, .. } if message.contains("0 of the 1")), "{error}");
        assert!(matches!(acks.check("claim", &Value::Nil), Err(StoreError::Corrupt { .. })));
        let wait = acks.wait();
        assert_eq!(wait.args_iter().count(), 3);
    }
}

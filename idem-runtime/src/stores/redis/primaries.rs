//! A cluster's primaries, each on a connection of its own, for renewals.
//!
//! On a Redis Cluster, the store's renewals do not go through the redis
//! crate's cluster client: while a primary is dead, the renewals of its
//! slots made that client rebuild its slot map again and again, and one
//! rebuild could wait for good on the client's own lock, holding every
//! command of the connection, the live primaries' too (seen with redis
//! 1.8.1: a batch's live leases answered, the next ones not at all). The
//! leases of the whole process then went unrenewed for as long as the
//! primary stayed dead, long enough for them to lapse and for a second
//! request to run.
//!
//! Here each primary gets a plain connection (a
//! [`ConnectionManager`](redis::aio::ConnectionManager)) and a batch sends
//! one pipeline per primary: a dead primary fails its own pipeline and
//! nothing else. The slot map comes from `CLUSTER SLOTS`, asked of a
//! primary (or a seed node), and is asked again after a node fails or a
//! renewal is redirected (`MOVED`, `ASK`), which then goes through the
//! cluster client, one command each, following its redirection.

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::{RedisResult, Value};
use tokio::sync::Mutex;

use super::connection::RedisConnection;
use super::error::Endpoint;
use crate::store::StoreError;

/// The slot map and the connections of a cluster's primaries.
pub(super) struct Primaries {
    /// The seed nodes' URLs, as [`Target::parse`](super::connection::Target::parse)
    /// builds them: `scheme://[credentials@]host:port/[?query]`.
    seeds: Vec<String>,
    config: ConnectionManagerConfig,
    /// For errors, with the URL's password masked.
    endpoint: Endpoint,
    routes: Mutex<Routes>,
}

#[derive(Default)]
struct Routes {
    /// `(first slot, last slot, primary's host:port)`, by first slot.
    slots: Vec<(u16, u16, String)>,
    /// The map must be asked again before the next batch.
    stale: bool,
    /// An open connection per primary, by host:port.
    nodes: HashMap<String, RedisConnection>,
}

/// Where a batch's renewals go.
pub(super) struct Plan {
    /// Each primary's renewals (positions in the batch), with its connection.
    pub(super) groups: Vec<(String, RedisConnection, Vec<usize>)>,
    /// Renewals whose slot has no known primary: they go through the
    /// cluster client.
    pub(super) elsewhere: Vec<usize>,
    /// Renewals whose primary could not be reached: unanswered this time.
    pub(super) unreachable: Vec<usize>,
}

impl Primaries {
    pub(super) fn new(seeds: Vec<String>, config: ConnectionManagerConfig, endpoint: Endpoint) -> Self {
        Self { seeds, config, endpoint, routes: Mutex::new(Routes { stale: true, ..Routes::default() }) }
    }

    /// Groups `slots` (a batch's, in order) by primary, asking for the slot
    /// map first when it is stale, and opening the primaries' connections
    /// that are not open. A slot map that cannot be had leaves the old one
    /// in use (none at first: every renewal then goes elsewhere).
    pub(super) async fn plan(&self, slots: &[u16]) -> Plan {
        let mut routes = self.routes.lock().await;
        if routes.stale {
            match self.slot_map(&routes.nodes).await {
                Some(map) => {
                    routes.slots = map;
                    routes.stale = false;
                    let primaries: Vec<String> = routes.slots.iter().map(|(_, _, node)| node.clone()).collect();
                    routes.nodes.retain(|node, _| primaries.contains(node));
                }
                None => tracing::warn!("no node answered CLUSTER SLOTS; renewals keep the slot map they had"),
            }
        }
        let mut by_node: HashMap<String, Vec<usize>> = HashMap::new();
        let mut elsewhere = Vec::new();
        for (i, &slot) in slots.iter().enumerate() {
            match routes.primary_of(slot) {
                Some(node) => by_node.entry(node.to_owned()).or_default().push(i),
                None => elsewhere.push(i),
            }
        }
        let mut groups = Vec::with_capacity(by_node.len());
        let mut unreachable = Vec::new();
        for (node, members) in by_node {
            match self.connection(&mut routes, &node).await {
                Ok(connection) => groups.push((node, connection, members)),
                Err(error) => {
                    tracing::warn!(%node, %error, leases = members.len(), "renewals of an unreachable primary");
                    routes.stale = true;
                    unreachable.extend(members);
                }
            }
        }
        Plan { groups, elsewhere, unreachable }
    }

    /// Forgets `node`'s connection (it failed or did not answer in time)
    /// and asks for the slot map again before the next batch.
    pub(super) async fn failed(&self, node: &str) {
        let mut routes = self.routes.lock().await;
        routes.nodes.remove(node);
        routes.stale = true;
    }

    /// Asks for the slot map again before the next batch (a renewal was
    /// redirected).
    pub(super) async fn moved(&self) {
        self.routes.lock().await.stale = true;
    }

    /// `node`'s connection, opened now (within the connection timeout) if
    /// it is not open.
    async fn connection(&self, routes: &mut Routes, node: &str) -> Result<RedisConnection, StoreError> {
        if let Some(connection) = routes.nodes.get(node) {
            return Ok(connection.clone());
        }
        let limit = self.config.connection_timeout().unwrap_or(Duration::from_secs(1));
        let connection = match tokio::time::timeout(limit, self.open(node)).await {
            Ok(opened) => opened.map_err(|e| self.endpoint.error("connect to a primary for renewals", e))?,
            Err(_) => return Err(StoreError::Timeout { store: "redis", after: limit }),
        };
        routes.nodes.insert(node.to_owned(), connection.clone());
        Ok(connection)
    }

    /// A plain connection to `node` (host:port), with the seed URLs'
    /// scheme, credentials and query.
    async fn open(&self, node: &str) -> RedisResult<RedisConnection> {
        let seed = self.seeds.first().map_or("redis://", String::as_str);
        let client = redis::Client::open(with_node(seed, node))?;
        let manager = redis::aio::ConnectionManager::new_with_config(client, self.config.clone()).await?;
        Ok(RedisConnection::from(manager))
    }

    /// The slot map, from the first node that answers `CLUSTER SLOTS`: the
    /// primaries known, then the seeds.
    async fn slot_map(&self, nodes: &HashMap<String, RedisConnection>) -> Option<Vec<(u16, u16, String)>> {
        let limit = self.config.response_timeout().unwrap_or(Duration::from_secs(1));
        for (node, connection) in nodes {
            let mut connection = connection.clone();
            let command = redis::cmd("CLUSTER").arg("SLOTS").clone();
            let asked = tokio::time::timeout(limit, command.query_async::<Value>(&mut connection));
            if let Ok(Ok(reply)) = asked.await
                && let Some(map) = parse_slots(&reply, host_of(node))
            {
                return Some(map);
            }
        }
        for seed in &self.seeds {
            let Some(node) = authority(seed) else { continue };
            let asked = async {
                let mut connection = self.open(node).await?;
                redis::cmd("CLUSTER").arg("SLOTS").query_async::<Value>(&mut connection).await
            };
            if let Ok(Ok(reply)) = tokio::time::timeout(limit * 2, asked).await
                && let Some(map) = parse_slots(&reply, host_of(node))
            {
                return Some(map);
            }
        }
        None
    }
}

impl Routes {
    fn primary_of(&self, slot: u16) -> Option<&str> {
        let at = self.slots.partition_point(|(first, _, _)| *first <= slot).checked_sub(1)?;
        let (_, last, node) = &self.slots[at];
        (slot <= *last).then_some(node.as_str())
    }
}

/// The cluster slot of a record key: CRC16 (XMODEM) of its hash tag (the
/// text between its first `{` and the next `}`, when not empty), else of
/// the whole key, modulo 16384.
pub(super) fn slot_of(key: &str) -> u16 {
    let tag = key
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes()) % 16384
}

/// Reads a `CLUSTER SLOTS` reply: each range's primary as host:port (an
/// empty host is the node that answered, `asked`). `None` when the reply
/// is not one.
fn parse_slots(reply: &Value, asked: &str) -> Option<Vec<(u16, u16, String)>> {
    let Value::Array(ranges) = reply else { return None };
    let mut map = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(fields) = range else { return None };
        let [Value::Int(first), Value::Int(last), Value::Array(primary), ..] = fields.as_slice() else { return None };
        let host = match primary.first()? {
            Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            Value::SimpleString(text) => text.clone(),
            _ => return None,
        };
        let Value::Int(port) = primary.get(1)? else { return None };
        let host = if host.is_empty() || host == "?" { asked.to_owned() } else { host };
        let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host };
        map.push((u16::try_from(*first).ok()?, u16::try_from(*last).ok()?, format!("{host}:{port}")));
    }
    map.sort_unstable_by_key(|(first, _, _)| *first);
    Some(map)
}

/// The host:port of a seed URL (`scheme://[credentials@]host:port/...`).
fn authority(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    Some(authority.rsplit_once('@').map_or(authority, |(_, host)| host))
}

/// The host of a host:port.
fn host_of(node: &str) -> &str {
    node.rsplit_once(':').map_or(node, |(host, _)| host)
}

/// `seed` with its host:port replaced by `node`.
fn with_node(seed: &str, node: &str) -> String {
    let Some((scheme, rest)) = seed.split_once("://") else { return format!("redis://{node}/") };
    let end = rest.find('/').unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let credentials = authority.rsplit_once('@').map_or("", |(credentials, _)| credentials);
    let at = if credentials.is_empty() { "" } else { "@" };
    format!("{scheme}://{credentials}{at}{node}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(first: i64, last: i64, host: &str, port: i64) -> Value {
        let node =
            Value::Array(vec![Value::BulkString(host.into()), Value::Int(port), Value::BulkString(b"id".to_vec())]);
        Value::Array(vec![Value::Int(first), Value::Int(last), node])
    }

    #[test]
    fn the_slot_map_names_each_ranges_primary() {
        let reply = Value::Array(vec![range(5461, 10922, "", 7001), range(0, 5460, "10.0.0.1", 7000)]);
        let map = parse_slots(&reply, "127.0.0.1").unwrap();
        assert_eq!(map, vec![(0, 5460, "10.0.0.1:7000".to_owned()), (5461, 10922, "127.0.0.1:7001".to_owned())]);
        let routes = Routes { slots: map, ..Routes::default() };
        assert_eq!(routes.primary_of(0), Some("10.0.0.1:7000"));
        assert_eq!(routes.primary_of(5460), Some("10.0.0.1:7000"));
        assert_eq!(routes.primary_of(5461), Some("127.0.0.1:7001"));
        assert_eq!(routes.primary_of(10923), None, "a slot nobody serves");
        assert_eq!(parse_slots(&Value::Nil, "h"), None);
        let ipv6 = parse_slots(&Value::Array(vec![range(0, 1, "::1", 7000)]), "h").unwrap();
        assert_eq!(ipv6[0].2, "[::1]:7000");
    }

    #[test]
    fn slots_are_the_clusters() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot_of("123456789"), 0x31C3);
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("{user1000}.following"), slot_of("user1000"));
        assert_ne!(slot_of("foo{}{bar}"), slot_of("bar"), "an empty tag: the whole key");
        assert_eq!(slot_of("foo{{bar}}zap"), slot_of("{bar"));
        assert_eq!(slot_of("foo{bar}{zap}"), slot_of("bar"));
    }

    #[test]
    fn node_urls_keep_the_seeds_scheme_credentials_and_query() {
        assert_eq!(
            with_node("rediss://u:p@seed:1/?protocol=resp3", "10.0.0.2:7002"),
            "rediss://u:p@10.0.0.2:7002/?protocol=resp3"
        );
        assert_eq!(with_node("redis://seed:1/", "h:2"), "redis://h:2/");
        assert_eq!(authority("redis://u:p@seed:1/?x"), Some("seed:1"));
        assert_eq!(authority("redis://seed:1"), Some("seed:1"));
        assert_eq!(host_of("[::1]:7000"), "[::1]");
    }
}

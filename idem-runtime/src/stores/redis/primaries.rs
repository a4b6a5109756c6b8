//! Lease renewals on a Redis Cluster, sent straight to each primary.
//!
//! The store's renewals do not go through the redis crate's cluster
//! client: while a primary is dead, the renewals of its slots set that
//! client (redis 1.8.1) rebuilding its slot map again and again, and one
//! rebuild could wait for good on the client's own lock, holding every
//! command of the connection, the live primaries' too. The leases of the
//! whole process then went unrenewed for as long as the primary stayed
//! dead, long enough for them to lapse and for a second request to run.
//!
//! Here each primary gets a plain connection (a
//! [`ConnectionManager`](redis::aio::ConnectionManager), connected when
//! first used) and a batch sends one pipeline per primary, each within the
//! batch's budget: a dead or hung primary fails its own pipeline and
//! nothing else, and nothing waits on a network call while holding a
//! lock. The slot map comes from `CLUSTER SLOTS`, asked of every known
//! primary and seed node at once (the first answer wins, within half the
//! budget, one batch asking at a time), and is asked again after a primary
//! fails, is late, redirects a renewal (`MOVED`, `ASK`: those renewals go
//! through the cluster client, one command each) or answers `CLUSTERDOWN`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::{join_all, select_ok};
use redis::Value;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::RedisStore;
use super::connection::RedisConnection;
use super::error::Endpoint;
use super::renewals::{gather, within};
use crate::store::{Fence, Renewal, StoreError};

/// The slot map and the connections of a cluster's primaries.
pub(super) struct Primaries {
    /// The seed nodes' URLs, as `Target::parse` builds them:
    /// `scheme://[credentials@]host:port/[?query]`.
    seeds: Vec<String>,
    config: ConnectionManagerConfig,
    /// For errors, with the URL's password masked.
    endpoint: Endpoint,
    routes: Mutex<Routes>,
    /// A batch is asking for the slot map (one at a time; the others use
    /// the map they have).
    asking: AtomicBool,
}

/// A primary's host:port, as `CLUSTER SLOTS` names it.
type Node = String;

#[derive(Default)]
struct Routes {
    /// `(first slot, last slot, primary)`, by first slot.
    slots: Vec<(u16, u16, Node)>,
    /// The map must be asked for again.
    stale: bool,
    /// Each primary's connection, made when first needed.
    nodes: HashMap<Node, RedisConnection>,
}

impl Primaries {
    /// Renewals for the cluster reached through `seeds` (node URLs), each
    /// primary's connection with `config`'s timeouts; errors name
    /// `endpoint`.
    pub(super) fn new(seeds: Vec<String>, config: ConnectionManagerConfig, endpoint: Endpoint) -> Self {
        let routes = Mutex::new(Routes { stale: true, ..Routes::default() });
        Self { seeds, config, endpoint, routes, asking: AtomicBool::new(false) }
    }

    fn routes(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.routes.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Each primary's renewals (positions in `slots`, a batch's slots in
    /// order) with its connection, and the positions whose slot has no
    /// known primary. Asks for the slot map first, within `limit`, when it
    /// is stale and no other batch is asking; else uses the map it has
    /// (none at first: every renewal then has no known primary).
    async fn plan(&self, slots: &[u16], limit: Duration) -> (Vec<(Node, RedisConnection, Vec<usize>)>, Vec<usize>) {
        let stale = self.routes().stale;
        if stale && !self.asking.swap(true, Ordering::AcqRel) {
            // Reset however the ask ends, the batch dropped midway included.
            let _asking = Asking(&self.asking);
            let asked = tokio::time::timeout(limit, self.slot_map()).await;
            match asked {
                Ok(Some(map)) => {
                    let mut routes = self.routes();
                    routes.nodes.retain(|node, _| map.iter().any(|(_, _, primary)| primary == node));
                    routes.slots = map;
                    routes.stale = false;
                }
                _ => tracing::warn!(
                    ?limit,
                    "no node answered CLUSTER SLOTS in time; renewals keep the slot map they have"
                ),
            }
        }
        let mut routes = self.routes();
        let mut by_node: HashMap<Node, Vec<usize>> = HashMap::new();
        let mut elsewhere = Vec::new();
        for (i, &slot) in slots.iter().enumerate() {
            match routes.primary_of(slot) {
                Some(node) => by_node.entry(node.to_owned()).or_default().push(i),
                None => elsewhere.push(i),
            }
        }
        let mut groups = Vec::with_capacity(by_node.len());
        for (node, members) in by_node {
            match self.connection(&mut routes, &node) {
                Ok(connection) => groups.push((node, connection, members)),
                Err(error) => {
                    tracing::warn!(%node, %error, "a primary's renewals go through the cluster client");
                    elsewhere.extend(members);
                }
            }
        }
        (groups, elsewhere)
    }

    /// Forgets `node`'s connection (it failed, or was late) and marks the
    /// map for asking again.
    fn failed(&self, node: &str) {
        let mut routes = self.routes();
        routes.nodes.remove(node);
        routes.stale = true;
    }

    /// Marks the map for asking again (a renewal was redirected, or a node
    /// answered `CLUSTERDOWN`).
    fn remap(&self) {
        self.routes().stale = true;
    }

    /// `node`'s connection; a new one connects when first used.
    fn connection(&self, routes: &mut Routes, node: &str) -> Result<RedisConnection, StoreError> {
        if let Some(connection) = routes.nodes.get(node) {
            return Ok(connection.clone());
        }
        let connection = self.open(node)?;
        routes.nodes.insert(node.to_owned(), connection.clone());
        Ok(connection)
    }

    /// A plain connection to `node` (host:port) with the seed URLs'
    /// scheme, credentials and query, connected when first used.
    fn open(&self, node: &str) -> Result<RedisConnection, StoreError> {
        let seed = self.seeds.first().map_or("redis://", String::as_str);
        let manager = redis::Client::open(with_node(seed, node))
            .and_then(|client| ConnectionManager::new_lazy_with_config(client, self.config.clone()))
            .map_err(|e| self.endpoint.error("connect to a primary for renewals", e))?;
        Ok(RedisConnection::from(manager))
    }

    /// The slot map: `CLUSTER SLOTS` asked of the known primaries and the
    /// seeds at once; the first good answer.
    async fn slot_map(&self) -> Option<Vec<(u16, u16, Node)>> {
        let known: Vec<(Node, RedisConnection)> =
            self.routes().nodes.iter().map(|(node, connection)| (node.clone(), connection.clone())).collect();
        let mut asked: Vec<(Node, RedisConnection)> = known;
        for seed in &self.seeds {
            let Some(node) = authority(seed) else { continue };
            if asked.iter().any(|(known, _)| known == node) {
                continue;
            }
            if let Ok(connection) = self.open(node) {
                asked.push((node.to_owned(), connection));
            }
        }
        let asks = asked.into_iter().map(|(node, mut connection)| {
            async move {
                let reply: Value =
                    redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut connection).await.map_err(drop)?;
                parse_slots(&reply, host_of(&node)).ok_or(())
            }
            .boxed()
        });
        let asks: Vec<_> = asks.collect();
        if asks.is_empty() {
            return None;
        }
        select_ok(asks).await.ok().map(|(map, _)| map)
    }
}

/// Ends a batch's asking for the slot map when dropped.
struct Asking<'a>(&'a AtomicBool);

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Routes {
    /// The primary serving `slot`, by the map.
    fn primary_of(&self, slot: u16) -> Option<&str> {
        let at = self.slots.partition_point(|(first, _, _)| *first <= slot).checked_sub(1)?;
        let (_, last, node) = &self.slots[at];
        (slot <= *last).then_some(node.as_str())
    }
}

impl RedisStore {
    /// A batch on a cluster's primaries: one pipeline on each primary's own
    /// connection, all sent at once, each within the group budget (after at
    /// most half of it asking for the slot map), and the renewals of slots
    /// without a known primary through the cluster client. A primary that
    /// fails or is late leaves its own renewals unanswered; its connection
    /// is made again, and the slot map asked for again, by the next batch.
    pub(super) async fn renew_on_primaries(
        &self,
        primaries: &Primaries,
        renewals: &[Renewal],
    ) -> Result<Vec<Fence>, StoreError> {
        let budget = self.group_budget();
        let slots: Vec<u16> = renewals.iter().map(|renewal| slot_of(&self.record_key(&renewal.key))).collect();
        let (groups, elsewhere) = primaries.plan(&slots, budget / 2).await;
        let sent = groups.iter().map(|(node, connection, members)| {
            let group = self.renew_group(connection.clone(), members.iter().map(|&i| &renewals[i]).collect());
            async move {
                let answered = within(budget, group).await;
                match &answered {
                    Ok((_, true)) => primaries.remap(),
                    Ok((_, false)) => {}
                    Err(_) => primaries.failed(node),
                }
                answered.map(|(fences, _)| fences)
            }
        });
        let others: Vec<&Renewal> = elsewhere.iter().map(|&i| &renewals[i]).collect();
        let (mut answered, others) = futures_util::future::join(join_all(sent), async {
            within(budget, async { Ok(self.renew_each(&others).await) }).await
        })
        .await;
        let mut members: Vec<Vec<usize>> = groups.into_iter().map(|(_, _, members)| members).collect();
        if !elsewhere.is_empty() {
            members.push(elsewhere);
            answered.push(others);
        }
        gather(renewals.len(), &members, answered)
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

/// Reads a `CLUSTER SLOTS` reply: each range's primary as host:port, where
/// an empty or null host is the node that answered (`asked`). A range whose
/// primary's address is unknown (`?`) is left out: its slots have no known
/// primary. `None` when the reply is not one.
fn parse_slots(reply: &Value, asked: &str) -> Option<Vec<(u16, u16, Node)>> {
    let Value::Array(ranges) = reply else { return None };
    let mut map = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(fields) = range else { return None };
        let [Value::Int(first), Value::Int(last), Value::Array(primary), ..] = fields.as_slice() else { return None };
        let host = match primary.first()? {
            Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            Value::SimpleString(text) => text.clone(),
            Value::Nil => String::new(),
            _ => return None,
        };
        let Value::Int(port) = primary.get(1)? else { return None };
        if host == "?" {
            continue;
        }
        let host = if host.is_empty() { asked.to_owned() } else { host };
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

    fn range(first: i64, last: i64, host: Value, port: i64) -> Value {
        let node = Value::Array(vec![host, Value::Int(port), Value::BulkString(b"id".to_vec())]);
        Value::Array(vec![Value::Int(first), Value::Int(last), node])
    }

    fn host(name: &str) -> Value {
        Value::BulkString(name.into())
    }

    #[test]
    fn the_slot_map_names_each_ranges_primary() {
        let reply = Value::Array(vec![range(5461, 10922, host(""), 7001), range(0, 5460, host("10.0.0.1"), 7000)]);
        let map = parse_slots(&reply, "127.0.0.1").unwrap();
        assert_eq!(map, vec![(0, 5460, "10.0.0.1:7000".to_owned()), (5461, 10922, "127.0.0.1:7001".to_owned())]);
        let routes = Routes { slots: map, ..Routes::default() };
        assert_eq!(routes.primary_of(0), Some("10.0.0.1:7000"));
        assert_eq!(routes.primary_of(5460), Some("10.0.0.1:7000"));
        assert_eq!(routes.primary_of(5461), Some("127.0.0.1:7001"));
        assert_eq!(routes.primary_of(10923), None, "a slot nobody serves");
        assert_eq!(parse_slots(&Value::Nil, "h"), None);
    }

    #[test]
    fn unknown_and_ipv6_hosts() {
        let ipv6 = parse_slots(&Value::Array(vec![range(0, 1, host("::1"), 7000)]), "h").unwrap();
        assert_eq!(ipv6[0].2, "[::1]:7000");
        // `cluster-preferred-endpoint-type unknown-endpoint`: a null host.
        let null = parse_slots(&Value::Array(vec![range(0, 1, Value::Nil, 7000)]), "10.0.0.9").unwrap();
        assert_eq!(null[0].2, "10.0.0.9:7000");
        // A hostname preferred but none set: `?`, left out.
        let unknown = parse_slots(&Value::Array(vec![range(0, 1, host("?"), 7000), range(2, 3, host("b"), 1)]), "h");
        assert_eq!(unknown.unwrap(), vec![(2, 3, "b:1".to_owned())]);
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

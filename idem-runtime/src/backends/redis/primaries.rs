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
//! nothing else, and nothing waits on a network call while holding the
//! map's lock. The slot map comes from `CLUSTER SLOTS`, asked of every
//! known primary and seed node at once, within half the budget, one batch
//! asking at a time: the view most of the nodes that answer share (a node
//! cut off from the others may still name itself), among those that map
//! any slot. A batch sent meanwhile uses the map it has, or, if that map
//! does not know its slots (no map yet), waits for the answer, within the
//! same half of its own budget. The map is asked for again after a
//! primary fails, is late, redirects a renewal or answers `CLUSTERDOWN`,
//! and when renewals have slots it does not map (those are unanswered
//! meanwhile). A renewal answered `MOVED` or `ASK` is sent once more, to
//! the node named, on that node's own connection (after `ASKING` for
//! `ASK`); never through the cluster client.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use redis::Value;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::connection::RedisConnection;
use super::error::Endpoint;
use super::groups::{Answered, gather, within};
use super::{RedisStore, slot_of};
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
    /// Held by the batch asking for the slot map, one at a time, until the
    /// map it got is in place (or the ask failed), however the ask ends.
    asking: tokio::sync::Mutex<()>,
}

/// A primary's host:port, as `CLUSTER SLOTS` names it.
type Node = String;

/// A slot map: `(first slot, last slot, primary)`, by first slot.
type SlotMap = Vec<(u16, u16, Node)>;

#[derive(Default)]
struct Routes {
    /// The map.
    slots: SlotMap,
    /// Marks for asking for the map again, counted.
    marks: u64,
    /// The count of marks when the map in use was asked for (`None`: no
    /// map yet). It is stale unless no mark came since.
    asked_at: Option<u64>,
    /// Each primary's connection, made when first needed.
    nodes: HashMap<Node, RedisConnection>,
    /// The seed nodes' connections, for asking for the map.
    seeds: HashMap<Node, RedisConnection>,
}

impl Primaries {
    /// Renewals for the cluster reached through `seeds` (node URLs), each
    /// primary's connection with `config`'s timeouts; errors name
    /// `endpoint`.
    pub(super) fn new(seeds: Vec<String>, config: ConnectionManagerConfig, endpoint: Endpoint) -> Self {
        let routes = Mutex::new(Routes::default());
        Self { seeds, config, endpoint, routes, asking: tokio::sync::Mutex::new(()) }
    }

    fn routes(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.routes.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Each primary's renewals (positions in `slots`, a batch's slots in
    /// order) with its connection, and the positions whose slot the map
    /// does not know. Asks for the slot map first, within `limit`, when it
    /// is stale and no other batch is asking. While another batch asks, it
    /// uses the map it has if that map knows every slot of `slots`, and
    /// else (no map yet, or one that lacks a slot) waits for the other's
    /// answer, within `limit`.
    async fn plan(&self, slots: &[u16], limit: Duration) -> (Vec<(Node, RedisConnection, Vec<usize>)>, Vec<usize>) {
        let (stale, marks) = {
            let routes = self.routes();
            (routes.asked_at != Some(routes.marks), routes.marks)
        };
        if stale {
            match self.asking.try_lock() {
                // Released however the ask ends, the batch dropped midway
                // included.
                Ok(_asking) => self.ask(marks, limit).await,
                Err(_) if !self.knows(slots) => {
                    // The ask under way ends within its own limit; its map
                    // (or the one there was, if it failed) is read below.
                    let _ = tokio::time::timeout(limit, self.asking.lock()).await;
                }
                Err(_) => {}
            }
        }
        let mut routes = self.routes();
        let mut by_node: HashMap<Node, Vec<usize>> = HashMap::new();
        let mut unmapped = Vec::new();
        for (i, &slot) in slots.iter().enumerate() {
            match routes.primary_of(slot) {
                Some(node) => by_node.entry(node.to_owned()).or_default().push(i),
                None => unmapped.push(i),
            }
        }
        let mut groups = Vec::with_capacity(by_node.len());
        for (node, members) in by_node {
            match self.connection(&mut routes, &node) {
                Ok(connection) => groups.push((node, connection, members)),
                Err(error) => {
                    tracing::warn!(%node, %error, "no connection to a primary for renewals");
                    unmapped.extend(members);
                }
            }
        }
        if !unmapped.is_empty() {
            routes.mark();
        }
        (groups, unmapped)
    }

    /// Asks for the slot map, within `limit`, and puts it in place as the
    /// map asked for after `marks` marks; keeps the map there is if no
    /// node answers in time.
    async fn ask(&self, marks: u64, limit: Duration) {
        match self.slot_map(limit).await {
            Some(map) => {
                let mut routes = self.routes();
                routes.nodes.retain(|node, _| map.iter().any(|(_, _, primary)| primary == node));
                routes.slots = map;
                routes.asked_at = Some(marks);
            }
            None => {
                tracing::warn!(?limit, "no node answered CLUSTER SLOTS in time; renewals keep the slot map they have")
            }
        }
    }

    /// Whether the map names a primary for each of `slots`.
    fn knows(&self, slots: &[u16]) -> bool {
        let routes = self.routes();
        slots.iter().all(|&slot| routes.primary_of(slot).is_some())
    }

    /// Forgets `node`'s connection (it failed, or was late) and marks the
    /// map for asking again.
    fn failed(&self, node: &str) {
        let mut routes = self.routes();
        routes.nodes.remove(node);
        routes.mark();
    }

    /// Marks the map for asking again (a renewal was redirected, or a node
    /// answered `CLUSTERDOWN`).
    fn remap(&self) {
        self.routes().mark();
    }

    /// `node`'s connection (any node: one a renewal was redirected to too).
    fn connection_to(&self, node: &str) -> Result<RedisConnection, StoreError> {
        self.connection(&mut self.routes(), node)
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
    /// seeds at once. Answers are gathered until all have come, or for
    /// [`GRACE`] after the first that maps a slot, or for `limit`; the view
    /// most of them share wins (the one mapping more slots on a tie), so
    /// that a node with no slots, or cut off from the others and still
    /// naming itself, is outvoted.
    async fn slot_map(&self, limit: Duration) -> Option<SlotMap> {
        let asked: Vec<(Node, RedisConnection)> = {
            let mut routes = self.routes();
            for seed in &self.seeds {
                let Some(node) = authority(seed) else { continue };
                if !routes.seeds.contains_key(node)
                    && let Ok(connection) = self.open(node)
                {
                    routes.seeds.insert(node.to_owned(), connection);
                }
            }
            let known = routes.nodes.iter().filter(|(node, _)| !routes.seeds.contains_key(*node));
            known.chain(&routes.seeds).map(|(node, connection)| (node.clone(), connection.clone())).collect()
        };
        let mut answers: FuturesUnordered<_> = asked
            .into_iter()
            .map(|(node, mut connection)| async move {
                let reply: Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut connection).await.ok()?;
                parse_slots(&reply, host_of(&node)).filter(|map| !map.is_empty())
            })
            .collect();
        let mut deadline = Instant::now() + limit;
        let mut views: Vec<(SlotMap, usize)> = Vec::new();
        while let Ok(Some(answer)) = tokio::time::timeout_at(deadline.into(), answers.next()).await {
            let Some(map) = answer else { continue };
            if views.is_empty() {
                deadline = deadline.min(Instant::now() + GRACE);
            }
            match views.iter_mut().find(|(view, _)| *view == map) {
                Some((_, count)) => *count += 1,
                None => views.push((map, 1)),
            }
        }
        let covered = |map: &[(u16, u16, Node)]| {
            map.iter().map(|(first, last, _)| usize::from(last.saturating_sub(*first)) + 1).sum::<usize>()
        };
        views.into_iter().max_by_key(|(map, count)| (*count, covered(map))).map(|(map, _)| map)
    }
}

/// How long answers to `CLUSTER SLOTS` are awaited after the first.
const GRACE: Duration = Duration::from_millis(50);

impl Routes {
    /// Marks the map for asking again.
    fn mark(&mut self) {
        self.marks += 1;
    }

    /// The primary serving `slot`, by the map.
    fn primary_of(&self, slot: u16) -> Option<&str> {
        let at = self.slots.partition_point(|(first, _, _)| *first <= slot).checked_sub(1)?;
        let (_, last, node) = &self.slots[at];
        (slot <= *last).then_some(node.as_str())
    }
}

impl RedisStore {
    /// A batch on a cluster's primaries: one pipeline on each primary's own
    /// connection, all sent at once, the whole within the group budget
    /// (asking for the slot map first, or waiting for another batch's ask,
    /// takes at most half of it). A primary
    /// that fails or is late leaves its own renewals unanswered; its
    /// connection is made again, and the slot map asked for again, by the
    /// next batch. Renewals of slots the map does not know are unanswered.
    pub(super) async fn renew_on_primaries(
        &self,
        primaries: &Primaries,
        renewals: &[Renewal],
    ) -> Result<Vec<Fence>, StoreError> {
        let budget = self.group_budget();
        let started = Instant::now();
        let slots: Vec<u16> = renewals.iter().map(|renewal| slot_of(&self.record_key(&renewal.key))).collect();
        let (groups, unmapped) = primaries.plan(&slots, budget / 2).await;
        let deadline = started + budget;
        let sent = groups.iter().map(|(node, connection, members)| async move {
            let group: Vec<&Renewal> = members.iter().map(|&i| &renewals[i]).collect();
            let left = deadline.saturating_duration_since(Instant::now());
            let mut answered = match within(left, self.renew_group(connection.clone(), &group, false)).await {
                Ok(answered) => answered,
                Err(error) => {
                    primaries.failed(node);
                    return Err(error);
                }
            };
            if answered.remap {
                primaries.remap();
            }
            // The redirected renewals only: a target that fails or is late
            // leaves them unanswered, and this node's own answers stand.
            self.follow(primaries, node, &group, &mut answered, deadline).await;
            Ok(answered.fences)
        });
        let mut answered = join_all(sent).await;
        let mut members: Vec<Vec<usize>> = groups.into_iter().map(|(_, _, members)| members).collect();
        if !unmapped.is_empty() {
            let message = format!("{} renewals' slots have no known primary", unmapped.len());
            members.push(unmapped);
            answered.push(Err(StoreError::Unavailable { store: "redis", message, source: None }));
        }
        gather(renewals.len(), &members, answered)
    }

    /// Sends the renewals of `group` (sent to `node`) that were redirected
    /// once more, to the node named, on that node's own connection, one
    /// pipeline per node (after `ASKING` each for `ASK`), each by
    /// `deadline`. One that fails again stays [`Fence::Unknown`]; a node
    /// that fails or is late is connected to again, and the map asked for
    /// again, by the next batch.
    async fn follow(
        &self,
        primaries: &Primaries,
        node: &str,
        group: &[&Renewal],
        answered: &mut Answered,
        deadline: Instant,
    ) {
        let mut targets: HashMap<(Node, bool), Vec<usize>> = HashMap::new();
        for redirect in &answered.redirects {
            let Some(target) = redirect_target(node, &redirect.node) else { continue };
            targets.entry((target, redirect.ask)).or_default().push(redirect.at);
        }
        let sent = targets.into_iter().map(|((target, ask), at)| async move {
            let renewals: Vec<&Renewal> = at.iter().map(|&i| group[i]).collect();
            let left = deadline.saturating_duration_since(Instant::now());
            let fences = match primaries.connection_to(&target) {
                Ok(connection) => match within(left, self.renew_group(connection, &renewals, ask)).await {
                    Ok(again) => again.fences,
                    Err(error) => {
                        tracing::warn!(%target, %error, "redirected renewals failed");
                        primaries.failed(&target);
                        vec![Fence::Unknown; at.len()]
                    }
                },
                Err(error) => {
                    tracing::warn!(%target, %error, "no connection for redirected renewals");
                    vec![Fence::Unknown; at.len()]
                }
            };
            (at, fences)
        });
        for (at, fences) in join_all(sent).await {
            for (i, fence) in at.into_iter().zip(fences) {
                answered.fences[i] = fence;
            }
        }
    }
}

/// Reads a `CLUSTER SLOTS` reply: each range's primary as host:port, where
/// an empty or null host is the node that answered (`asked`). A range whose
/// primary's address is unknown (`?`) is left out: its slots have no known
/// primary. `None` when the reply is not one.
fn parse_slots(reply: &Value, asked: &str) -> Option<SlotMap> {
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

/// Where a `MOVED` or `ASK` sent a renewal that went to `asked`: the
/// host:port it names, bracketed when an IPv6 address (Redis writes
/// `::1:7000`), and `asked`'s host when it names a port only (`:7000`).
fn redirect_target(asked: &str, named: &str) -> Option<Node> {
    let (host, port) = named.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    let host = if host.is_empty() {
        host_of(asked).to_owned()
    } else if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    Some(format!("{host}:{port}"))
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

    #[test]
    fn redirects_name_their_node() {
        assert_eq!(redirect_target("10.0.0.1:7000", "10.0.0.2:7001").as_deref(), Some("10.0.0.2:7001"));
        assert_eq!(redirect_target("10.0.0.1:7000", ":7001").as_deref(), Some("10.0.0.1:7001"));
        assert_eq!(redirect_target("[::1]:7000", "::1:7001").as_deref(), Some("[::1]:7001"));
        assert_eq!(redirect_target("[::1]:7000", ":7001").as_deref(), Some("[::1]:7001"));
        assert_eq!(redirect_target("h:1", "nonsense"), None);
    }
}

//! One node of a Redis Cluster, reached over a plain (non-cluster)
//! connection: a command on it, a field of its `INFO`, the slots it serves,
//! and the nodes of a `redis-cluster://` URL. For the private clusters of
//! [`crate::redis_cluster`] and the shared one in `IDEM_REDIS_CLUSTER_URL`.

use std::ops::RangeInclusive;
use std::time::Duration;

use redis::{Cmd, FromRedisValue, RedisResult};

/// How long one command on one node may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs one command on the node at `address` (`host:port`) over a plain,
/// non-cluster connection, which fails after a few seconds.
pub fn query<T: FromRedisValue>(address: &str, command: &Cmd) -> RedisResult<T> {
    let client = redis::Client::open(format!("redis://{address}/"))?;
    let mut connection = client.get_connection_with_timeout(COMMAND_TIMEOUT)?;
    connection.set_read_timeout(Some(COMMAND_TIMEOUT))?;
    connection.set_write_timeout(Some(COMMAND_TIMEOUT))?;
    command.query(&mut connection)
}

/// The seed nodes (`host:port`) of a `redis-cluster://h1:p1,h2:p2,...` URL.
pub fn seeds(url: &str) -> Vec<String> {
    let list = url.strip_prefix("redis-cluster://").unwrap_or_else(|| panic!("not a redis-cluster:// URL: {url}"));
    list.trim_end_matches('/').split(',').map(str::to_owned).collect()
}

/// The value of `field` in an `INFO` or `CLUSTER INFO` reply.
pub fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| line.strip_prefix(field)?.strip_prefix(':')).map(str::trim_end)
}

/// The slots the node at `address` serves by its own account (the `myself`
/// line of its `CLUSTER NODES`): empty for a replica, `None` when it does
/// not answer.
pub fn served_slots(address: &str) -> Option<Vec<RangeInclusive<u16>>> {
    let nodes: String = query(address, redis::cmd("CLUSTER").arg("NODES")).ok()?;
    // <id> <ip:port@bus> <flags> <primary> <ping> <pong> <epoch> <link> <slot>...
    let has_flag = |fields: &[&str], flag: &str| fields.get(2).is_some_and(|flags| flags.split(',').any(|f| f == flag));
    let myself = nodes
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|fields| has_flag(fields, "myself"))?;
    if !has_flag(&myself, "master") {
        return Some(Vec::new());
    }
    // A slot being migrated shows as `[slot->-id]` or `[slot-<-id]`.
    let slots = myself.get(8..).unwrap_or_default().iter().filter(|slot| !slot.starts_with('[')).filter_map(|slot| {
        let (start, end) = slot.split_once('-').unwrap_or((slot, slot));
        Some(start.parse().ok()?..=end.parse().ok()?)
    });
    Some(slots.collect())
}

/// The cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the text
/// between its first `{` and the next `}`, if not empty), else of the whole
/// key, modulo 16384; as Redis computes it, without asking a node.
pub fn slot_of(key: &str) -> u16 {
    let tag = key
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &byte in tag.as_bytes() {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % 16384
}

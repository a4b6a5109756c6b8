//! Free loopback ports for the servers the tests start.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// A loopback port that was free a moment ago (another process may take it
/// before the caller binds it).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a free loopback port");
    listener.local_addr().expect("local address of a bound socket").port()
}

/// First and last port of [`reserved_ports`]: below Linux's default
/// ephemeral range (32768 to 60999), which no bind to port 0 hands out.
const RESERVED: (u32, u32) = (20_000, 32_767);

/// How many ports of the reserved range this process has handed out.
static HANDED_OUT: AtomicU32 = AtomicU32::new(0);

/// `count` distinct loopback ports that were free a moment ago, taken from
/// below the ephemeral range and never handed out twice in one process.
/// For servers a test kills: the port of a dead cluster node must not be
/// taken by another test's server (a proxy, a plain Redis on a free port),
/// which the cluster client, with its old slot map, would then talk to.
pub fn reserved_ports(count: usize) -> Vec<u16> {
    let span = RESERVED.1 - RESERVED.0 + 1;
    // Each process starts somewhere else, so that two test binaries running
    // at once rarely probe the same ports.
    let start = std::process::id().wrapping_mul(7_919) % span;
    let mut listeners = Vec::with_capacity(count);
    while listeners.len() < count {
        let taken = HANDED_OUT.fetch_add(1, Ordering::Relaxed);
        assert!(taken < span, "the reserved port range is used up");
        let port = RESERVED.0 + (start + taken) % span;
        let port = u16::try_from(port).expect("the reserved range fits in u16");
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            listeners.push(listener);
        }
    }
    listeners.iter().map(|l| l.local_addr().expect("local address of a bound socket").port()).collect()
}

//! Free loopback ports for the servers the tests start.

use std::net::TcpListener;

/// A loopback port that was free a moment ago (another process may take it
/// before the caller binds it).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a free loopback port");
    listener.local_addr().expect("local address of a bound socket").port()
}

/// `count` distinct loopback ports that were free a moment ago (all bound at
/// once while probing, so none repeats).
pub fn free_ports(count: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> =
        (0..count).map(|_| TcpListener::bind("127.0.0.1:0").expect("binding a free loopback port")).collect();
    listeners.iter().map(|l| l.local_addr().expect("local address of a bound socket").port()).collect()
}

//! Free loopback ports for the servers the tests start.

use std::net::TcpListener;

/// A loopback port that was free a moment ago (another process may take it
/// before the caller binds it).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a free loopback port");
    listener.local_addr().expect("local address of a bound socket").port()
}

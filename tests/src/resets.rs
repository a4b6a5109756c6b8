//! Clients that hang up hard: a request sent over a raw connection, which
//! is then closed with a TCP reset (`SO_LINGER` 0), so that the server sees
//! the connection fail rather than a quiet client.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

/// Sends `POST path` with `headers` and `body` to `host` (`127.0.0.1:port`),
/// waits `after`, then resets the connection.
pub fn post_then_reset(host: &str, path: &str, headers: &[(&str, &str)], body: &str, after: Duration) {
    let stream = TcpStream::connect(host).unwrap_or_else(|e| panic!("connecting to {host}: {e}"));
    let mut request = format!("POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-length: {}\r\n", body.len());
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    (&stream).write_all(request.as_bytes()).expect("sending the request");
    std::thread::sleep(after);
    let socket = socket2::Socket::from(stream);
    socket.set_linger(Some(Duration::ZERO)).expect("SO_LINGER 0");
    drop(socket);
}

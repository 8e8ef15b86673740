//! The gateway closes what would lock its clients out: idle connections and connections that
//! send their headers slowly are closed after the header timeout, and connections past the cap
//! are closed at once; a fresh client is then served. (Each wait is a blocking read that ends
//! when the gateway closes the socket, bounded by a read timeout.)

mod common;

use common::{serve, workspace};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Blocks until the gateway closes the connection; how long that took.
fn until_closed(mut s: TcpStream) -> Duration {
    let start = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return start.elapsed(),
            Ok(_) => {}
        }
    }
}

fn healthz(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn idle_slow_and_surplus_connections_are_closed() {
    let ws = workspace();
    let (_guard, addr) = serve(
        ws.path(),
        None,
        &["--header-timeout", "1", "--max-connections", "8"],
        &[],
    );
    // Eight idle connections fill the cap (one of them sends half a request line).
    let mut idle: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    idle[0].write_all(b"GET /healthz HT").unwrap();
    // Past the cap: closed at once, long before the header timeout.
    let surplus = TcpStream::connect(&addr).unwrap();
    assert!(
        until_closed(surplus) < Duration::from_millis(900),
        "a ninth connection is closed at once"
    );
    // The idle and the slow ones are closed by the header timeout (1 s), not kept forever.
    for s in idle.drain(..) {
        let waited = until_closed(s);
        assert!(waited < Duration::from_secs(10), "an idle connection stayed {waited:?}");
    }
    // The lower bound: a client is served, and a keep-alive connection that is idle between
    // requests is closed too.
    assert!(
        healthz(&addr).starts_with("HTTP/1.1 200"),
        "served after the idle ones are gone"
    );
    let mut keep = TcpStream::connect(&addr).unwrap();
    write!(keep, "GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut first = [0u8; 12];
    keep.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    assert!(until_closed(keep) < Duration::from_secs(10));
}

//! sqlx 0.9.0 leaves Nagle's algorithm on for its TCP sockets (launchbadge/sqlx#4335, fixed
//! upstream after 0.9.0): every PostgreSQL message larger than its 8 KiB write buffer then waits
//! ~40 ms for a delayed ACK — measured here, a 512-row journal batch took 220 ms instead of 7 ms.
//! sqlx does not hand out its socket, so after each new connection this sets `TCP_NODELAY` on the
//! process's TCP sockets connected to the server's port. Setting it on a socket that is not
//! sqlx's is harmless: it only sends small writes sooner. Remove once sqlx sets it again.

use nix::sys::socket::{SockaddrLike, SockaddrStorage, getpeername, setsockopt, sockopt::TcpNoDelay};
use std::os::fd::{BorrowedFd, RawFd};

/// Sets `TCP_NODELAY` on this process's TCP sockets whose peer port is `port`; how many.
pub(crate) fn set_for_peer_port(port: u16) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    let mut n = 0;
    for entry in dir.flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|s| s.parse::<RawFd>().ok()) else {
            continue;
        };
        let is_socket = std::fs::read_link(entry.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:"));
        if !is_socket {
            continue;
        }
        let Ok(peer) = getpeername::<SockaddrStorage>(fd) else {
            continue;
        };
        let peer_port = peer
            .as_sockaddr_in()
            .map(|a| a.port())
            .or_else(|| peer.as_sockaddr_in6().map(|a| a.port()));
        if peer_port != Some(port) || peer.family().is_none() {
            continue;
        }
        // SAFETY: the descriptor was open a moment ago; should it have been closed and reused
        // since, setsockopt fails or tunes another TCP socket of ours, both harmless.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        if setsockopt(&fd, TcpNoDelay, &true).is_ok() {
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_to_the_port_get_nodelay_and_others_do_not() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let to_port = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let elsewhere = std::net::TcpStream::connect(other.local_addr().unwrap()).unwrap();
        assert!(!to_port.nodelay().unwrap() && !elsewhere.nodelay().unwrap());
        assert!(set_for_peer_port(port) >= 1);
        assert!(to_port.nodelay().unwrap());
        assert!(!elsewhere.nodelay().unwrap());
    }
}

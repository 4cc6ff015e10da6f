//! Whether something listens on a UDP port of this network namespace, read from the kernel's
//! socket tables (`/proc/net/udp`, `/proc/net/udp6`) without touching the port: what a test or a
//! bench waits on after starting a host process, before its client sends the first Hello (a
//! Hello that meets a closed port is refused, and the client ends saying nothing listens there).

use std::time::{Duration, Instant};

/// Whether a UDP socket of this network namespace is bound to `port` (any address, IPv4 or
/// IPv6).
pub fn udp_port_bound(port: u16) -> bool {
    let suffix = format!(":{port:04X}");
    ["/proc/net/udp", "/proc/net/udp6"].iter().any(|table| {
        std::fs::read_to_string(table).is_ok_and(|text| {
            text.lines().skip(1).any(|line| {
                // "  sl  local_address rem_address …": the local address is the second field.
                line.split_whitespace()
                    .nth(1)
                    .is_some_and(|local| local.ends_with(&suffix))
            })
        })
    })
}

/// Waits (a look every 10 ms) until a UDP socket is bound to `port`; false if none is within
/// `within`. A host bound there is ready for its clients' datagrams: they wait in its socket
/// until it reads them.
pub fn wait_for_udp_port(port: u16, within: Duration) -> bool {
    let end = Instant::now() + within;
    loop {
        if udp_port_bound(port) {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_port_is_seen_and_a_closed_one_is_not() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        assert!(udp_port_bound(port));
        assert!(wait_for_udp_port(port, Duration::from_secs(1)));
        drop(socket);
        assert!(!udp_port_bound(port));
        let t = Instant::now();
        assert!(!wait_for_udp_port(port, Duration::from_millis(50)));
        assert!(t.elapsed() >= Duration::from_millis(50));
        let v6 = std::net::UdpSocket::bind("[::1]:0");
        if let Ok(s) = v6 {
            assert!(udp_port_bound(s.local_addr().unwrap().port()));
        }
    }
}

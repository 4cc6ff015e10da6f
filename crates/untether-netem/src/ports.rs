//! Whether something listens on a UDP port of this network namespace, read from the kernel's
//! socket tables (`/proc/net/udp`, `/proc/net/udp6`) without touching the port: what a test or a
//! bench waits on after starting a host process, before its client sends the first Hello (a
//! Hello that meets a closed port is refused, and the client ends saying nothing listens there).

use std::time::{Duration, Instant};

/// Which of the kernel's socket tables to look in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Socket {
    /// A UDP socket bound to the port.
    Udp,
    /// A TCP socket listening on the port (state `LISTEN`, 0A in the table).
    TcpListening,
}

impl Socket {
    fn tables(self) -> [&'static str; 2] {
        match self {
            Socket::Udp => ["udp", "udp6"],
            Socket::TcpListening => ["tcp", "tcp6"],
        }
    }
}

/// Whether a `socket` of the network namespace of process `pid` (this process's with `None`)
/// is on `port` (any address, IPv4 or IPv6). Another namespace's tables are read through one
/// of its processes (`/proc/PID/net/…`), so a test needs no `ip netns exec` to look.
pub fn port_open(socket: Socket, port: u16, pid: Option<u32>) -> bool {
    let suffix = format!(":{port:04X}");
    let dir = pid.map_or("/proc/net".to_string(), |p| format!("/proc/{p}/net"));
    socket.tables().iter().any(|table| {
        std::fs::read_to_string(format!("{dir}/{table}")).is_ok_and(|text| {
            text.lines().skip(1).any(|line| {
                // "  sl  local_address rem_address   st …": local address second, state fourth.
                let mut fields = line.split_whitespace();
                let local = fields.nth(1);
                let state = fields.nth(1);
                local.is_some_and(|l| l.ends_with(&suffix))
                    && (socket == Socket::Udp || state == Some("0A"))
            })
        })
    })
}

/// Whether a UDP socket of this network namespace is bound to `port` (any address, IPv4 or
/// IPv6).
pub fn udp_port_bound(port: u16) -> bool {
    port_open(Socket::Udp, port, None)
}

/// Waits (a look every 10 ms) until `socket` is on `port` in the namespace of `pid` (this
/// process's with `None`); false if it is not within `within`.
pub fn wait_for_port(socket: Socket, port: u16, pid: Option<u32>, within: Duration) -> bool {
    let end = Instant::now() + within;
    loop {
        if port_open(socket, port, pid) {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (a look every 10 ms) until a UDP socket is bound to `port`; false if none is within
/// `within`. A host bound there is ready for its clients' datagrams: they wait in its socket
/// until it reads them.
pub fn wait_for_udp_port(port: u16, within: Duration) -> bool {
    wait_for_port(Socket::Udp, port, None, within)
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

    #[test]
    fn a_listening_tcp_port_is_seen_through_a_pid_and_a_bound_one_is_not() {
        let me = Some(std::process::id());
        // Bound but not listening: a socket a client could not connect to yet.
        let bound = socket2_bound();
        let port = bound.1;
        assert!(!port_open(Socket::TcpListening, port, me));
        drop(bound);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(port_open(Socket::TcpListening, port, me));
        assert!(wait_for_port(
            Socket::TcpListening,
            port,
            None,
            Duration::from_secs(1)
        ));
        drop(listener);
        assert!(!port_open(Socket::TcpListening, port, me));
    }

    /// A TCP socket bound to a port of loopback without `listen`.
    fn socket2_bound() -> (std::os::fd::OwnedFd, u16) {
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: plain socket calls on a fresh fd that OwnedFd then owns.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
            assert!(fd >= 0);
            let owned = std::os::fd::OwnedFd::from_raw_fd(fd);
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            addr.sin_family = libc::AF_INET as libc::sa_family_t;
            addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
            let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            assert_eq!(
                libc::bind(owned.as_raw_fd(), &addr as *const _ as *const _, len),
                0
            );
            let mut got: libc::sockaddr_in = std::mem::zeroed();
            let mut got_len = len;
            libc::getsockname(
                owned.as_raw_fd(),
                &mut got as *mut _ as *mut _,
                &mut got_len,
            );
            (owned, u16::from_be(got.sin_port))
        }
    }
}

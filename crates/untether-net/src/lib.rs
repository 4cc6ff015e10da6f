//! untether's sockets. Knows nothing about frames or codecs: it moves datagrams.
//!
//! [`UdpEndpoint`] is a UDP socket with large kernel buffers (a 1080p keyframe is hundreds of
//! datagrams sent in one burst) and a receive that waits at most a given time, with microsecond
//! precision, so a protocol state machine's timers can be honoured. [`wait`] blocks on several
//! endpoints and a [`Waker`] at once, for a driver thread that other threads hand work to.
//!
//! It also holds the runtime's one clock, [`now_us`] and [`sleep_until`] (`CLOCK_MONOTONIC` in
//! [`Micros`], the protocol's time unit), so everything that timestamps datagrams reads the same
//! one. Only syscalls live here; the impairment relay behind `untether netem` is the crate
//! `untether-netem`.

#![warn(missing_docs)]

pub mod wake;

pub use untether_proto::Micros;
pub use wake::{wait, Readiness, Waker};

use std::io;
use std::mem::MaybeUninit;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

/// Kernel socket buffer size requested for both directions (the kernel may cap it at
/// net.core.rmem_max / wmem_max; see [`UdpEndpoint::buffer_sizes`]).
pub const SOCKET_BUFFER_BYTES: usize = 8 << 20;

/// Largest datagram we ever receive; anything larger is truncated by the kernel and then
/// rejected by the protocol parser.
pub const MAX_DATAGRAM: usize = 65_535;

/// A socket error, with the address it concerns where there is one.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// Binding failed (address in use, not local, no permission).
    #[error("cannot bind UDP socket to {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A name did not resolve to an address.
    #[error("cannot resolve {name:?}: {reason}")]
    Resolve {
        /// The name.
        name: String,
        /// Why.
        reason: String,
    },
    /// Any other socket error.
    #[error("socket error: {0}")]
    Io(#[from] io::Error),
}

/// What a receive returned.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// A datagram of this many bytes from this address.
    Datagram(usize, SocketAddr),
    /// Nothing arrived within the timeout.
    TimedOut,
    /// The peer's host answered with ICMP port unreachable (only on a connected socket):
    /// nothing listens at that address.
    Refused,
}

/// A UDP socket for one side of a session.
#[derive(Debug)]
pub struct UdpEndpoint {
    socket: UdpSocket,
}

impl UdpEndpoint {
    /// Binds to `addr` with large send/receive buffers.
    pub fn bind(addr: SocketAddr) -> Result<Self, NetError> {
        let bind_err = |source| NetError::Bind { addr, source };
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
            .map_err(bind_err)?;
        // Best effort: a smaller buffer than asked for still works, it only drops bursts sooner.
        let _ = socket.set_recv_buffer_size(SOCKET_BUFFER_BYTES);
        let _ = socket.set_send_buffer_size(SOCKET_BUFFER_BYTES);
        socket.bind(&addr.into()).map_err(bind_err)?;
        Ok(UdpEndpoint {
            socket: socket.into(),
        })
    }

    /// Binds an ephemeral port on the unspecified address of `peer`'s family and connects to
    /// `peer`, so that ICMP "port unreachable" is reported as [`Received::Refused`].
    pub fn connect_to(peer: SocketAddr) -> Result<Self, NetError> {
        Self::connect_from(None, peer)
    }

    /// Like [`connect_to`](Self::connect_to), from an ephemeral port on the local address
    /// `local` (one interface's address: a path of its own) when given.
    pub fn connect_from(
        local: Option<std::net::IpAddr>,
        peer: SocketAddr,
    ) -> Result<Self, NetError> {
        let ip = local.unwrap_or(if peer.is_ipv4() {
            std::net::Ipv4Addr::UNSPECIFIED.into()
        } else {
            std::net::Ipv6Addr::UNSPECIFIED.into()
        });
        let endpoint = Self::bind((ip, 0).into())?;
        endpoint.socket.connect(peer)?;
        Ok(endpoint)
    }

    /// The socket's descriptor (for [`wait`]).
    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.socket.as_raw_fd()
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> Result<SocketAddr, NetError> {
        Ok(self.socket.local_addr()?)
    }

    /// The kernel's actual (receive, send) buffer sizes in bytes.
    pub fn buffer_sizes(&self) -> (usize, usize) {
        let s = socket2::SockRef::from(&self.socket);
        (
            s.recv_buffer_size().unwrap_or(0),
            s.send_buffer_size().unwrap_or(0),
        )
    }

    /// A second handle to the same socket (for a second thread).
    pub fn try_clone(&self) -> Result<Self, NetError> {
        Ok(UdpEndpoint {
            socket: self.socket.try_clone()?,
        })
    }

    /// Sends one datagram, waiting for buffer space if the kernel's queue is full.
    pub fn send_to(&self, payload: &[u8], dst: SocketAddr) -> io::Result<usize> {
        self.socket.send_to(payload, dst)
    }

    /// Sends one datagram to the connected peer.
    pub fn send(&self, payload: &[u8]) -> io::Result<usize> {
        self.socket.send(payload)
    }

    /// Waits up to `timeout` for a datagram and reads it into `buf`.
    pub fn recv(&self, buf: &mut [u8], timeout: Duration) -> Result<Received, NetError> {
        if !self.wait_readable(timeout)? {
            return Ok(Received::TimedOut);
        }
        match self.socket.recv_from(buf) {
            Ok((n, from)) => Ok(Received::Datagram(n, from)),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(Received::Refused),
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                Ok(Received::TimedOut)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Reads one datagram if one is waiting, without blocking (`MSG_DONTWAIT`): `Ok(None)` when
    /// none is. An ICMP error queued on a connected socket comes back as `Err`
    /// (`ConnectionRefused`), once.
    pub fn try_recv_from(&self, buf: &mut [u8]) -> io::Result<Option<(usize, SocketAddr)>> {
        // SAFETY: viewing initialised bytes as MaybeUninit is sound; recv only writes bytes.
        let uninit = unsafe { &mut *(buf as *mut [u8] as *mut [MaybeUninit<u8>]) };
        match socket2::SockRef::from(&self.socket).recv_from_with_flags(uninit, libc::MSG_DONTWAIT)
        {
            Ok((n, from)) => match from.as_socket() {
                Some(addr) => Ok(Some((n, addr))),
                None => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "datagram from a non-IP address",
                )),
            },
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Sends one datagram without blocking (`MSG_DONTWAIT`): a full send buffer is an error
    /// (`WouldBlock`) instead of a wait.
    pub fn try_send_to(&self, payload: &[u8], dst: SocketAddr) -> io::Result<usize> {
        socket2::SockRef::from(&self.socket).send_to_with_flags(
            payload,
            &dst.into(),
            libc::MSG_DONTWAIT,
        )
    }

    /// Sends one datagram to the connected peer without blocking (`MSG_DONTWAIT`).
    pub fn try_send(&self, payload: &[u8]) -> io::Result<usize> {
        socket2::SockRef::from(&self.socket).send_with_flags(payload, libc::MSG_DONTWAIT)
    }

    /// Waits up to `timeout` (nanosecond resolution, `ppoll(2)`) until a datagram can be read;
    /// true when the socket is readable (or has an error to report), false on timeout or signal.
    pub fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        let mut fds = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `fds` is one valid pollfd, `ts` a valid timespec, the signal mask is null.
        let rc = unsafe { libc::ppoll(&mut fds, 1, &ts, std::ptr::null()) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(err);
        }
        Ok(rc > 0)
    }
}

/// Resolves `HOST[:PORT]` (IPv6 in brackets) to a socket address, using `default_port` when no
/// port is given.
pub fn resolve(name: &str, default_port: u16) -> Result<SocketAddr, NetError> {
    let err = |reason: String| NetError::Resolve {
        name: name.to_string(),
        reason,
    };
    if let Ok(addr) = name.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Ok(ip) = name.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, default_port));
    }
    let with_port = if name
        .rsplit_once(':')
        .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
    {
        name.to_string()
    } else {
        format!("{name}:{default_port}")
    };
    let mut addrs = with_port
        .to_socket_addrs()
        .map_err(|e| err(e.to_string()))?;
    addrs
        .next()
        .ok_or_else(|| err("no address found".to_string()))
}

/// Microseconds of `CLOCK_MONOTONIC` (the project's clock; the same across network namespaces of
/// one machine, so host and client there share it).
pub fn now_us() -> Micros {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

/// Sleeps until the monotonic clock ([`now_us`]) reaches `deadline_us` (returns at once if it
/// has passed).
pub fn sleep_until(deadline_us: Micros) {
    let now = now_us();
    if deadline_us > now {
        std::thread::sleep(Duration::from_micros(deadline_us - now));
    }
}

/// Which monotonic clock [`now_us`] reads: a hash of the kernel's boot id and this process's
/// time namespace. Two processes with the same identity read the same `CLOCK_MONOTONIC` (one
/// machine, network namespaces included), so a host and a client that find each other's equal
/// need no offset estimate. None where the kernel does not say (not Linux, no /proc).
pub fn clock_identity() -> Option<[u8; 16]> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    // Time namespaces can offset CLOCK_MONOTONIC; an absent link is the initial namespace.
    let time_ns = std::fs::read_link("/proc/self/ns/time")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let text = format!("{}|{time_ns}", boot.trim());
    // Two FNV-1a 64-bit hashes with different offsets: an identity, not a secret.
    let fnv = |basis: u64| {
        text.bytes().fold(basis, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_be_bytes());
    id[8..].copy_from_slice(&fnv(0x6c62_272e_07bb_0142).to_be_bytes());
    Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn loopback_round_trip_and_timeout() {
        let a = UdpEndpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let b = UdpEndpoint::connect_to(a.local_addr().unwrap()).unwrap();
        b.send(b"hello").unwrap();
        let mut buf = [0u8; 64];
        match a.recv(&mut buf, Duration::from_secs(2)).unwrap() {
            Received::Datagram(n, from) => {
                assert_eq!(&buf[..n], b"hello");
                assert_eq!(from, b.local_addr().unwrap());
            }
            other => panic!("expected a datagram, got {other:?}"),
        }
        let t = Instant::now();
        assert_eq!(
            a.recv(&mut buf, Duration::from_millis(20)).unwrap(),
            Received::TimedOut
        );
        assert!(t.elapsed() >= Duration::from_millis(19));
    }

    #[test]
    fn connected_socket_reports_refused() {
        // Bind then drop to find a port with nobody listening.
        let port = UdpEndpoint::bind("127.0.0.1:0".parse().unwrap())
            .unwrap()
            .local_addr()
            .unwrap();
        let c = UdpEndpoint::connect_to(port).unwrap();
        c.send(b"anyone?").unwrap();
        let mut buf = [0u8; 16];
        let got = c.recv(&mut buf, Duration::from_secs(1)).unwrap();
        assert_eq!(got, Received::Refused);
    }

    #[test]
    fn sleep_until_reaches_the_deadline_and_returns_at_once_after_it() {
        let deadline = now_us() + 5_000;
        sleep_until(deadline);
        assert!(now_us() >= deadline);
        let t = Instant::now();
        sleep_until(now_us().saturating_sub(1_000_000));
        assert!(t.elapsed() < Duration::from_millis(5));
    }

    #[test]
    fn this_machine_has_one_clock_identity() {
        let a = clock_identity().expect("Linux says its boot id");
        assert_eq!(Some(a), clock_identity());
        assert_ne!(a, [0; 16]);
    }

    #[test]
    fn resolve_forms() {
        assert_eq!(
            resolve("127.0.0.1", 9000).unwrap(),
            "127.0.0.1:9000".parse().unwrap()
        );
        assert_eq!(
            resolve("127.0.0.1:5", 9000).unwrap(),
            "127.0.0.1:5".parse().unwrap()
        );
        assert_eq!(
            resolve("[::1]:7", 9000).unwrap(),
            "[::1]:7".parse().unwrap()
        );
        assert_eq!(resolve("localhost", 9000).unwrap().port(), 9000);
        assert!(resolve("no-such-host.invalid", 1).is_err());
    }
}

//! untether's sockets. Knows nothing about frames or codecs: it moves datagrams.
//!
//! [`UdpEndpoint`] is a UDP socket with large kernel buffers (a 1080p keyframe is hundreds of
//! datagrams sent in one burst) and a receive that waits at most a given time, with microsecond
//! precision, so a protocol state machine's timers can be honoured. [`wait`] blocks on several
//! endpoints and a [`Waker`] at once, for a driver thread that other threads hand work to.
//!
//! It re-exports the runtime's one clock, [`now_us`] and [`sleep_until`] (`CLOCK_MONOTONIC` in
//! [`Micros`], the protocol's time unit; defined in `untether-clock`, which untether-media reads
//! too without depending on sockets), so everything that timestamps datagrams reads the same
//! one. [`raw`] is the raw layer-2 transport: the same datagrams in Ethernet frames of
//! untether's own EtherType on an `AF_PACKET` socket. Only syscalls live here; the impairment relay behind `untether netem` is the crate
//! `untether-netem`.

#![warn(missing_docs)]

pub mod raw;
pub mod wake;

pub use raw::{MacAddr, RawEndpoint, RawError};
pub use untether_clock::{clock_identity, now_us, sleep_until};
pub use untether_proto::Micros;
pub use wake::{wait, wait_fds, Readiness, Waker};

use std::io::{self, IoSliceMut};
use std::mem::MaybeUninit;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use quinn_udp::{Transmit, UdpSockRef, UdpSocketState};
use socket2::{Domain, Protocol, Socket, Type};

pub use quinn_udp::{RecvMeta, BATCH_SIZE};

/// The most datagrams one batched send ([`UdpEndpoint::send_batch`]) hands the kernel in one
/// `sendmsg` (Linux's `UDP_MAX_SEGMENTS`).
pub const MAX_BATCH_SEGMENTS: usize = 64;

/// The most payload bytes one batched send hands the kernel in one `sendmsg` (one UDP datagram
/// before segmentation: 65,535 minus the IPv6 and UDP headers).
pub const MAX_BATCH_BYTES: usize = 65_535 - 40 - 8;

/// How many datagrams of `segment_size` bytes one `sendmsg` of a batched send carries at most.
pub fn batch_segments(segment_size: usize) -> usize {
    (MAX_BATCH_BYTES / segment_size.max(1)).clamp(1, MAX_BATCH_SEGMENTS)
}

/// The datagrams in one received buffer: `buf[..meta.len]` cut every `meta.stride` bytes (with
/// GRO the kernel joins equal-sized datagrams from one sender; the last may be shorter).
pub fn datagrams<'a>(buf: &'a [u8], meta: &RecvMeta) -> impl Iterator<Item = &'a [u8]> {
    let len = meta.len.min(buf.len());
    let stride = if meta.stride == 0 {
        len.max(1)
    } else {
        meta.stride
    };
    buf[..len].chunks(stride)
}

/// How an endpoint's batched sends went out (see [`UdpEndpoint::send_batch`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchSendCounts {
    /// `sendmsg` calls that carried several datagrams (GSO).
    pub gso_calls: u64,
    /// Datagrams sent in those calls.
    pub gso_datagrams: u64,
    /// Datagrams of a batch sent one per call (no GSO here, or a batch of one).
    pub single_datagrams: u64,
}

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
    #[error("cannot bind UDP socket to {addr}: {source}{}", bind_hint(.source, .addr))]
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

/// What to do about a port in use: find the program that holds it, or take another.
fn bind_hint(e: &io::Error, addr: &SocketAddr) -> String {
    if e.kind() == io::ErrorKind::AddrInUse {
        format!(
            " (another program holds UDP port {port}: `ss -ulpn 'sport = :{port}'` names it; \
             stop it, or choose another port with --bind ADDR:PORT or host.bind)",
            port = addr.port()
        )
    } else {
        String::new()
    }
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
///
/// Besides the one-datagram calls it sends and receives in batches ([`send_batch`] with GSO,
/// [`recv_batch`] with `recvmmsg` and GRO, through `quinn-udp`). The socket is non-blocking;
/// the calls that wait ([`send_to`], [`send`], [`recv`]) wait with `poll(2)`.
///
/// [`send_batch`]: Self::send_batch
/// [`recv_batch`]: Self::recv_batch
/// [`send_to`]: Self::send_to
/// [`send`]: Self::send
/// [`recv`]: Self::recv
#[derive(Debug)]
pub struct UdpEndpoint {
    socket: UdpSocket,
    state: UdpSocketState,
    /// The kernel has UDP GRO (turned on by the first [`recv_batch`](Self::recv_batch)).
    gro_supported: bool,
    /// GRO is on for this socket.
    gro_on: AtomicBool,
    gso_calls: AtomicU64,
    gso_datagrams: AtomicU64,
    single_datagrams: AtomicU64,
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
        Self::from_socket(socket.into()).map_err(bind_err)
    }

    /// Wraps a bound socket: sets it up for batched calls (non-blocking, GRO on where the kernel
    /// has it) and restores the kernel's default path-MTU handling that `quinn-udp` changes, so
    /// a datagram larger than the interface's MTU is still fragmented as before.
    fn from_socket(socket: UdpSocket) -> io::Result<Self> {
        let state = UdpSocketState::new(UdpSockRef::from(&socket))?;
        // GRO joins datagrams into one read, which only `recv_batch` takes apart: off until it
        // is first used, so a socket read a datagram at a time (a relay's) gets datagrams.
        let gro_supported = state.gro_segments() > 1;
        if gro_supported {
            set_int_option(socket.as_raw_fd(), libc::SOL_UDP, libc::UDP_GRO, 0);
        }
        // Best effort, as the kernel's defaults (IPv4 sockets get no IPv6 options).
        let fd = socket.as_raw_fd();
        set_int_option(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_WANT,
        );
        if !socket.local_addr()?.is_ipv4() {
            let want = libc::IPV6_PMTUDISC_WANT;
            set_int_option(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, want);
            set_int_option(fd, libc::IPPROTO_IPV6, libc::IPV6_DONTFRAG, 0);
        }
        Ok(UdpEndpoint {
            socket,
            state,
            gro_supported,
            gro_on: AtomicBool::new(false),
            gso_calls: AtomicU64::new(0),
            gso_datagrams: AtomicU64::new(0),
            single_datagrams: AtomicU64::new(0),
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

    /// The socket's descriptor (for [`wait_fds`]).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
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
        Ok(Self::from_socket(self.socket.try_clone()?)?)
    }

    /// Sends one datagram, waiting for buffer space if the kernel's queue is full.
    pub fn send_to(&self, payload: &[u8], dst: SocketAddr) -> io::Result<usize> {
        self.blocking(|| self.try_send_to(payload, dst))
    }

    /// Sends one datagram to the connected peer.
    pub fn send(&self, payload: &[u8]) -> io::Result<usize> {
        self.blocking(|| self.try_send(payload))
    }

    /// Runs a non-blocking send until it does not report a full buffer, waiting for space.
    fn blocking<T>(&self, mut send: impl FnMut() -> io::Result<T>) -> io::Result<T> {
        loop {
            match send() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait_writable()?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => return r,
            }
        }
    }

    /// Waits (up to a second, then the send is retried anyway) until the send buffer has space.
    fn wait_writable(&self) -> io::Result<()> {
        let mut fds = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: `fds` is one valid pollfd.
        let rc = unsafe { libc::poll(&mut fds, 1, 1_000) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
        Ok(())
    }

    /// How many datagrams one `sendmsg` may carry here: [`MAX_BATCH_SEGMENTS`] where the kernel
    /// has UDP GSO, 1 where it does not (or a GSO send failed once).
    pub fn max_gso_segments(&self) -> usize {
        self.state.max_gso_segments().min(MAX_BATCH_SEGMENTS)
    }

    /// How many datagrams one buffer of [`recv_batch`](Self::recv_batch) may hold (64 where the
    /// kernel has UDP GRO, 1 where it does not).
    pub fn gro_segments(&self) -> usize {
        if self.gro_supported {
            self.state.gro_segments()
        } else {
            1
        }
    }

    /// How the batched sends so far went out.
    pub fn batch_send_counts(&self) -> BatchSendCounts {
        BatchSendCounts {
            gso_calls: self.gso_calls.load(Ordering::Relaxed),
            gso_datagrams: self.gso_datagrams.load(Ordering::Relaxed),
            single_datagrams: self.single_datagrams.load(Ordering::Relaxed),
        }
    }

    /// Sends the datagrams in `contents`, each `segment_size` bytes but the last (which may be
    /// shorter), to `dst` (None: the connected peer), waiting for buffer space like
    /// [`send_to`](Self::send_to). Where the kernel has UDP GSO, up to [`batch_segments`] of
    /// them leave in one `sendmsg`; elsewhere (or when a GSO send fails with `EIO`/`EINVAL`, as
    /// on a device without it) one per call. Returns how many datagrams were sent; the first
    /// error ends the batch.
    pub fn send_batch(
        &self,
        dst: Option<SocketAddr>,
        contents: &[u8],
        segment_size: usize,
    ) -> io::Result<usize> {
        if contents.is_empty() {
            return Ok(0);
        }
        let segment_size = if segment_size == 0 {
            contents.len()
        } else {
            segment_size
        };
        let count = contents.len().div_ceil(segment_size);
        let per_call = batch_segments(segment_size).min(self.max_gso_segments());
        if count == 1 || per_call <= 1 {
            return self.send_singles(dst, contents, segment_size);
        }
        let destination = match dst {
            Some(d) => d,
            None => self.socket.peer_addr()?,
        };
        let mut sent = 0;
        for chunk in contents.chunks(per_call * segment_size) {
            let n = chunk.len().div_ceil(segment_size);
            let transmit = Transmit {
                destination,
                ecn: None,
                contents: chunk,
                segment_size: (n > 1).then_some(segment_size),
                src_ip: None,
            };
            let r = self.blocking(|| {
                self.state
                    .try_send(UdpSockRef::from(&self.socket), &transmit)
            });
            match r {
                Ok(()) if n > 1 => {
                    self.gso_calls.fetch_add(1, Ordering::Relaxed);
                    self.gso_datagrams.fetch_add(n as u64, Ordering::Relaxed);
                }
                Ok(()) => {
                    self.single_datagrams.fetch_add(1, Ordering::Relaxed);
                }
                // No GSO on this path after all (quinn-udp turns it off for the socket).
                Err(e) if matches!(e.raw_os_error(), Some(libc::EIO) | Some(libc::EINVAL)) => {
                    self.send_singles(dst, chunk, segment_size)?;
                }
                Err(e) => return Err(e),
            }
            sent += n;
        }
        Ok(sent)
    }

    /// Sends `contents` one `segment_size` datagram per call.
    fn send_singles(
        &self,
        dst: Option<SocketAddr>,
        contents: &[u8],
        segment_size: usize,
    ) -> io::Result<usize> {
        let mut sent = 0;
        for d in contents.chunks(segment_size.max(1)) {
            match dst {
                Some(dst) => self.send_to(d, dst)?,
                None => self.send(d)?,
            };
            self.single_datagrams.fetch_add(1, Ordering::Relaxed);
            sent += 1;
        }
        Ok(sent)
    }

    /// Reads what is waiting, without blocking, into `bufs` (up to [`BATCH_SIZE`] buffers in one
    /// `recvmmsg`), describing buffer `i` in `metas[i]`; returns how many buffers were filled
    /// (0: nothing waiting). With GRO a buffer holds several datagrams from one sender: cut it
    /// with [`datagrams`]. Give each buffer [`MAX_DATAGRAM`] bytes so a GRO batch fits. An ICMP
    /// error queued on a connected socket comes back as `Err` (`ConnectionRefused`), once.
    ///
    /// The first call turns GRO on for the socket (where the kernel has it): from then on read
    /// it only with `recv_batch` (a one-datagram read would get joined datagrams as one).
    pub fn recv_batch(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        metas: &mut [RecvMeta],
    ) -> io::Result<usize> {
        let n = bufs.len().min(metas.len());
        if n == 0 {
            return Ok(0);
        }
        if self.gro_supported && !self.gro_on.swap(true, Ordering::Relaxed) {
            set_int_option(self.socket.as_raw_fd(), libc::SOL_UDP, libc::UDP_GRO, 1);
        }
        match self.state.recv(
            UdpSockRef::from(&self.socket),
            &mut bufs[..n],
            &mut metas[..n],
        ) {
            Ok(n) => Ok(n),
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                Ok(0)
            }
            Err(e) => Err(e),
        }
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

/// Sets an integer socket option, ignoring failure (for best-effort settings).
fn set_int_option(
    fd: std::os::fd::RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) {
    // SAFETY: `value` is a valid c_int for the duration of the call and its size is passed.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &value as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
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
    // A port past 65535 is a bad port, not a name that does not resolve.
    if let Some((_, p)) = name.rsplit_once(':') {
        if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_err() {
            return Err(err(format!("port {p} is out of range (0..=65535)")));
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_bad_port_and_a_port_in_use_say_what_they_are() {
        let e = resolve("127.0.0.1:99999", 9710).unwrap_err().to_string();
        assert!(e.contains("port 99999 is out of range"), "{e}");
        let e = resolve("myhost:70000", 9710).unwrap_err().to_string();
        assert!(e.contains("out of range"), "{e}");
        assert_eq!(
            resolve("127.0.0.1:9", 9710).unwrap(),
            "127.0.0.1:9".parse().unwrap()
        );
        let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let e = match UdpEndpoint::bind(addr) {
            Ok(_) => panic!("bound a port in use"),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains("another program holds UDP port") && e.contains("--bind"),
            "{e}"
        );
    }

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

    /// `count` datagrams of `size` bytes and a last one of `last` bytes, each filled with its
    /// index.
    fn burst(count: usize, size: usize, last: usize) -> Vec<u8> {
        let mut v = Vec::new();
        for i in 0..count {
            v.extend(std::iter::repeat_n(i as u8, size));
        }
        v.extend(std::iter::repeat_n(count as u8, last));
        v
    }

    /// Reads `want` datagrams with `recv_batch`, cut with `datagrams`.
    fn recv_all(e: &UdpEndpoint, want: usize) -> Vec<(Vec<u8>, SocketAddr)> {
        let mut storage = vec![vec![0u8; MAX_DATAGRAM]; BATCH_SIZE];
        let mut metas = vec![RecvMeta::default(); BATCH_SIZE];
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < want && Instant::now() < deadline {
            e.wait_readable(Duration::from_millis(100)).unwrap();
            let mut bufs: Vec<IoSliceMut> =
                storage.iter_mut().map(|b| IoSliceMut::new(b)).collect();
            let n = e.recv_batch(&mut bufs, &mut metas).unwrap();
            for (buf, meta) in storage.iter().zip(&metas).take(n) {
                for d in datagrams(buf, meta) {
                    got.push((d.to_vec(), meta.addr));
                }
            }
        }
        got
    }

    #[test]
    fn a_batch_arrives_complete_and_in_order() {
        let rx = UdpEndpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let tx = UdpEndpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let to = rx.local_addr().unwrap();
        // More than one sendmsg's worth (64 segments, 65,487 bytes), with a shorter last one.
        let contents = burst(150, 1200, 321);
        assert_eq!(tx.send_batch(Some(to), &contents, 1200).unwrap(), 151);
        let got = recv_all(&rx, 151);
        assert_eq!(got.len(), 151);
        for (i, (d, from)) in got.iter().enumerate() {
            assert_eq!(d.len(), if i == 150 { 321 } else { 1200 }, "datagram {i}");
            assert!(d.iter().all(|&b| b == i as u8), "datagram {i} in order");
            assert_eq!(*from, tx.local_addr().unwrap());
        }
        let counts = tx.batch_send_counts();
        assert_eq!(counts.gso_datagrams + counts.single_datagrams, 151);
        if tx.max_gso_segments() > 1 {
            assert!(counts.gso_calls >= 3, "{counts:?}");
        }
    }

    #[test]
    fn a_connected_socket_sends_a_batch_to_its_peer_and_single_datagrams_still_work() {
        let rx = UdpEndpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let tx = UdpEndpoint::connect_to(rx.local_addr().unwrap()).unwrap();
        tx.send_batch(None, &burst(3, 100, 100), 100).unwrap();
        tx.send(b"one").unwrap();
        let got = recv_all(&rx, 5);
        let lens: Vec<usize> = got.iter().map(|(d, _)| d.len()).collect();
        assert_eq!(lens, vec![100, 100, 100, 100, 3]);
        let mut buf = [0u8; 8];
        assert_eq!(rx.try_recv_from(&mut buf).unwrap(), None);
    }

    #[test]
    fn a_socket_read_a_datagram_at_a_time_gets_a_batch_as_datagrams() {
        let rx = UdpEndpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let tx = UdpEndpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        tx.send_batch(Some(rx.local_addr().unwrap()), &burst(10, 500, 20), 500)
            .unwrap();
        let mut buf = vec![0u8; MAX_DATAGRAM];
        for i in 0..11 {
            assert!(rx.wait_readable(Duration::from_secs(2)).unwrap());
            let (n, _) = rx.try_recv_from(&mut buf).unwrap().expect("a datagram");
            assert_eq!(n, if i == 10 { 20 } else { 500 }, "datagram {i}");
        }
    }

    #[test]
    fn datagrams_cuts_a_gro_buffer_by_stride() {
        let buf = burst(3, 10, 4);
        let mut meta = RecvMeta::default();
        meta.len = buf.len();
        meta.stride = 10;
        let lens: Vec<usize> = datagrams(&buf, &meta).map(<[u8]>::len).collect();
        assert_eq!(lens, vec![10, 10, 10, 4]);
        meta.stride = buf.len();
        assert_eq!(datagrams(&buf, &meta).count(), 1);
        meta.len = 0;
        assert_eq!(datagrams(&buf, &meta).count(), 0);
        assert_eq!(batch_segments(1200), 54);
        assert_eq!(batch_segments(100), 64);
        assert_eq!(batch_segments(70_000), 1);
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

//! The raw layer-2 transport: untether datagrams in Ethernet frames of their own EtherType,
//! straight between two interfaces' MAC addresses (no IP, no UDP), on an `AF_PACKET` socket.
//!
//! A frame's payload is `len u16 ‖ datagram` (big-endian length): Ethernet pads frames shorter
//! than 60 bytes, and an untether datagram (an empty Control is 34 bytes) carries no length of
//! its own. The datagram inside is exactly what would go over UDP (the same sealed packets), so
//! the protocol sessions authenticate it as always; this module only moves bytes and says which
//! MAC address sent them.
//!
//! The socket is `SOCK_DGRAM` (the kernel writes and strips the Ethernet header), bound to one
//! interface and to [`ETHERTYPE`], non-blocking; batches go out with one `sendmmsg` and come in
//! with one `recvmmsg`. Opening it needs `CAP_NET_RAW` ([`RawError::NoPermission`]).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// untether's EtherType: IEEE 802 "Local Experimental Ethertype 1" (0x88B5), which IEEE Std
/// 802 reserves for experiments and private protocols on a local network.
pub const ETHERTYPE: u16 = 0x88B5;

/// Bytes in front of every datagram in a frame's payload: its length.
pub const LENGTH_PREFIX: usize = 2;

/// The most datagrams one [`RawEndpoint::send_batch`] / [`RawEndpoint::recv_batch`] call moves.
pub const RAW_BATCH: usize = 64;

/// An Ethernet (EUI-48) address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// All zeros (what loopback has): not an address frames can be sent to.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 6]
    }
}

impl std::fmt::Display for MacAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl std::str::FromStr for MacAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() != 6 {
            return Err(format!(
                "{s:?} is not a MAC address (six hex bytes, aa:bb:cc:dd:ee:ff)"
            ));
        }
        let mut m = [0u8; 6];
        for (b, p) in m.iter_mut().zip(parts) {
            *b = u8::from_str_radix(p, 16)
                .map_err(|_| format!("{s:?} is not a MAC address (six hex bytes)"))?;
        }
        Ok(MacAddr(m))
    }
}

/// Why a raw socket could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum RawError {
    /// No interface of that name in this network namespace.
    #[error("no network interface named {name:?} (see `ip link`)")]
    NoInterface {
        /// The name asked for.
        name: String,
    },
    /// The process lacks `CAP_NET_RAW`.
    #[error(
        "raw layer 2 on {name:?} needs CAP_NET_RAW (run as root, or `setcap cap_net_raw+ep` on \
         the untether binary)"
    )]
    NoPermission {
        /// The interface.
        name: String,
    },
    /// The interface has no Ethernet-like hardware address (loopback, a tunnel).
    #[error("interface {name:?} has no Ethernet address ({why}): raw layer 2 needs an Ethernet or Wi-Fi interface")]
    NotEthernet {
        /// The interface.
        name: String,
        /// What it is instead.
        why: String,
    },
    /// Any other failure, with the interface.
    #[error("raw layer 2 on {name:?}: {source}")]
    Io {
        /// The interface.
        name: String,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// One received datagram's place in a [`RawBuffers`] and who sent it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawMeta {
    /// The sender's MAC address.
    pub src: MacAddr,
    /// The datagram's length (after the length prefix).
    pub len: usize,
}

/// Receive buffers for [`RawEndpoint::recv_batch`]: [`RAW_BATCH`] frames of the interface's
/// MTU.
pub struct RawBuffers {
    storage: Vec<Vec<u8>>,
    metas: Vec<RawMeta>,
    /// Frames dropped because their length prefix disagreed with the frame.
    pub malformed: u64,
}

impl RawBuffers {
    /// Buffers for frames of up to `mtu` payload bytes.
    pub fn new(mtu: usize) -> RawBuffers {
        RawBuffers {
            storage: vec![vec![0u8; mtu.max(64)]; RAW_BATCH],
            metas: vec![RawMeta::default(); RAW_BATCH],
            malformed: 0,
        }
    }

    /// Datagram `i` of the last receive and its sender.
    pub fn get(&self, i: usize) -> Option<(MacAddr, &[u8])> {
        let m = self.metas.get(i)?;
        let b = self.storage.get(i)?;
        Some((m.src, b.get(LENGTH_PREFIX..LENGTH_PREFIX + m.len)?))
    }
}

/// How many frames a raw endpoint moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawCounts {
    /// Frames sent.
    pub frames_sent: u64,
    /// `sendmmsg` calls.
    pub send_calls: u64,
    /// Frames received (with a valid length prefix).
    pub frames_received: u64,
    /// `recvmmsg` calls that returned frames.
    pub recv_calls: u64,
    /// Frames whose length prefix disagreed with the frame (dropped).
    pub malformed: u64,
}

/// An `AF_PACKET` socket on one interface for [`ETHERTYPE`] frames.
#[derive(Debug)]
pub struct RawEndpoint {
    fd: OwnedFd,
    ifindex: i32,
    name: String,
    mac: MacAddr,
    mtu: usize,
    ethertype: u16,
    counts: std::sync::Mutex<RawCounts>,
}

/// `ioctl(fd, request, &ifreq)` for interface `name`.
fn ifreq_ioctl(fd: RawFd, name: &str, request: libc::c_ulong) -> io::Result<libc::ifreq> {
    // SAFETY: an all-zero ifreq is valid (plain C data).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let bytes = name.as_bytes();
    if bytes.len() >= req.ifr_name.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq the kernel fills for this request.
    let rc = unsafe { libc::ioctl(fd, request as _, &mut req) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(req)
}

impl RawEndpoint {
    /// Opens a raw socket on interface `name` for frames of `ethertype` ([`ETHERTYPE`]).
    pub fn open(name: &str, ethertype: u16) -> Result<RawEndpoint, RawError> {
        let io_err = |source: io::Error| RawError::Io {
            name: name.to_string(),
            source,
        };
        let cname = std::ffi::CString::new(name).map_err(|_| RawError::NoInterface {
            name: name.to_string(),
        })?;
        // SAFETY: a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) } as i32;
        if ifindex == 0 {
            return Err(RawError::NoInterface {
                name: name.to_string(),
            });
        }
        let proto = (ethertype.to_be()) as libc::c_int;
        // SAFETY: plain syscall; a negative return is an error.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                proto,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => RawError::NoPermission {
                    name: name.to_string(),
                },
                _ => io_err(e),
            });
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let hw = ifreq_ioctl(fd.as_raw_fd(), name, libc::SIOCGIFHWADDR).map_err(io_err)?;
        // SAFETY: SIOCGIFHWADDR filled the hardware-address member of the union.
        let sa = unsafe { hw.ifr_ifru.ifru_hwaddr };
        if sa.sa_family != libc::ARPHRD_ETHER {
            return Err(RawError::NotEthernet {
                name: name.to_string(),
                why: if sa.sa_family == libc::ARPHRD_LOOPBACK {
                    "it is a loopback interface".into()
                } else {
                    format!("hardware type {}", sa.sa_family)
                },
            });
        }
        let mut mac = [0u8; 6];
        for (d, s) in mac.iter_mut().zip(sa.sa_data.iter()) {
            *d = *s as u8;
        }
        let mac = MacAddr(mac);
        if mac.is_zero() {
            return Err(RawError::NotEthernet {
                name: name.to_string(),
                why: "its address is 00:00:00:00:00:00".into(),
            });
        }
        let m = ifreq_ioctl(fd.as_raw_fd(), name, libc::SIOCGIFMTU).map_err(io_err)?;
        // SAFETY: SIOCGIFMTU filled the MTU member of the union.
        let mtu = unsafe { m.ifr_ifru.ifru_mtu }.max(68) as usize;
        // SAFETY: an all-zero sockaddr_ll is valid; the fields set below make it an address.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = ethertype.to_be();
        addr.sll_ifindex = ifindex;
        // SAFETY: `addr` is a valid sockaddr_ll of the size given.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &addr as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io_err(io::Error::last_os_error()));
        }
        let s = socket2::SockRef::from(&fd);
        let _ = s.set_recv_buffer_size(crate::SOCKET_BUFFER_BYTES);
        let _ = s.set_send_buffer_size(crate::SOCKET_BUFFER_BYTES);
        Ok(RawEndpoint {
            fd,
            ifindex,
            name: name.to_string(),
            mac,
            mtu,
            ethertype,
            counts: Default::default(),
        })
    }

    /// The interface's MAC address (the source of every frame sent).
    pub fn mac(&self) -> MacAddr {
        self.mac
    }

    /// The interface's name.
    pub fn interface(&self) -> &str {
        &self.name
    }

    /// The EtherType this socket sends and receives.
    pub fn ethertype(&self) -> u16 {
        self.ethertype
    }

    /// The largest datagram a frame carries: the interface's MTU less the length prefix.
    pub fn max_datagram(&self) -> usize {
        self.mtu - LENGTH_PREFIX
    }

    /// The interface's MTU (a frame's payload).
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// The socket's descriptor (for [`crate::wait_fds`]).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// What this endpoint moved so far.
    pub fn counts(&self) -> RawCounts {
        *self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn dst_addr(&self, dst: MacAddr) -> libc::sockaddr_ll {
        // SAFETY: an all-zero sockaddr_ll is valid.
        let mut a: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        a.sll_family = libc::AF_PACKET as u16;
        a.sll_protocol = self.ethertype.to_be();
        a.sll_ifindex = self.ifindex;
        a.sll_halen = 6;
        a.sll_addr[..6].copy_from_slice(&dst.0);
        a
    }

    /// Sends one datagram to `dst`.
    pub fn send_to(&self, dst: MacAddr, datagram: &[u8]) -> io::Result<()> {
        self.send_batch(dst, std::iter::once(datagram)).map(|_| ())
    }

    /// Sends `datagrams` to `dst`, up to [`RAW_BATCH`] per `sendmmsg`, waiting for buffer
    /// space when the socket's queue is full; returns how many were sent. A datagram larger
    /// than [`max_datagram`](Self::max_datagram) is an error (`EMSGSIZE`), after the ones
    /// before it left.
    pub fn send_batch<'a>(
        &self,
        dst: MacAddr,
        datagrams: impl Iterator<Item = &'a [u8]>,
    ) -> io::Result<usize> {
        let addr = self.dst_addr(dst);
        let mut sent = 0;
        let mut prefixes: Vec<[u8; LENGTH_PREFIX]> = Vec::with_capacity(RAW_BATCH);
        let mut pending: Vec<&[u8]> = Vec::with_capacity(RAW_BATCH);
        let mut datagrams = datagrams.peekable();
        while datagrams.peek().is_some() {
            pending.clear();
            prefixes.clear();
            for d in datagrams.by_ref().take(RAW_BATCH) {
                if d.len() > self.max_datagram() {
                    self.flush(&addr, &prefixes, &pending, &mut sent)?;
                    return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
                }
                prefixes.push((d.len() as u16).to_be_bytes());
                pending.push(d);
            }
            self.flush(&addr, &prefixes, &pending, &mut sent)?;
        }
        Ok(sent)
    }

    /// One `sendmmsg` loop over `pending` (retrying what the kernel did not take).
    fn flush(
        &self,
        addr: &libc::sockaddr_ll,
        prefixes: &[[u8; LENGTH_PREFIX]],
        pending: &[&[u8]],
        sent: &mut usize,
    ) -> io::Result<()> {
        let mut iovs: Vec<[libc::iovec; 2]> = prefixes
            .iter()
            .zip(pending)
            .map(|(p, d)| {
                [
                    libc::iovec {
                        iov_base: p.as_ptr() as *mut libc::c_void,
                        iov_len: LENGTH_PREFIX,
                    },
                    libc::iovec {
                        iov_base: d.as_ptr() as *mut libc::c_void,
                        iov_len: d.len(),
                    },
                ]
            })
            .collect();
        // SAFETY: all-zero mmsghdrs are valid; pointers are set below to live values.
        let mut msgs: Vec<libc::mmsghdr> = (0..iovs.len())
            .map(|_| unsafe { std::mem::zeroed() })
            .collect();
        for (m, iov) in msgs.iter_mut().zip(iovs.iter_mut()) {
            m.msg_hdr.msg_name = addr as *const libc::sockaddr_ll as *mut libc::c_void;
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            m.msg_hdr.msg_iov = iov.as_mut_ptr();
            m.msg_hdr.msg_iovlen = 2;
        }
        let mut done = 0;
        while done < msgs.len() {
            // SAFETY: `msgs[done..]` are valid mmsghdrs whose buffers outlive the call.
            let rc = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    msgs[done..].as_mut_ptr(),
                    (msgs.len() - done) as libc::c_uint,
                    0,
                )
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => self.wait_writable()?,
                    io::ErrorKind::Interrupted => {}
                    _ => return Err(e),
                }
                continue;
            }
            done += rc as usize;
            let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
            c.send_calls += 1;
            c.frames_sent += rc as u64;
        }
        *sent += done;
        Ok(())
    }

    fn wait_writable(&self) -> io::Result<()> {
        let mut fds = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut fds, 1, 1_000) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Reads what is waiting, without blocking, into `bufs` (one `recvmmsg`, up to
    /// [`RAW_BATCH`] frames); returns how many datagrams [`RawBuffers::get`] now holds (0:
    /// nothing waiting). Frames this host sent itself and frames whose length prefix disagrees
    /// with their size are skipped (the latter counted in [`RawBuffers::malformed`]).
    pub fn recv_batch(&self, bufs: &mut RawBuffers) -> io::Result<usize> {
        let n = bufs.storage.len();
        let mut iovs: Vec<libc::iovec> = bufs
            .storage
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: all-zero values are valid for these C structs.
        let mut addrs: Vec<libc::sockaddr_ll> =
            (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
        // SAFETY: as above.
        let mut msgs: Vec<libc::mmsghdr> = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
        for ((m, iov), a) in msgs.iter_mut().zip(iovs.iter_mut()).zip(addrs.iter_mut()) {
            m.msg_hdr.msg_name = a as *mut libc::sockaddr_ll as *mut libc::c_void;
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `msgs` are valid mmsghdrs pointing at live buffers and addresses.
        let rc = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let got = rc as usize;
        let mut kept = 0;
        let mut malformed = 0;
        for i in 0..got {
            let a = &addrs[i];
            if a.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            let flen = (msgs[i].msg_len as usize).min(bufs.storage[i].len());
            let b = &bufs.storage[i];
            if flen < LENGTH_PREFIX || msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                malformed += 1;
                continue;
            }
            let len = u16::from_be_bytes([b[0], b[1]]) as usize;
            if len == 0 || LENGTH_PREFIX + len > flen {
                malformed += 1;
                continue;
            }
            let mut mac = [0u8; 6];
            mac.copy_from_slice(&a.sll_addr[..6]);
            if kept != i {
                let (head, tail) = bufs.storage.split_at_mut(i);
                head[kept][..LENGTH_PREFIX + len].copy_from_slice(&tail[0][..LENGTH_PREFIX + len]);
            }
            bufs.metas[kept] = RawMeta {
                src: MacAddr(mac),
                len,
            };
            kept += 1;
        }
        bufs.malformed += malformed;
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.recv_calls += 1;
        c.frames_received += kept as u64;
        c.malformed += malformed;
        Ok(kept)
    }
}

/// The interface that holds local address `ip` (None: no interface has it), by `getifaddrs`
/// (netlink: the calling thread's network namespace).
pub fn interface_with_address(ip: std::net::IpAddr) -> Option<String> {
    interfaces()
        .into_iter()
        .find(|(_, a)| *a == Some(ip))
        .map(|(n, _)| n)
}

/// The interfaces that are up (loopback excluded) with their addresses, one entry per address
/// (and one with None per interface), by `getifaddrs`.
pub fn interfaces() -> Vec<(String, Option<std::net::IpAddr>)> {
    let mut out: Vec<(String, Option<std::net::IpAddr>)> = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates the list it points `head` at; freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` walks the list getifaddrs returned, which stays valid until freed.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        let up = ifa.ifa_flags & libc::IFF_UP as u32 != 0;
        let lo = ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0;
        if !up || lo || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: a NUL-terminated name owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let ip = if ifa.ifa_addr.is_null() {
            None
        } else {
            // SAFETY: ifa_addr points at a sockaddr of the family it names.
            unsafe {
                match (*ifa.ifa_addr).sa_family as i32 {
                    libc::AF_INET => {
                        let a = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                        Some(std::net::IpAddr::from(
                            u32::from_be(a.sin_addr.s_addr).to_be_bytes(),
                        ))
                    }
                    libc::AF_INET6 => {
                        let a = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                        Some(std::net::IpAddr::from(a.sin6_addr.s6_addr))
                    }
                    _ => None,
                }
            }
        };
        if !out.iter().any(|(n, a)| *n == name && *a == ip) {
            out.push((name, ip));
        }
    }
    // SAFETY: the list getifaddrs allocated, freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// The interface the kernel would use to reach `peer` (the one holding the source address of
/// a UDP socket connected to it).
pub fn interface_towards(peer: std::net::SocketAddr) -> Option<String> {
    let any: std::net::SocketAddr = if peer.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = std::net::UdpSocket::bind(any).ok()?;
    s.connect(peer).ok()?;
    interface_with_address(s.local_addr().ok()?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_addresses_print_and_parse() {
        let m: MacAddr = "02:00:5e:10:00:ff".parse().unwrap();
        assert_eq!(m.0, [2, 0, 0x5e, 0x10, 0, 0xff]);
        assert_eq!(m.to_string(), "02:00:5e:10:00:ff");
        assert!("02:00:5e".parse::<MacAddr>().is_err());
        assert!("zz:00:5e:10:00:ff".parse::<MacAddr>().is_err());
        assert!(MacAddr::default().is_zero());
    }

    #[test]
    fn a_missing_interface_names_itself() {
        let e = RawEndpoint::open("untether-none0", ETHERTYPE).unwrap_err();
        assert!(matches!(e, RawError::NoInterface { .. }), "{e}");
        assert!(e.to_string().contains("untether-none0"), "{e}");
    }

    #[test]
    fn loopback_is_refused_or_needs_permission() {
        // As root: loopback has no Ethernet address; without CAP_NET_RAW: the permission.
        match RawEndpoint::open("lo", ETHERTYPE) {
            Err(RawError::NotEthernet { name, .. }) => assert_eq!(name, "lo"),
            Err(RawError::NoPermission { name }) => assert_eq!(name, "lo"),
            other => panic!("unexpected: {other:?}"),
        }
    }
}

//! The raw layer-2 transport's state on each side (docs/PROTOCOL.md §7.3): whose MAC address
//! is whose, which datagrams leave as raw frames, and when to give up and stay on UDP.
//!
//! Pure logic, driven by the network endpoints (`HostNet`, `ClientNet`) with `now` as a
//! parameter; the socket is the driver's ([`crate::driver::run_with_raw`]). The MAC addresses
//! come only from LinkAddress frames the session authenticated; the datagrams inside raw
//! frames are opened by the session exactly as those over UDP.
//!
//! - **Host** ([`HostLink`]): answers a client's LinkAddress with its own (or LinkDeclined),
//!   maps the client's MAC to its UDP address, and sends to that MAC once a frame from it
//!   arrived that the session authenticated — back over UDP when the client's authenticated
//!   datagrams come over UDP again. A frame with the client's MAC, or a datagram with its UDP
//!   address, moves nothing before the session opened it: anyone can forge either.
//! - **Client** ([`ClientLink`]): offers its MAC after the Accept (every 250 ms, 4 times),
//!   switches to raw frames when the host answers, and falls back to UDP for the session when
//!   no frame from the host's MAC arrives within 1 s.

use std::net::SocketAddr;

use untether_net::raw::{self, RawError};
use untether_net::{MacAddr, RawEndpoint};
use untether_proto::{ControlFrame, LinkDeclineReason, Micros};

use crate::config::{ConfigError, NetworkToml, Transport};
use crate::driver::{Outgoing, Via};

/// What opening the raw socket came to.
#[derive(Debug)]
pub enum Opened {
    /// `network.transport = "udp"`.
    Udp,
    /// A raw socket.
    Raw(RawEndpoint),
    /// Raw was asked for but this side stays on UDP: why (logged as one line).
    Fallback(LinkDeclineReason, String),
}

/// Why a side finds no interface for raw frames by itself ([`host_interface`],
/// [`client_interface`]): it stays on UDP, saying so.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InterfaceError {
    /// The host is bound to a loopback address.
    #[error("{0} is on the loopback interface, which has no MAC address")]
    LoopbackBind(SocketAddr),
    #[error("no interface holds {0}")]
    NotHeld(std::net::IpAddr),
    #[error("no network interface is up")]
    NoneUp,
    /// The host is bound to every address and several interfaces are up: their names.
    #[error(
        "several interfaces are up ({}): name one with --interface / network.interface, or bind \
         to its address",
        .0.join(", ")
    )]
    Several(Vec<String>),
    /// The client reaches the host over loopback.
    #[error("the host {0} is reached over the loopback interface, which has no MAC address")]
    LoopbackHost(SocketAddr),
    #[error("no interface with an address routes to {0}")]
    NoRoute(SocketAddr),
}

/// Opens the raw layer-2 socket `network` asks for, on its interface or the one `auto` finds
/// (`auto`: the interface name, or why there is none). A configured interface that does not
/// exist (or several interfaces to choose from) is an error naming `network.interface`; no
/// CAP_NET_RAW, an interface without a MAC address, or a `max_datagram` the MTU cannot carry
/// is a fallback to UDP with the line to log.
pub fn open(
    network: &NetworkToml,
    auto: impl FnOnce() -> Result<String, InterfaceError>,
) -> Result<Opened, ConfigError> {
    if network.transport()? == Transport::Udp {
        return Ok(Opened::Udp);
    }
    let fallback = |why: String| {
        Ok(Opened::Fallback(
            LinkDeclineReason::Unavailable,
            format!("{why}; staying on UDP"),
        ))
    };
    let name = if network.interface.is_empty() {
        match auto() {
            Ok(n) => n,
            Err(why) => return fallback(format!("raw layer 2: {why}")),
        }
    } else {
        network.interface.clone()
    };
    match RawEndpoint::open(&name, raw::ETHERTYPE) {
        Ok(r) if (network.max_datagram as usize) > r.max_datagram() => fallback(format!(
            "raw layer 2: network.max_datagram {} does not fit {name}'s MTU of {} bytes (at most \
             {})",
            network.max_datagram,
            r.mtu(),
            r.max_datagram()
        )),
        Ok(r) => Ok(Opened::Raw(r)),
        Err(e @ RawError::NoInterface { .. }) => Err(ConfigError::Invalid {
            key: "network.interface".into(),
            message: e.to_string(),
        }),
        Err(e) => fallback(e.to_string()),
    }
}

/// The host's interface when none is configured: the one holding the bound address, or the
/// only one that is up.
pub fn host_interface(bind: std::net::SocketAddr) -> Result<String, InterfaceError> {
    if !bind.ip().is_unspecified() {
        if bind.ip().is_loopback() {
            return Err(InterfaceError::LoopbackBind(bind));
        }
        return raw::interface_with_address(bind.ip()).ok_or(InterfaceError::NotHeld(bind.ip()));
    }
    let mut names: Vec<String> = raw::interfaces().into_iter().map(|(n, _)| n).collect();
    names.dedup();
    match names.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(InterfaceError::NoneUp),
        many => Err(InterfaceError::Several(many.to_vec())),
    }
}

/// The client's interface when none is configured: the one its route to the host uses.
pub fn client_interface(host: SocketAddr) -> Result<String, InterfaceError> {
    if host.ip().is_loopback() {
        return Err(InterfaceError::LoopbackHost(host));
    }
    raw::interface_towards(host).ok_or(InterfaceError::NoRoute(host))
}

/// Between two LinkAddress offers of the client.
pub const OFFER_EVERY_US: Micros = 250_000;
/// Offers before the client gives up waiting for an answer.
pub const OFFERS: u32 = 4;
/// How long after switching the client waits for a frame from the host's MAC.
pub const CONFIRM_US: Micros = 1_000_000;

/// What a side's raw link did, for the report (`network.link`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct LinkReport {
    /// What this side's data plane ended up on (raw: it was sending raw frames at the end of
    /// the run).
    pub transport: Transport,
    /// The configured transport (`network.transport`).
    pub configured: Transport,
    /// The raw socket's interface and MAC address, when one was open.
    pub interface: Option<String>,
    pub mac: Option<String>,
    /// The peer's MAC address, when learned.
    pub peer_mac: Option<String>,
    /// Why the side is on UDP although `raw` was configured (the one line it logged).
    pub note: Option<String>,
    /// Raw frames sent and received (valid ones, from the expected MAC).
    pub frames_sent: u64,
    pub frames_received: u64,
    /// Raw frames dropped: from a MAC address that is not the peer's (or before it was
    /// learned), or with a bad length prefix.
    pub unexpected_mac: u64,
    pub malformed: u64,
    /// When this side first sent a raw frame, µs after its session connected.
    pub switched_after_us: Option<u64>,
    /// CPU time of this side's network thread (the driver: sockets, sealing, FEC, assembly)
    /// over the whole run, ms: with the frame counts, the data plane's CPU per frame.
    pub net_thread_cpu_ms: f64,
}

/// CPU time the calling thread has used, µs (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

impl LinkReport {
    /// A side that runs over UDP as configured.
    pub fn udp() -> LinkReport {
        LinkReport {
            transport: Transport::Udp,
            configured: Transport::Udp,
            ..Default::default()
        }
    }
}

/// One client's raw-link state on the host.
#[derive(Clone, Debug)]
struct RawPeer {
    addr: SocketAddr,
    mac: MacAddr,
    /// The client's latest datagram came as a raw frame: answer the same way.
    raw: bool,
    connected_us: Micros,
}

/// The host's side of the raw link.
#[derive(Debug)]
pub struct HostLink {
    /// This host's MAC and EtherType; None: no raw socket (UDP, or it could not open).
    own: Option<(MacAddr, u16)>,
    /// What to tell a client that offers while there is no raw socket.
    decline: LinkDeclineReason,
    peers: Vec<RawPeer>,
    pub report: LinkReport,
}

impl HostLink {
    /// A host with a raw socket at `mac` for `ethertype`.
    pub fn raw(mac: MacAddr, ethertype: u16, interface: &str) -> HostLink {
        HostLink {
            own: Some((mac, ethertype)),
            decline: LinkDeclineReason::Unavailable,
            peers: Vec::new(),
            report: LinkReport {
                transport: Transport::Udp,
                configured: Transport::Raw,
                interface: Some(interface.into()),
                mac: Some(mac.to_string()),
                ..Default::default()
            },
        }
    }

    /// A host without a raw socket: `reason` for clients that offer (`note`: why, for the
    /// report, when raw was configured).
    pub fn udp(reason: LinkDeclineReason, note: Option<String>) -> HostLink {
        let configured = if note.is_some() {
            Transport::Raw
        } else {
            Transport::Udp
        };
        HostLink {
            own: None,
            decline: reason,
            peers: Vec::new(),
            report: LinkReport {
                configured,
                note,
                ..LinkReport::udp()
            },
        }
    }

    /// A client offered its MAC address: the answer to send it (LinkAddress or LinkDeclined).
    pub fn on_link_address(
        &mut self,
        now: Micros,
        addr: SocketAddr,
        ethertype: u16,
        mac: [u8; 6],
    ) -> ControlFrame {
        let Some((own, own_type)) = self.own else {
            return ControlFrame::LinkDeclined {
                reason: self.decline,
            };
        };
        let mac = MacAddr(mac);
        if ethertype != own_type || mac.is_zero() || mac == own {
            return ControlFrame::LinkDeclined {
                reason: LinkDeclineReason::EtherType,
            };
        }
        match self.peers.iter_mut().find(|p| p.addr == addr) {
            Some(p) if p.mac == mac => {}
            Some(p) => {
                p.mac = mac;
                p.raw = false;
            }
            None => self.peers.push(RawPeer {
                addr,
                mac,
                raw: false,
                connected_us: now,
            }),
        }
        self.report.peer_mac = Some(mac.to_string());
        ControlFrame::LinkAddress {
            ethertype: own_type,
            mac: own.0,
        }
    }

    /// A raw frame from `src` arrived: the client's UDP address to hand its datagram to the
    /// session with (None: no client has that MAC — dropped and counted). It switches nothing:
    /// [`on_authentic`](Self::on_authentic) does, once the session opened the datagram.
    pub fn on_raw(&mut self, src: MacAddr) -> Option<SocketAddr> {
        match self.peers.iter().find(|p| p.mac == src) {
            Some(p) => {
                self.report.frames_received += 1;
                Some(p.addr)
            }
            None => {
                self.report.unexpected_mac += 1;
                None
            }
        }
    }

    /// The session authenticated a datagram of the client at `addr` that came as a raw frame
    /// (`raw`) or over UDP: the host answers that client the same way from now on. Only
    /// authenticated datagrams switch a client's transport.
    pub fn on_authentic(&mut self, now: Micros, addr: SocketAddr, raw: bool) {
        let Some(p) = self.peers.iter_mut().find(|p| p.addr == addr) else {
            return;
        };
        if p.raw == raw {
            return;
        }
        p.raw = raw;
        if raw {
            self.report.transport = Transport::Raw;
            self.report
                .switched_after_us
                .get_or_insert(now.saturating_sub(p.connected_us));
        } else if !self.peers.iter().any(|p| p.raw) {
            self.report.transport = Transport::Udp;
        }
    }

    /// The client at `addr` left: forget its MAC address.
    pub fn forget(&mut self, addr: SocketAddr) {
        self.peers.retain(|p| p.addr != addr);
    }

    /// `out` as it leaves: a raw frame to the client's MAC when that client is on raw.
    pub fn route(&mut self, mut out: Outgoing) -> Outgoing {
        if let (Some(dst), Via::Socket(0)) = (out.dst, out.via) {
            if let Some(p) = self.peers.iter().find(|p| p.addr == dst && p.raw) {
                out.via = Via::Raw(p.mac);
                self.report.frames_sent += 1;
            }
        }
        out
    }
}

/// Where the client's raw link stands.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ClientState {
    /// Not connected yet (or between sessions).
    Idle,
    /// Offering: `sent` offers so far, the next at `next_us`.
    Offering { sent: u32, next_us: Micros },
    /// Sending raw frames to the host's MAC since `since_us`; `confirmed` once a frame from it
    /// arrived.
    Raw {
        host: MacAddr,
        since_us: Micros,
        confirmed: bool,
    },
    /// On UDP for the rest of this session (declined, no answer, or no frame back).
    Udp,
}

/// What the client's link wants done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientAction {
    /// Send a LinkAddress with this MAC and EtherType.
    Offer { ethertype: u16, mac: [u8; 6] },
    /// The session stays on UDP: log this one line.
    StayOnUdp(String),
}

/// The client's side of the raw link (one per run: it restarts with each session).
#[derive(Debug)]
pub struct ClientLink {
    own: MacAddr,
    ethertype: u16,
    host: SocketAddr,
    state: ClientState,
    connected_us: Micros,
    pub report: LinkReport,
}

impl ClientLink {
    /// A client with a raw socket at `mac` for `ethertype`, talking to the host at `host`
    /// (its UDP address, which raw datagrams are handed to the session as).
    pub fn new(mac: MacAddr, ethertype: u16, host: SocketAddr, interface: &str) -> ClientLink {
        ClientLink {
            own: mac,
            ethertype,
            host,
            state: ClientState::Idle,
            connected_us: 0,
            report: LinkReport {
                transport: Transport::Udp,
                configured: Transport::Raw,
                interface: Some(interface.into()),
                mac: Some(mac.to_string()),
                ..Default::default()
            },
        }
    }

    /// A session connected: start offering (at once).
    pub fn on_connected(&mut self, now: Micros) {
        self.connected_us = now;
        self.state = ClientState::Offering {
            sent: 0,
            next_us: now,
        };
    }

    /// The session ended (the host went away): nothing raw until the next one connects.
    pub fn on_session_end(&mut self) {
        self.state = ClientState::Idle;
        self.report.transport = Transport::Udp;
    }

    /// The host's LinkAddress: switch to raw frames.
    pub fn on_link_address(&mut self, now: Micros, ethertype: u16, mac: [u8; 6]) {
        let mac = MacAddr(mac);
        if !matches!(self.state, ClientState::Offering { .. }) {
            return;
        }
        if ethertype != self.ethertype || mac.is_zero() || mac == self.own {
            self.state = ClientState::Udp;
            return;
        }
        self.report.peer_mac = Some(mac.to_string());
        self.report.transport = Transport::Raw;
        self.report
            .switched_after_us
            .get_or_insert(now.saturating_sub(self.connected_us));
        self.state = ClientState::Raw {
            host: mac,
            since_us: now,
            confirmed: false,
        };
    }

    /// The host's LinkDeclined: stay on UDP; the line to log.
    pub fn on_declined(&mut self, reason: LinkDeclineReason) -> Option<String> {
        if !matches!(self.state, ClientState::Offering { .. }) {
            return None;
        }
        self.state = ClientState::Udp;
        let line = format!("raw layer 2 declined: {}; staying on UDP", reason.text());
        self.report.note = Some(line.clone());
        Some(line)
    }

    /// A raw frame from `src`: the host's address to hand its datagram to the session with
    /// (None: not the host's MAC, or not switched — dropped and counted). It confirms
    /// nothing: [`on_authentic_raw`](Self::on_authentic_raw) does, once the session opened it.
    pub fn on_raw(&mut self, src: MacAddr) -> Option<SocketAddr> {
        match &self.state {
            ClientState::Raw { host, .. } if *host == src => {
                self.report.frames_received += 1;
                Some(self.host)
            }
            _ => {
                self.report.unexpected_mac += 1;
                None
            }
        }
    }

    /// The session authenticated a datagram that came as a raw frame from the host's MAC: the
    /// raw link works (no fallback to UDP). A forged frame with the host's MAC does not
    /// confirm it.
    pub fn on_authentic_raw(&mut self) {
        if let ClientState::Raw { confirmed, .. } = &mut self.state {
            *confirmed = true;
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    pub fn poll_timeout(&self) -> Option<Micros> {
        match self.state {
            ClientState::Offering { next_us, .. } => Some(next_us),
            ClientState::Raw {
                since_us,
                confirmed: false,
                ..
            } => Some(since_us + CONFIRM_US),
            _ => None,
        }
    }

    /// Offers again, or gives up.
    pub fn handle_timeout(&mut self, now: Micros) -> Option<ClientAction> {
        match self.state {
            ClientState::Offering { sent, next_us } if now >= next_us => {
                if sent >= OFFERS {
                    self.state = ClientState::Udp;
                    let line = format!(
                        "raw layer 2: the host did not answer {OFFERS} offers (an older host?); \
                         staying on UDP"
                    );
                    self.report.note = Some(line.clone());
                    return Some(ClientAction::StayOnUdp(line));
                }
                self.state = ClientState::Offering {
                    sent: sent + 1,
                    next_us: now + OFFER_EVERY_US,
                };
                Some(ClientAction::Offer {
                    ethertype: self.ethertype,
                    mac: self.own.0,
                })
            }
            ClientState::Raw {
                host,
                since_us,
                confirmed: false,
            } if now >= since_us + CONFIRM_US => {
                self.state = ClientState::Udp;
                self.report.transport = Transport::Udp;
                let line = format!(
                    "raw layer 2: no frame from the host's {host} within {} s (not on one link \
                     with it?); back to UDP",
                    CONFIRM_US / 1_000_000
                );
                self.report.note = Some(line.clone());
                Some(ClientAction::StayOnUdp(line))
            }
            _ => None,
        }
    }

    /// `out` as it leaves: a raw frame to the host's MAC while on raw. The raw link is the
    /// client's one path (it does not combine with multipath), so "every path" is it too.
    pub fn route(&mut self, mut out: Outgoing) -> Outgoing {
        if let (ClientState::Raw { host, .. }, Via::Socket(0) | Via::All) = (&self.state, out.via) {
            out.via = Via::Raw(*host);
            out.dst = None;
            self.report.frames_sent += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const CLIENT_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
    const T: u16 = untether_net::raw::ETHERTYPE;

    fn addr() -> SocketAddr {
        "10.0.0.2:4000".parse().unwrap()
    }

    fn out(via: Via) -> Outgoing {
        Outgoing {
            via,
            dst: Some(addr()),
            payload: vec![1],
        }
    }

    #[test]
    fn no_interface_found_is_a_fallback_that_says_why() {
        let lo: SocketAddr = "127.0.0.1:9710".parse().unwrap();
        let e = host_interface(lo).unwrap_err();
        assert_eq!(e, InterfaceError::LoopbackBind(lo));
        assert_eq!(
            e.to_string(),
            "127.0.0.1:9710 is on the loopback interface, which has no MAC address"
        );
        let e = client_interface(lo).unwrap_err();
        assert_eq!(e, InterfaceError::LoopbackHost(lo));
        assert_eq!(
            e.to_string(),
            "the host 127.0.0.1:9710 is reached over the loopback interface, which has no MAC \
             address"
        );
        assert_eq!(
            InterfaceError::Several(vec!["eth0".into(), "wlan0".into()]).to_string(),
            "several interfaces are up (eth0, wlan0): name one with --interface / \
             network.interface, or bind to its address"
        );
        let network = NetworkToml {
            transport: Transport::Raw,
            ..Default::default()
        };
        match open(&network, || Err(InterfaceError::NoneUp)).unwrap() {
            Opened::Fallback(LinkDeclineReason::Unavailable, line) => assert_eq!(
                line,
                "raw layer 2: no network interface is up; staying on UDP"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_host_answers_and_goes_raw_once_the_clients_frames_come_raw() {
        let mut h = HostLink::raw(HOST_MAC, T, "veth0");
        // Before any offer, a frame from anyone is unexpected.
        assert_eq!(h.on_raw(CLIENT_MAC), None);
        assert_eq!(h.report.unexpected_mac, 1);
        assert_eq!(
            h.on_link_address(10, addr(), T, CLIENT_MAC.0),
            ControlFrame::LinkAddress {
                ethertype: T,
                mac: HOST_MAC.0
            }
        );
        // Still UDP until a raw frame from the client's MAC arrives.
        assert_eq!(h.route(out(Via::Socket(0))).via, Via::Socket(0));
        assert_eq!(h.on_raw(MacAddr([9; 6])), None);
        assert_eq!(h.report.unexpected_mac, 2);
        assert_eq!(h.on_raw(CLIENT_MAC), Some(addr()));
        // Still UDP until the session authenticated that frame's datagram.
        assert_eq!(h.route(out(Via::Socket(0))).via, Via::Socket(0));
        h.on_authentic(510, addr(), true);
        assert_eq!(h.route(out(Via::Socket(0))).via, Via::Raw(CLIENT_MAC));
        assert_eq!(h.report.transport, Transport::Raw);
        assert_eq!(h.report.switched_after_us, Some(500));
        // Another client's address stays on UDP.
        let mut other = out(Via::Socket(0));
        other.dst = Some("10.0.0.3:1".parse().unwrap());
        assert_eq!(h.route(other).via, Via::Socket(0));
        // The client went back to UDP (an authenticated datagram over UDP): so does the host.
        h.on_authentic(550, addr(), false);
        assert_eq!(h.route(out(Via::Socket(0))).via, Via::Socket(0));
        assert_eq!(h.report.transport, Transport::Udp);
        h.forget(addr());
        assert_eq!(h.on_raw(CLIENT_MAC), None);
    }

    /// Forged frames (the client's MAC) or datagrams (its address) the session did not open
    /// switch nothing.
    #[test]
    fn only_authenticated_datagrams_switch_the_clients_transport() {
        let mut h = HostLink::raw(HOST_MAC, T, "veth0");
        h.on_link_address(10, addr(), T, CLIENT_MAC.0);
        // Forged raw frames with the client's MAC: handed to the session, nothing switched.
        assert_eq!(h.on_raw(CLIENT_MAC), Some(addr()));
        assert_eq!(h.route(out(Via::Socket(0))).via, Via::Socket(0));
        assert_eq!(h.report.transport, Transport::Udp);
        assert_eq!(h.report.switched_after_us, None);
        // The client's real frame, authenticated: raw.
        assert_eq!(h.on_raw(CLIENT_MAC), Some(addr()));
        h.on_authentic(600, addr(), true);
        assert_eq!(h.route(out(Via::Socket(0))).via, Via::Raw(CLIENT_MAC));
        // A forged UDP datagram with the client's address (no on_authentic) or an unknown
        // address's authenticated one: still raw.
        h.on_authentic(700, "10.0.0.9:1".parse().unwrap(), false);
        assert_eq!(h.route(out(Via::Socket(0))).via, Via::Raw(CLIENT_MAC));
        assert_eq!(h.report.transport, Transport::Raw);
    }

    #[test]
    fn a_host_without_raw_or_with_another_ethertype_declines() {
        let mut h = HostLink::udp(LinkDeclineReason::HostUsesUdp, None);
        assert_eq!(
            h.on_link_address(0, addr(), T, CLIENT_MAC.0),
            ControlFrame::LinkDeclined {
                reason: LinkDeclineReason::HostUsesUdp
            }
        );
        assert_eq!(h.report.configured, crate::config::Transport::Udp);
        let mut h = HostLink::raw(HOST_MAC, T, "veth0");
        assert_eq!(
            h.on_link_address(0, addr(), 0x88B6, CLIENT_MAC.0),
            ControlFrame::LinkDeclined {
                reason: LinkDeclineReason::EtherType
            }
        );
        assert_eq!(h.on_raw(CLIENT_MAC), None);
    }

    #[test]
    fn the_client_offers_switches_and_confirms() {
        let mut c = ClientLink::new(CLIENT_MAC, T, addr(), "veth1");
        assert_eq!(c.poll_timeout(), None);
        c.on_connected(1_000);
        assert_eq!(c.poll_timeout(), Some(1_000));
        assert_eq!(
            c.handle_timeout(1_000),
            Some(ClientAction::Offer {
                ethertype: T,
                mac: CLIENT_MAC.0
            })
        );
        assert_eq!(c.poll_timeout(), Some(1_000 + OFFER_EVERY_US));
        assert_eq!(c.route(out(Via::Socket(0))).via, Via::Socket(0));
        c.on_link_address(2_000, T, HOST_MAC.0);
        let o = c.route(out(Via::Socket(0)));
        assert_eq!((o.via, o.dst), (Via::Raw(HOST_MAC), None));
        // "Every path" is the raw link (it does not combine with multipath).
        assert_eq!(c.route(out(Via::All)).via, Via::Raw(HOST_MAC));
        assert_eq!(c.on_raw(MacAddr([7; 6])), None);
        assert_eq!(c.on_raw(HOST_MAC), Some(addr()));
        // Confirmed only once the session authenticated that frame's datagram.
        assert_eq!(c.poll_timeout(), Some(2_000 + CONFIRM_US));
        c.on_authentic_raw();
        assert_eq!(c.poll_timeout(), None, "confirmed: nothing to wait for");
        assert_eq!(c.handle_timeout(10_000_000), None);
        assert_eq!(c.report.transport, crate::config::Transport::Raw);
        assert_eq!(c.report.unexpected_mac, 1);
        // A new session starts over.
        c.on_session_end();
        assert_eq!(c.route(out(Via::Socket(0))).via, Via::Socket(0));
        assert_eq!(c.on_raw(HOST_MAC), None);
    }

    #[test]
    fn the_client_falls_back_to_udp_with_one_line() {
        // No frame back within the confirmation window.
        let mut c = ClientLink::new(CLIENT_MAC, T, addr(), "veth1");
        c.on_connected(0);
        c.handle_timeout(0);
        c.on_link_address(100, T, HOST_MAC.0);
        assert_eq!(c.handle_timeout(100 + CONFIRM_US - 1), None);
        let Some(ClientAction::StayOnUdp(line)) = c.handle_timeout(100 + CONFIRM_US) else {
            panic!("no fallback");
        };
        assert!(line.contains("back to UDP") && line.contains(&HOST_MAC.to_string()));
        // Forged frames with the host's MAC (never authenticated) do not keep it on raw.
        let mut c = ClientLink::new(CLIENT_MAC, T, addr(), "veth1");
        c.on_connected(0);
        c.handle_timeout(0);
        c.on_link_address(100, T, HOST_MAC.0);
        assert_eq!(c.on_raw(HOST_MAC), Some(addr()));
        assert!(matches!(
            c.handle_timeout(100 + CONFIRM_US),
            Some(ClientAction::StayOnUdp(_))
        ));
        assert_eq!(c.route(out(Via::Socket(0))).via, Via::Socket(0));
        assert_eq!(c.report.transport, crate::config::Transport::Udp);
        // Declined.
        let mut c = ClientLink::new(CLIENT_MAC, T, addr(), "veth1");
        c.on_connected(0);
        c.handle_timeout(0);
        let line = c.on_declined(LinkDeclineReason::HostUsesUdp).unwrap();
        assert!(line.contains("UDP"), "{line}");
        assert_eq!(c.on_declined(LinkDeclineReason::HostUsesUdp), None);
        // No answer at all: four offers, then UDP.
        let mut c = ClientLink::new(CLIENT_MAC, T, addr(), "veth1");
        c.on_connected(0);
        let mut offers = 0;
        let mut now = 0;
        let line = loop {
            match c.handle_timeout(now) {
                Some(ClientAction::Offer { .. }) => offers += 1,
                Some(ClientAction::StayOnUdp(l)) => break l,
                None => {}
            }
            now += OFFER_EVERY_US;
        };
        assert_eq!(offers, OFFERS);
        assert!(line.contains("did not answer"), "{line}");
        assert_eq!(c.poll_timeout(), None);
    }
}

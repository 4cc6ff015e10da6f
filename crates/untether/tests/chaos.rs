//! Chaos in-process: a forged ICMP port-unreachable aimed at a live client (raw socket, root).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use untether::client::{ClientOptions, Display};
use untether::config::ConfigToml;
use untether::HostOptions;

/// The RFC 1071 checksum of `data`.
fn checksum(data: &[u8]) -> u16 {
    let mut sum = 0u32;
    for c in data.chunks(2) {
        let word = u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Sends an ICMP "port unreachable" that claims the datagram `from` → `to` (UDP, loopback) was
/// refused, as anyone on the path could. The kernel hands it to the socket connected `from` →
/// `to` as ECONNREFUSED.
fn forge_port_unreachable(from: std::net::SocketAddrV4, to: std::net::SocketAddrV4) {
    let mut inner_ip = [0u8; 20];
    inner_ip[0] = 0x45;
    inner_ip[2..4].copy_from_slice(&48u16.to_be_bytes());
    inner_ip[8] = 64;
    inner_ip[9] = 17; // UDP
    inner_ip[12..16].copy_from_slice(&from.ip().octets());
    inner_ip[16..20].copy_from_slice(&to.ip().octets());
    let c = checksum(&inner_ip);
    inner_ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut udp = [0u8; 8];
    udp[0..2].copy_from_slice(&from.port().to_be_bytes());
    udp[2..4].copy_from_slice(&to.port().to_be_bytes());
    udp[4..6].copy_from_slice(&28u16.to_be_bytes());
    let mut icmp = vec![3u8, 3, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&inner_ip);
    icmp.extend_from_slice(&udp);
    let c = checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    // SAFETY: plain socket calls on a descriptor we own, with valid buffers and lengths.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP);
        assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
        let dst = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(from.ip().octets()),
            },
            sin_zero: [0; 8],
        };
        let n = libc::sendto(
            fd,
            icmp.as_ptr() as *const libc::c_void,
            icmp.len(),
            0,
            &dst as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(
            n,
            icmp.len() as isize,
            "{}",
            std::io::Error::last_os_error()
        );
        libc::close(fd);
    }
}

#[test]
fn a_forged_port_unreachable_does_not_end_a_live_session() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: forging an ICMP error needs a raw socket (root)");
        return;
    }
    let mut cfg = ConfigToml::default();
    cfg.video.resolution = "640x360".into();
    let mut video = cfg.video.validate().unwrap();
    video.fps = 60;
    let mut host_options = HostOptions {
        vr: Default::default(),
        video,
        scene: cfg.scene.clone(),
        host: cfg.host.clone(),
        network: cfg.network.clone(),
        webrtc: cfg.webrtc.clone(),
    };
    host_options.host.bind = "127.0.0.1:0".into();
    let (host_trust, client_trust) = untether::identity::memory_pair();
    let host = untether::Host::start_with(
        host_options,
        untether::HostSetup {
            trust: host_trust,
            ..Default::default()
        },
    )
    .expect("host starts");
    let host_addr = host.local_addr();
    let client_options = ClientOptions {
        vr: Default::default(),
        host: host_addr,
        client: cfg.client.clone(),
        network: cfg.network.clone(),
        display: Display::Headless,
        duration: Some(Duration::from_secs(4)),
        save_frame: None,
    };
    let client = std::thread::spawn(move || {
        untether::client::run_client_with(
            &client_options,
            untether::ClientIo {
                trust: client_trust,
                ..Default::default()
            },
            Arc::new(AtomicBool::new(false)),
        )
    });
    assert!(host.wait_for_client(Duration::from_secs(5)));
    std::thread::sleep(Duration::from_millis(500));
    // The host lists its clients with their addresses.
    let client_addr: std::net::SocketAddr = host
        .clients()
        .first()
        .and_then(|c| c.addr.parse().ok())
        .expect("the client's address");
    let (std::net::SocketAddr::V4(from), std::net::SocketAddr::V4(to)) = (client_addr, host_addr)
    else {
        panic!("IPv4 expected")
    };
    for _ in 0..5 {
        forge_port_unreachable(from, to);
        std::thread::sleep(Duration::from_millis(200));
    }
    let run = client
        .join()
        .expect("client thread")
        .expect("the session survives forged refusals");
    let summary = host.stop();
    assert!(run.refusals >= 1, "no refusal reached the client");
    assert!(
        run.reconnects.is_empty(),
        "a forged refusal made the client reconnect"
    );
    assert!(run.shown > 150, "{} frames shown", run.shown);
    assert!(summary.fatal.is_none());
}

//! Part 5 of tests/wayland.rs: the same headless sway through the desktop portal. The host asks
//! xdg-desktop-portal for a screen cast (xdg-desktop-portal-wlr picks HEADLESS-1 without a
//! dialog), reads it from PipeWire, and a client receives the window's pixels. A second start
//! offers the restore token the first one stored; a token the portal does not know is replaced.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use untether::client::{run_client_with, ClientIo, ClientOptions, Display, ShownFrameTap};
use untether::config::ConfigToml;
use untether::host::{HostSetup, InputSpec, SourceSpec};
use untether::identity::memory_pair;
use untether::{Host, HostOptions};

use crate::wayland_fixture::portal::PortalDesktop;
use crate::wayland_fixture::{Sway, OUTPUT};
use crate::{probes, worst};

fn start_host(token: &std::path::Path) -> Result<(Host, untether::identity::ClientTrust), String> {
    let (host_trust, client_trust) = memory_pair();
    let mut options = HostOptions::default();
    options.host.bind = "127.0.0.1:0".into();
    options.video.fps = 30;
    let host = Host::start_with(
        options,
        HostSetup {
            source: SourceSpec::Portal {
                token_file: Some(token.to_path_buf()),
            },
            input: InputSpec::Discard,
            stamp: false,
            trust: host_trust,
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    Ok((host, client_trust))
}

/// Runs a headless client until it has shown `want` frames matching sway's screen (or 6 s):
/// how many matched, and the differences seen.
fn watch(host: &Host, trust: untether::identity::ClientTrust, want: u32) -> (u32, Vec<i32>) {
    let cfg = ConfigToml::default();
    let opts = ClientOptions {
        vr: Default::default(),
        host: host.local_addr(),
        client: cfg.client,
        network: cfg.network,
        display: Display::Headless,
        duration: Some(Duration::from_secs(6)),
        save_frame: None,
    };
    let matched = Arc::new(AtomicU32::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let io = ClientIo {
        trust,
        shown_frame_tap: Some(ShownFrameTap(Box::new({
            let (matched, seen, stop) = (matched.clone(), seen.clone(), stop.clone());
            move |_, pic| {
                let Ok(f) = pic.to_bgra() else { return };
                let d = worst(&f.data, f.stride, &probes(), (0, 0));
                seen.lock().unwrap().push(d);
                if d <= 16 && matched.fetch_add(1, Ordering::Relaxed) + 1 >= want {
                    stop.store(true, Ordering::Relaxed);
                }
            }
        }))),
        ..Default::default()
    };
    run_client_with(&opts, io, stop).expect("client runs");
    let seen = seen.lock().unwrap().clone();
    (matched.load(Ordering::Relaxed), seen)
}

pub fn check(sway: &Sway) {
    let desk = match PortalDesktop::start(sway) {
        Ok(d) => d,
        Err(why) => {
            println!("skipped portal capture: the portal stack cannot start here: {why}");
            return;
        }
    };
    // The host's process talks to the private session bus (gio reads this once, at first use).
    std::env::set_var("DBUS_SESSION_BUS_ADDRESS", &desk.bus);
    let token = desk.dir().join("state").join("portal-restore-token");

    // First start: no token; the portal's chooser (none: HEADLESS-1) picks the output.
    let (host, trust) = start_host(&token)
        .unwrap_or_else(|e| panic!("portal capture of sway: {e} ({})", desk.log_tail()));
    assert_eq!(host.options().video.resolution.width, OUTPUT.0);
    assert_eq!(host.options().video.resolution.height, OUTPUT.1);
    let (matched, seen) = watch(&host, trust, 3);
    let summary = host.stop();
    println!(
        "portal → client: {matched} frames matched sway's screen; host captured {}, unchanged ticks {}, dropped {}; {:?}",
        summary.captured, summary.unchanged, summary.dropped, summary.events
    );
    assert!(
        matched >= 1,
        "the client's pictures differ from sway's screen by up to {seen:?}"
    );
    let note = |s: &untether::HostSummary| {
        s.events
            .iter()
            .find(|e| e.starts_with("capturing through the desktop portal"))
            .cloned()
            .unwrap_or_default()
    };
    let first = note(&summary);
    assert!(first.contains("PipeWire node"), "{:?}", summary.events);

    // xdg-desktop-portal-wlr 0.7 persists (ScreenCast v4, persist_mode): the token is stored
    // and a second start offers it (no dialog).
    let stored = std::fs::read_to_string(&token).ok();
    if first.contains("the portal keeps no permission") {
        println!("portal restore token: the backend gives none (no persistence), so there is none to reuse");
        assert!(stored.is_none());
        return;
    }
    let stored = stored.expect("the restore token is stored");
    let (host, trust) = start_host(&token).expect("second portal start");
    let (matched, _) = watch(&host, trust, 1);
    let summary = host.stop();
    assert!(matched >= 1);
    assert!(
        note(&summary).contains("the stored permission was offered"),
        "{:?}",
        summary.events
    );
    println!(
        "portal restore token: stored {} bytes, offered again on the second start",
        stored.trim().len()
    );

    // A token the portal does not know (revoked, another machine's): the portal asks again
    // (here its chooser picks at once) and the new token replaces it.
    std::fs::write(&token, "not-a-token-of-this-portal\n").expect("write token");
    let (host, _) = start_host(&token).expect("start with an unknown token");
    host.stop();
    let now = std::fs::read_to_string(&token).unwrap_or_default();
    assert_ne!(now.trim(), "not-a-token-of-this-portal");
    assert!(!now.trim().is_empty());
}

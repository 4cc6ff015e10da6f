//! untether: low-latency streaming for untethered VR and interactive games.
//!
//! This crate runs the two sides: [`host::Host`] (a frame source — the test scene, X11
//! capture, a pipe, or the application — → conversion and encoding → the network driver, which
//! packetizes, paces and sends; the client's input goes to the scene, the application or XTEST,
//! and Opus audio travels beside it) and [`client::run_client`] (the network driver reassembles
//! frames → decoder → presenter or pipe sink, with the window's and registered devices' input
//! back, and audio playback).
//!
//! On each side one thread, the network [`driver`], owns the protocol session and the sockets;
//! the other threads hand it commands and take its events, and latest-wins [`slot`]s sit between
//! the stages. Sources that run on a clock wake on the one frame [`ticker`]; the host spreads a
//! frame's datagrams with [`pacing`]. Also here: configuration ([`config`]), identities on disk
//! ([`identity`]), statistics ([`stats`]) and the latency [`report`]. [`api`] is the embedding
//! API for applications (the C API in `untether-ffi` wraps it). docs/ARCHITECTURE.md draws the
//! whole picture.

pub mod api;
pub mod client;
pub mod clock;
pub mod config;
pub mod discovery;
pub mod driver;
pub mod host;
pub mod identity;
pub mod link;
pub mod pacing;
pub mod pose;
pub mod report;
pub mod slot;
pub mod stats;
pub mod ticker;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

pub use api::{ClientContext, Frame, HostContext, PixelFormat};
pub use client::{
    run_client_to_end, run_client_with, ClientAudio, ClientError, ClientIo, ClientOptions,
    ClientRun, Display, InputDevice, ShownFrameTap,
};
pub use host::{
    AudioSpec, Host, HostError, HostOptions, HostSetup, HostSummary, InputSpec, SentFrameTap,
    SourceSpec,
};
pub use report::Report;

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("host: {0}")]
    Host(#[from] HostError),
    #[error("client: {0}")]
    Client(#[from] ClientError),
    #[error("host failed: {0}")]
    HostFailed(String),
}

/// Options of a demo run: a host and a client in this process, over loopback UDP.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    pub host: HostOptions,
    pub client: ClientOptions,
}

/// Describes a run for the report's `config` section.
pub fn report_config(
    host: &HostOptions,
    display: Display,
    transport: &str,
) -> report::ReportConfig {
    let v = &host.video;
    report::ReportConfig {
        width: v.resolution.width,
        height: v.resolution.height,
        fps: v.fps,
        codec: v.selection.codec_name().into(),
        encoder: v.selection.encoder.name().into(),
        decoder: String::new(),
        refresh: match v.refresh {
            untether_media::codec::Refresh::Idr => "idr".into(),
            untether_media::codec::Refresh::Intra => format!("intra/{}", v.refresh_period),
        },
        preset: v.preset.clone(),
        conversion: v.selection.conversion.name().into(),
        bitrate_kbps: v.bitrate_kbps,
        slices: v.slices,
        transport: transport.into(),
        paths: 1,
        impairment: None,
        display: match display {
            Display::Window => "sdl-window".into(),
            Display::Headless => "headless".into(),
        },
        machine: report::machine_description(),
    }
}

/// Streams the test scene from a host to a client on this machine, both in this process,
/// over real UDP on the loopback interface, and returns the report. The two get throwaway
/// identities ([`identity::memory_pair`]): the host allows only this client.
pub fn run_demo(options: DemoOptions, stop: Arc<AtomicBool>) -> Result<Report, DemoError> {
    run_demo_with(options, HostSetup::default(), ClientIo::default(), stop)
}

/// Like [`run_demo`], with a host setup (source, input, audio) and client I/O.
pub fn run_demo_with(
    options: DemoOptions,
    setup: HostSetup,
    io: ClientIo,
    stop: Arc<AtomicBool>,
) -> Result<Report, DemoError> {
    run_demo_detailed(options, setup, io, stop).map(|d| d.report)
}

/// A demo run: the report and what it was built from.
#[derive(Debug)]
pub struct DemoRun {
    pub report: Report,
    pub client: ClientRun,
    pub host: HostSummary,
}

/// Like [`run_demo_with`], also returning the client's per-frame records and the host's
/// summary (for benchmarks that plot frame by frame).
pub fn run_demo_detailed(
    mut options: DemoOptions,
    mut setup: HostSetup,
    mut io: ClientIo,
    stop: Arc<AtomicBool>,
) -> Result<DemoRun, DemoError> {
    options.host.host.bind = "127.0.0.1:0".into();
    if matches!(setup.trust, identity::HostTrust::Stored)
        && matches!(io.trust, identity::ClientTrust::Stored)
    {
        // Host and client in this process: a throwaway identity each, the host allowing only
        // this client (nothing is read from or written to the state directory).
        let (host, client) = identity::memory_pair();
        setup.trust = host;
        io.trust = client;
    }
    let host = Host::start_with(options.host.clone(), setup)?;
    if let Some(link) = host.browser_link() {
        // The demo's host serves browsers too (`--webrtc`): beside this client, as a viewer.
        log::info!("demo: browsers: open {link} (one browser; the link is single-use)");
    }
    options.client.host = host.local_addr();
    let run = client::run_client_with(&options.client, io, stop);
    // Let the host account for the Bye before stopping it.
    std::thread::sleep(Duration::from_millis(20));
    let summary = host.stop();
    let run = match (run, &summary.fatal) {
        (_, Some(f)) => return Err(DemoError::HostFailed(f.clone())),
        (r, None) => r?,
    };
    let mut config = report_config(
        &options.host,
        options.client.display,
        &format!("{}-loopback", run.link.transport),
    );
    // What ran, rather than what was asked for (`auto`).
    if let Some(e) = &summary.encoder {
        config.encoder = e.clone();
    }
    if let Some(c) = &summary.codec {
        config.codec = c.clone();
    }
    config.decoder = run.decoder.clone().unwrap_or_default();
    let report = report::build(config, &run, Some(&summary));
    Ok(DemoRun {
        report,
        client: run,
        host: summary,
    })
}

/// Resolves "HOST[:PORT]" for the client.
pub fn resolve_host(
    name: &str,
    default_port: u16,
) -> Result<std::net::SocketAddr, untether_net::NetError> {
    untether_net::resolve(name, default_port)
}

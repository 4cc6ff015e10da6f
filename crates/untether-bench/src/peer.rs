//! The side-by-side peer: the same stamped test-scene frames through the `ffmpeg` command
//! (libx264 with untether's encoder settings) over RTP, decoded by a second `ffmpeg` into raw
//! frames that we read back, so glass-to-glass comes from the same pixel stamps.
//!
//! - `ffmpeg-rtp`: RTP over UDP to 127.0.0.1 (the receiver reads an SDP we write).
//! - `ffmpeg-rtp-tcp`: RTP interleaved over TCP: the receiver is an RTSP server
//!   (`-rtsp_flags listen`), the sender pushes with `-rtsp_transport tcp`.
//! - `rtsp-udp`, `rtsp-tcp`: not a peer of ours but untether's own RTSP output
//!   (`untether host --rtsp`) played by `ffmpeg -i rtsp://…` (`rtsp_peer.rs`).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use untether::clock::{now_us, sleep_until};
use untether::report::Pcts;
use untether::stats::Samples;
use untether_media::scene::{Scene, SceneConfig};
use untether_media::{stamp, BgraFrame};

use untether_netem::netns::Side;

use crate::scenario::Scenario;
use crate::series::{FrameSample, ScenarioResult};

/// Which peer pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerKind {
    /// RTP over UDP.
    FfmpegRtp,
    /// RTP interleaved over TCP (RTSP).
    FfmpegRtpTcp,
    /// untether's host with its RTSP server, played by `ffmpeg -rtsp_transport udp`.
    RtspUdp,
    /// The same, `-rtsp_transport tcp` (RTP interleaved in the RTSP connection).
    RtspTcp,
}

/// Every peer's name, as `--peer` takes them.
pub const PEER_NAMES: [&str; 4] = ["ffmpeg-rtp", "ffmpeg-rtp-tcp", "rtsp-udp", "rtsp-tcp"];

impl PeerKind {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            PeerKind::FfmpegRtp => "ffmpeg-rtp",
            PeerKind::FfmpegRtpTcp => "ffmpeg-rtp-tcp",
            PeerKind::RtspUdp => "rtsp-udp",
            PeerKind::RtspTcp => "rtsp-tcp",
        }
    }
}

impl FromStr for PeerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ffmpeg-rtp" => Ok(PeerKind::FfmpegRtp),
            "ffmpeg-rtp-tcp" => Ok(PeerKind::FfmpegRtpTcp),
            "rtsp-udp" => Ok(PeerKind::RtspUdp),
            "rtsp-tcp" => Ok(PeerKind::RtspTcp),
            _ => Err(format!(
                "unknown peer {s:?}; allowed: {}",
                PEER_NAMES.join(", ")
            )),
        }
    }
}

/// The peer could not run.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("cannot run ffmpeg: {0} (the Debian package ffmpeg; scripts/setup.sh installs it)")]
    NoFfmpeg(std::io::Error),
    #[error("{0}")]
    Failed(String),
}

/// Kills and reaps a child on every exit path.
pub(crate) struct Reaped(pub(crate) Option<Child>, pub(crate) &'static str);

impl Reaped {
    pub(crate) fn stderr_tail(&mut self) -> String {
        let Some(mut c) = self.0.take() else {
            return String::new();
        };
        let _ = c.kill();
        let mut s = String::new();
        if let Some(mut e) = c.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        let _ = c.wait();
        let tail: Vec<&str> = s.lines().rev().take(6).collect();
        format!(
            "{} said: {}",
            self.1,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        )
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port(tcp: bool) -> Result<u16, PeerError> {
    let port = if tcp {
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr())
    } else {
        // RTP uses the even port and RTCP the next one: find an even one with a free successor.
        (0..50)
            .find_map(|_| {
                let s = std::net::UdpSocket::bind("127.0.0.1:0").ok()?;
                let p = s.local_addr().ok()?.port();
                (p % 2 == 0 && p < 65534 && std::net::UdpSocket::bind(("127.0.0.1", p + 1)).is_ok())
                    .then(|| s.local_addr())
            })
            .unwrap_or_else(|| Err(std::io::Error::other("no free even UDP port")))
    };
    port.map(|a| a.port())
        .map_err(|e| PeerError::Failed(format!("no free port: {e}")))
}

/// The x264 settings untether uses (crates/untether-media/src/codec.rs), as ffmpeg flags.
fn encoder_args(sc: &Scenario) -> Vec<String> {
    let kbps = sc.bitrate_kbps;
    let mut x264 = String::from("repeat-headers=1:scenecut=0:sliced-threads=1");
    if sc.slices > 0 {
        x264.push_str(&format!(":slices={}", sc.slices));
    }
    // untether sends keyframes only when asked; a peer cannot ask, so it gets one a second
    // (keyframes cost bitrate, not latency, at the same VBV size).
    let gop = if sc.gop > 0 { sc.gop } else { sc.fps };
    [
        "-c:v",
        "libx264",
        "-preset",
        &sc.preset,
        "-tune",
        &sc.tune,
        "-b:v",
        &format!("{kbps}k"),
        "-maxrate",
        &format!("{kbps}k"),
        "-bufsize",
        &format!("{}k", (kbps / sc.fps.max(1)).max(1)),
        "-g",
        &gop.to_string(),
        "-bf",
        "0",
        "-x264-params",
        &x264,
        "-pix_fmt",
        "yuv420p",
        "-color_range",
        "tv",
        "-colorspace",
        "smpte170m",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

// No `-fflags nobuffer`: with it the receiving ffmpeg drops the packets it read while probing
// the stream, and with them the first keyframe, so every run lost its first GOP (a second of
// frames) before the peer showed anything. Buffered, those packets come out a few frames late
// once, then the stream runs as before (median within noise of the unbuffered one).
pub(crate) const LOW_DELAY_IN: [&str; 6] = [
    "-flags",
    "low_delay",
    "-probesize",
    "100000",
    "-analyzeduration",
    "0",
];

/// A frame the peer's player wrote out, with its stamp.
pub(crate) struct Received {
    pub(crate) frame: u32,
    captured_us: u64,
    shown_us: u64,
}

/// Reads raw I420 frames of `w`×`h` from `out` until it ends, each stamp read as soon as its
/// frame is complete; the count of unreadable stamps beside.
pub(crate) fn spawn_reader(
    mut out: impl Read + Send + 'static,
    w: u32,
    h: u32,
) -> Result<(std::thread::JoinHandle<Vec<Received>>, Arc<AtomicU64>), PeerError> {
    let frame_len = (w * h + 2 * (w / 2) * (h / 2)) as usize;
    let unreadable = Arc::new(AtomicU64::new(0));
    let bad = unreadable.clone();
    let reader = std::thread::Builder::new()
        .name("peer-reader".into())
        .spawn(move || {
            let mut buf = vec![0u8; frame_len];
            let mut got = Vec::new();
            while out.read_exact(&mut buf).is_ok() {
                let shown = now_us();
                match stamp::read_plane(&buf[..(w * h) as usize], w as usize, w, h) {
                    Some(st) => got.push(Received {
                        frame: st.frame_number,
                        captured_us: stamp::unwrap_capture_us(st.capture_us, shown),
                        shown_us: shown,
                    }),
                    None => {
                        bad.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            got
        })
        .map_err(|e| PeerError::Failed(format!("reader thread: {e}")))?;
    Ok((reader, unreadable))
}

/// What a peer run measured, for its report.
pub(crate) struct PeerRun<'a> {
    pub kind: PeerKind,
    pub sc: &'a Scenario,
    pub got: Vec<Received>,
    pub captured: u64,
    pub encoded: u64,
    pub dropped_host: u64,
    /// The first frame number the sender sent to this player (frames before it are not
    /// lost: the player was not there yet).
    pub first_frame: u64,
    pub unreadable: u64,
    pub duration_s: f64,
    pub encoder: &'a str,
    pub conversion: &'a str,
    pub impairment: serde_json::Value,
    /// Stages the peer's sender measured (the untether host behind `rtsp-*`), besides `total`.
    pub stages: serde_json::Map<String, serde_json::Value>,
    pub note: &'a str,
    /// More fields for the report (`rtsp`: the RTSP server's summary).
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// Runs `sc` through the peer; `progress` gets 0..1.
pub fn run_peer(
    kind: PeerKind,
    sc: &Scenario,
    progress: &mut dyn FnMut(f64),
) -> Result<ScenarioResult, PeerError> {
    if matches!(kind, PeerKind::RtspUdp | PeerKind::RtspTcp) {
        #[cfg(feature = "rtsp")]
        return crate::rtsp_peer::run(kind, sc, progress);
        #[cfg(not(feature = "rtsp"))]
        return Err(PeerError::Failed(format!(
            "peer {}: this build of untether has no RTSP server (built without the `rtsp` \
             feature, as the aarch64 client build is)",
            kind.name()
        )));
    }
    let (w, h, fps) = (sc.width, sc.height, sc.fps.max(1));
    let size = format!("{w}x{h}");
    let tcp = kind == PeerKind::FfmpegRtpTcp;
    let port = free_port(tcp)?;
    // With the netns transport: the sending ffmpeg in the host namespace, the receiving one in
    // the client namespace, over the veth pair with the scenario's rate limit and kernel loss.
    let testbed = match sc.transport.as_str() {
        "loopback" => None,
        "netns" => {
            Some(crate::run::testbed(sc).map_err(|e| PeerError::Failed(format!("netns: {e}")))?)
        }
        other => {
            return Err(PeerError::Failed(format!(
                "transport {other:?}: allowed: loopback, netns"
            )))
        }
    };
    let rx_ip = testbed
        .as_ref()
        .map_or("127.0.0.1".to_string(), |tb| tb.client_addr().to_string());
    let ffmpeg = |side: Side| match &testbed {
        Some(tb) => tb.command(side, "ffmpeg"),
        None => Command::new("ffmpeg"),
    };
    let dir = std::env::temp_dir().join(format!("untether-peer-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| PeerError::Failed(format!("{}: {e}", dir.display())))?;
    let sdp: PathBuf = dir.join("stream.sdp");
    // The receiver first, so the first keyframe is not lost.
    let mut rx_cmd = ffmpeg(Side::Client);
    rx_cmd.args(["-hide_banner", "-loglevel", "error", "-nostats"]);
    rx_cmd.args(LOW_DELAY_IN);
    let url = format!("rtsp://{rx_ip}:{port}/live");
    if tcp {
        rx_cmd.args([
            "-rtsp_flags",
            "listen",
            "-rtsp_transport",
            "tcp",
            "-i",
            &url,
        ]);
    } else {
        std::fs::write(
            &sdp,
            format!(
                "v=0\r\no=- 0 0 IN IP4 {rx_ip}\r\ns=untether peer\r\nc=IN IP4 {rx_ip}\r\nt=0 0\r\n\
                 m=video {port} RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=fmtp:96 packetization-mode=1\r\n"
            ),
        )
        .map_err(|e| PeerError::Failed(format!("{}: {e}", sdp.display())))?;
        rx_cmd.args([
            "-protocol_whitelist",
            "file,udp,rtp",
            "-reorder_queue_size",
            "0",
            "-i",
        ]);
        rx_cmd.arg(&sdp);
    }
    rx_cmd.args(["-an", "-f", "rawvideo", "-pix_fmt", "yuv420p", "-"]);
    let mut receiver = Reaped(
        Some(
            rx_cmd
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(PeerError::NoFfmpeg)?,
        ),
        "the receiving ffmpeg",
    );
    let rx_out = receiver
        .0
        .as_mut()
        .and_then(|c| c.stdout.take())
        .ok_or_else(|| PeerError::Failed("no receiver stdout".into()))?;
    // Reader: one frame at a time, stamp read as soon as the frame is complete.
    let (reader, unreadable) = spawn_reader(rx_out, w, h)?;
    // The sender starts once the receiver's socket (or RTSP listener) is open: an RTSP push
    // that meets a closed port fails, and RTP sent before the socket is bound is lost. The
    // receiver's own namespace is read through its pid (`ip netns exec` execs ffmpeg).
    let socket = if tcp {
        untether_netem::ports::Socket::TcpListening
    } else {
        untether_netem::ports::Socket::Udp
    };
    let rx_pid = receiver.0.as_ref().map(|c| c.id());
    if !untether_netem::ports::wait_for_port(socket, port, rx_pid, Duration::from_secs(20)) {
        return Err(PeerError::Failed(format!(
            "{}: the receiving ffmpeg did not open port {port} within 20 s. {}",
            kind.name(),
            receiver.stderr_tail()
        )));
    }
    let mut tx_cmd = ffmpeg(Side::Host);
    tx_cmd.args(["-hide_banner", "-loglevel", "error", "-nostats"]);
    tx_cmd.args([
        "-f",
        "rawvideo",
        "-pix_fmt",
        "bgr0",
        "-s",
        &size,
        "-r",
        &fps.to_string(),
    ]);
    tx_cmd.args(["-i", "-", "-an"]);
    tx_cmd.args(encoder_args(sc));
    if tcp {
        tx_cmd.args(["-f", "rtsp", "-rtsp_transport", "tcp", &url]);
    } else {
        tx_cmd.args(["-f", "rtp", &format!("rtp://{rx_ip}:{port}?pkt_size=1200")]);
    }
    let mut sender = Reaped(
        Some(
            tx_cmd
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(PeerError::NoFfmpeg)?,
        ),
        "the sending ffmpeg",
    );
    let stdin: ChildStdin = sender
        .0
        .as_mut()
        .and_then(|c| c.stdin.take())
        .ok_or_else(|| PeerError::Failed("no sender stdin".into()))?;
    // Writer: the renderer never waits for ffmpeg; a frame the writer is still busy with
    // when the next is captured is dropped and counted (as untether's host does).
    let (tx, rx) = mpsc::sync_channel::<BgraFrame>(1);
    let write_failed = Arc::new(AtomicBool::new(false));
    let wf = write_failed.clone();
    let writer = std::thread::Builder::new()
        .name("peer-writer".into())
        .spawn(move || {
            let mut stdin = stdin;
            for f in rx {
                let row = f.width as usize * 4;
                let ok = if f.stride == row {
                    stdin.write_all(&f.data)
                } else {
                    (0..f.height as usize).try_for_each(|y| {
                        stdin.write_all(&f.data[y * f.stride..y * f.stride + row])
                    })
                };
                if ok.is_err() {
                    wf.store(true, Ordering::Relaxed);
                    break;
                }
            }
        })
        .map_err(|e| PeerError::Failed(format!("writer thread: {e}")))?;
    let mut cfg = SceneConfig::new(w, h);
    cfg.spin_deg_per_s = sc.spin_deg_per_s as f32;
    let mut scene = Scene::new(cfg).map_err(|e| PeerError::Failed(format!("scene: {e}")))?;
    let interval = 1_000_000 / fps as u64;
    let start = now_us();
    let started = Instant::now();
    let total = (sc.duration_s * fps as f64).round() as u64;
    let (mut captured, mut dropped) = (0u64, 0u64);
    let mut spare: Option<BgraFrame> = None;
    for n in 0..total {
        sleep_until(start + n * interval);
        if write_failed.load(Ordering::Relaxed) {
            break;
        }
        // The receiving side (the peer's client) gone mid-run: the run is void, say so now.
        if let Some(Ok(Some(status))) = receiver.0.as_mut().map(|c| c.try_wait()) {
            drop(tx);
            let _ = writer.join();
            return Err(PeerError::Failed(format!(
                "{}: the receiving ffmpeg (the client side) exited mid-run ({status}) after {n} \
                 of {total} frames. {}",
                kind.name(),
                receiver.stderr_tail()
            )));
        }
        let mut f = match spare.take() {
            Some(f) => f,
            None => BgraFrame::new(w, h).map_err(|e| PeerError::Failed(e.to_string()))?,
        };
        let t0 = now_us();
        scene.render((t0 - start) as f64 / 1e6, &mut f);
        stamp::write_bgra(
            &mut f,
            &stamp::Stamp {
                frame_number: n as u32,
                capture_us: now_us(),
                input_seq: 0,
            },
        );
        captured += 1;
        match tx.try_send(f) {
            Ok(()) => {}
            Err(mpsc::TrySendError::Full(f)) => {
                dropped += 1;
                spare = Some(f);
            }
            Err(mpsc::TrySendError::Disconnected(_)) => break,
        }
        if n % 6 == 0 {
            progress(n as f64 / total.max(1) as f64);
        }
    }
    drop(tx);
    let _ = writer.join();
    // Close the sender's input: it flushes and ends; give the receiver a moment for the tail.
    let sender_ok = sender.0.as_mut().map(|c| {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            match c.try_wait() {
                Ok(Some(s)) => break s.success(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => break false,
            }
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    let sender_tail = if write_failed.load(Ordering::Relaxed) || sender_ok == Some(false) {
        sender.stderr_tail()
    } else {
        drop(sender);
        String::new()
    };
    let receiver_tail = receiver.stderr_tail();
    let got = reader
        .join()
        .map_err(|_| PeerError::Failed("the reader panicked".into()))?;
    let _ = std::fs::remove_dir_all(&dir);
    progress(1.0);
    if got.is_empty() {
        return Err(PeerError::Failed(format!(
            "{}: no frame came back. {sender_tail} {receiver_tail}",
            kind.name()
        )));
    }
    if write_failed.load(Ordering::Relaxed) {
        return Err(PeerError::Failed(format!(
            "{}: the sending ffmpeg stopped taking frames mid-run ({captured} of {total} \
             rendered). {sender_tail}",
            kind.name()
        )));
    }
    Ok(peer_result(PeerRun {
        kind,
        sc,
        got,
        captured,
        encoded: captured - dropped,
        dropped_host: dropped,
        first_frame: 0,
        unreadable: unreadable.load(Ordering::Relaxed),
        duration_s: started.elapsed().as_secs_f64(),
        encoder: "libx264 (ffmpeg command)",
        conversion: "swscale (ffmpeg command)",
        impairment: serde_json::json!(testbed
            .as_ref()
            .and_then(|tb| crate::run::testbed_impairment(tb, sc))),
        stages: Default::default(),
        note: "the ffmpeg command encodes (libx264, same preset/tune/bitrate/VBV/slices, a keyframe every second) and sends RTP; a second ffmpeg receives, decodes and writes raw I420 that untether reads back; glass-to-glass from the pixel stamps",
        extra: Default::default(),
    }))
}

/// The report of a peer run (the contract in docs/REPORT.md), glass-to-glass from the
/// stamps of the frames the peer's player wrote out.
pub(crate) fn peer_result(run: PeerRun<'_>) -> ScenarioResult {
    let PeerRun {
        kind,
        sc,
        got,
        captured,
        encoded,
        dropped_host,
        first_frame,
        unreadable,
        duration_s,
        ..
    } = run;
    let (w, h, fps) = (sc.width, sc.height, sc.fps.max(1));
    let mut g2g = Samples::default();
    let t0 = got.first().map_or(0, |r| r.captured_us);
    let frames: Vec<FrameSample> = got
        .iter()
        .map(|r| {
            let ms = (r.shown_us as i64 - r.captured_us as i64) as f64 / 1000.0;
            g2g.push_us(r.shown_us as i64 - r.captured_us as i64);
            FrameSample {
                frame: r.frame,
                captured_ms: (r.captured_us as i64 - t0 as i64) as f64 / 1000.0,
                glass_to_glass_ms: ms,
                // A peer sees no stages: the HTML shows its glass-to-glass as `total`.
                stages_ms: Default::default(),
                bytes: 0,
                keyframe: false,
            }
        })
        .collect();
    let pcts: Pcts = (&g2g).into();
    let empty: Pcts = (&Samples::default()).into();
    let shown = got.len() as u64;
    let highest = got.iter().map(|r| r.frame as u64).max().unwrap_or(0);
    // Freezes: the longest time between two frames coming out, as for untether.
    let gaps = || {
        got.windows(2)
            .map(|w| w[1].shown_us.saturating_sub(w[0].shown_us))
    };
    let longest_freeze_ms = gaps().max().unwrap_or(0) as f64 / 1000.0;
    let freezes_over_100ms = gaps().filter(|&g| g > 100_000).count();
    let mut stages = run.stages;
    stages.insert("total".into(), serde_json::json!(pcts));
    let mut report = serde_json::json!({
        "config": {
            "width": w, "height": h, "fps": fps, "codec": "h264", "encoder": run.encoder,
            "preset": sc.preset, "conversion": run.conversion, "bitrate_kbps": sc.bitrate_kbps,
            "transport": kind.name(), "paths": 1,
            "impairment": run.impairment,
            "display": "headless",
            "machine": untether::report::machine_description(),
        },
        "duration_s": duration_s,
        "frames": {
            "captured": captured, "encoded": encoded, "sent": encoded,
            "complete": shown, "decoded": shown + unreadable, "shown": shown,
            "late": 0, "lost": (highest + 1).saturating_sub(first_frame + shown + dropped_host),
            "corrupted": 0,
            "dropped_host": dropped_host, "dropped_client": 0, "keyframes": null,
            "stamp_unreadable": unreadable,
            "longest_freeze_ms": longest_freeze_ms, "freezes_over_100ms": freezes_over_100ms,
        },
        "latency_ms": {
            "glass_to_glass": pcts, "glass_to_glass_pixels": pcts,
            "stages": stages,
        },
        "network": {
            "bytes_sent": null, "packets_sent": null, "packets_lost": null, "packets_recovered": null,
            "rtt_ms": {"p50": null, "p99": null},
        },
        "input": {"events_sent": 0, "events_applied": null, "response_ms": empty},
        "peer": {
            "kind": kind.name(),
            "note": run.note,
        },
    });
    if let Some(obj) = report.as_object_mut() {
        obj.extend(run.extra);
    }
    ScenarioResult {
        name: sc.display_name(),
        system: kind.name().into(),
        report,
        frames,
        quality: Vec::new(),
        response: Vec::new(),
        duration_s,
    }
}

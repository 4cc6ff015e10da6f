//! What the client opens before its threads start, one named step each: the sink and audio,
//! the host's pinned key, the sockets of each path, the raw layer-2 transport, the session's
//! settings, the decodable codecs and the head pose source. Any failure stops the start.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use untether_media::audio::{AudioOut, Playout};
use untether_media::codec::{Decoder, DecoderConfig};
use untether_media::pipe::PipeWriter;
use untether_net::{RawEndpoint, UdpEndpoint};
use untether_proto::{fingerprint, ClientConfig, Micros};

use super::options::{ClientIo, ClientOptions, Display};
use super::trust::KnownHosts;
use super::ClientError;
use crate::clock::now_us;
use crate::config::PoseSpec;
use crate::identity::{ClientTrust, HostPin, Role, StateDir, KNOWN_HOSTS_FILE};
use crate::pose::{MouseLook, PoseSource};

/// Everything the client opened, ready for its threads.
pub(super) struct Setup {
    pub sink: Option<PipeWriter>,
    pub playout: Option<Arc<Mutex<Playout>>>,
    pub audio_out: Option<AudioOut>,
    pub cfg: ClientConfig,
    pub known_hosts: Option<KnownHosts>,
    /// One socket per path (path 0: the main one), with its host address.
    pub sockets: Vec<UdpEndpoint>,
    pub paths: Vec<SocketAddr>,
    pub raw: Option<RawEndpoint>,
    /// Why a client that wanted raw layer 2 stays on UDP.
    pub link_note: Option<crate::link::LinkReport>,
    pub decoder: DecoderConfig,
    pub pose_source: Option<Box<dyn PoseSource>>,
    /// Mouse-look, when it is the pose source.
    pub mouse_look: Option<MouseLook>,
    pub started_us: Micros,
}

impl Setup {
    pub fn open(options: &ClientOptions, io: &ClientIo) -> Result<Setup, ClientError> {
        crate::config::validate_client(&options.client, &options.network)?;
        options.vr.validate()?;
        let sink = match &io.sink {
            Some(path) => Some(PipeWriter::open(path)?),
            None => None,
        };
        let (playout, audio_out) = open_audio(io)?;
        // No session without the OS random generator (keys, nonces): stop, saying so.
        crate::identity::check_random()?;
        let mut cfg = ClientConfig::new(options.client.name.clone());
        let known_hosts = trust(options, io, &mut cfg)?;
        let (sockets, paths) = open_paths(options)?;
        let (raw, link_note) = open_link(options)?;
        let started_us = now_us();
        session_config(&mut cfg, options, started_us);
        // What this client decodes: the configured list, less the codecs no decoder here
        // opens (checked now, so that the host never picks one).
        let c = &options.client;
        let (choice, hwaccel) = c.decoder_choice()?;
        let decoder = DecoderConfig {
            codec: untether_media::codec::Codec::H264,
            decoder: choice,
            hwaccel,
            threads: c.decoder_threads,
            keep_on_gpu: false,
            chunks: false,
        };
        cfg.codecs = decodable(&c.codec_list()?, &decoder)?;
        // Pictures stay on the GPU for a GL window when a zero-copy path has its device here
        // (the presenter falls back, saying why, when its import cannot run).
        let decoder = DecoderConfig {
            keep_on_gpu: super::zero_copy::keep_on_gpu(options)?,
            ..decoder
        };
        // `--no-decode` (a load-test viewer): frames are reassembled and counted, never
        // decoded (the client still offers only codecs it could decode).
        if !c.decode {
            log::info!("client: --no-decode: frames are reassembled and counted, not decoded");
        }
        let (pose_source, mouse_look) = open_pose(options)?;
        Ok(Setup {
            sink,
            playout,
            audio_out,
            cfg,
            known_hosts,
            sockets,
            paths,
            raw,
            link_note,
            decoder,
            pose_source,
            mouse_look,
            started_us,
        })
    }
}

type Audio = (Option<Arc<Mutex<Playout>>>, Option<AudioOut>);

/// The playout buffer and the device playing it, when audio is asked for.
fn open_audio(io: &ClientIo) -> Result<Audio, ClientError> {
    let Some(a) = &io.audio else {
        return Ok((None, None));
    };
    let mut p = Playout::new()?;
    if a.tap_seconds > 0 {
        p.enable_tap(a.tap_seconds);
    }
    let p = Arc::new(Mutex::new(p));
    let out = AudioOut::open(a.device.as_deref(), p.clone(), a.buffer_samples)?;
    log::info!(
        "client: audio through {} ({} sample buffer)",
        out.driver(),
        out.buffer_samples()
    );
    Ok((Some(p), Some(out)))
}

/// This client's identity and the host key it expects; the known-hosts entries when they are
/// kept in the state directory.
fn trust(
    options: &ClientOptions,
    io: &ClientIo,
    cfg: &mut ClientConfig,
) -> Result<Option<KnownHosts>, ClientError> {
    let c = &options.client;
    let known_hosts = match &io.trust {
        ClientTrust::Stored => {
            let explicit =
                (!c.state_dir.is_empty()).then(|| std::path::Path::new(c.state_dir.as_str()));
            let dir = StateDir::resolve(explicit)?;
            cfg.identity = dir.load_or_create_identity(Role::Client)?;
            let label = io
                .host_label
                .clone()
                .unwrap_or_else(|| options.host.to_string());
            // Pinned by the name typed and by the address it resolved to: `localhost:P` and
            // `127.0.0.1:P` are one host, and must not be trusted with two keys.
            let addr = options.host.to_string();
            let (pinned, pinned_by) = match dir.host_pin(&label, &addr)? {
                HostPin::None => (None, Vec::new()),
                HostPin::Key { key, by } => (Some(key), by),
                HostPin::Conflict { entries } => {
                    return Err(ClientError::HostPinConflict {
                        host: options.host,
                        label,
                        entries: entries
                            .iter()
                            .map(|(entry, fp)| format!("{entry} pins {fp}"))
                            .collect::<Vec<_>>()
                            .join("; "),
                        file: dir.file_path(KNOWN_HOSTS_FILE),
                    });
                }
            };
            if let (Some(chosen), Some(p)) = (io.host_key, pinned) {
                if chosen != p {
                    return Err(ClientError::ChosenKeyNotPinned {
                        host: options.host,
                        label,
                        chosen: fingerprint(&chosen),
                        pinned: fingerprint(&p),
                    });
                }
            }
            cfg.host_key = pinned.or(io.host_key);
            Some(KnownHosts {
                dir,
                label,
                addr,
                pinned,
                pinned_by,
                chosen: io.host_key,
            })
        }
        ClientTrust::Memory { identity, host_key } => {
            cfg.identity = identity.clone();
            cfg.host_key = host_key.or(io.host_key);
            None
        }
    };
    cfg.pin = io.pin.clone();
    log::info!(
        "client: identity {}{}",
        fingerprint(&cfg.identity.public),
        match cfg.host_key {
            Some(k) => format!(", expecting host {}", fingerprint(&k)),
            None => String::new(),
        }
    );
    Ok(known_hosts)
}

/// A socket to the host per path: the main one, then `client.paths`.
fn open_paths(options: &ClientOptions) -> Result<(Vec<UdpEndpoint>, Vec<SocketAddr>), ClientError> {
    let mut sockets = vec![UdpEndpoint::connect_to(options.host)?];
    let mut paths = vec![options.host];
    for spec in &options.client.paths {
        let (local, addr) = crate::config::parse_path(spec, options.host.port()).map_err(|e| {
            crate::config::ConfigError::Invalid {
                key: "client.paths".into(),
                message: e.to_string(),
            }
        })?;
        sockets.push(UdpEndpoint::connect_from(local, addr)?);
        paths.push(addr);
        log::info!(
            "client: path {} to {addr}{}",
            paths.len() - 1,
            local.map(|l| format!(" from {l}")).unwrap_or_default()
        );
    }
    Ok((sockets, paths))
}

/// The report of a client that wanted raw layer 2 but stays on UDP.
fn link_note(line: &str) -> crate::link::LinkReport {
    crate::link::LinkReport {
        configured: crate::config::Transport::Raw,
        note: Some(line.to_string()),
        ..crate::link::LinkReport::udp()
    }
}

type Link = (Option<RawEndpoint>, Option<crate::link::LinkReport>);

/// The raw layer-2 socket when `network.transport` asks for it and it opens (else why not).
fn open_link(options: &ClientOptions) -> Result<Link, ClientError> {
    if options.network.transport()? == crate::config::Transport::Raw
        && !options.client.paths.is_empty()
    {
        let line = "raw layer 2 does not combine with multipath (client.paths); staying on UDP";
        log::warn!("client: {line}");
        return Ok((None, Some(link_note(line))));
    }
    Ok(
        match crate::link::open(&options.network, || {
            crate::link::client_interface(options.host)
        })? {
            crate::link::Opened::Udp => (None, None),
            crate::link::Opened::Raw(r) => {
                log::info!(
                    "client: raw layer 2 on {} ({}, EtherType 0x{:04X}): offering it to the host",
                    r.interface(),
                    r.mac(),
                    r.ethertype()
                );
                (Some(r), None)
            }
            crate::link::Opened::Fallback(_, line) => {
                log::warn!("client: {line}");
                (None, Some(link_note(&line)))
            }
        },
    )
}

/// The session's timers and limits from the options; its nonce from `now` and the process.
fn session_config(cfg: &mut ClientConfig, options: &ClientOptions, now: Micros) {
    let (c, n) = (&options.client, &options.network);
    cfg.nonce = now ^ ((std::process::id() as u64) << 40) ^ 0x9E37_79B9_7F4A_7C15;
    cfg.connect_timeout_us = c.connect_timeout_ms * 1000;
    cfg.reassembly_deadline_us = c.reassembly_deadline_ms * 1000;
    cfg.keepalive_us = n.keepalive_ms * 1000;
    cfg.idle_timeout_us = n.idle_timeout_ms * 1000;
    cfg.retransmit = n.retransmit;
    cfg.state_budget_bytes_per_s = n.state_budget_bytes_per_s();
    cfg.clock_id = untether_net::clock_identity();
    // (Checked with the rest of the client's settings before the start.)
    cfg.wants = c.wants().ok().flatten();
    // A VR client's views go to the host, which renders with them (an OpenXR runtime's
    // views, for one): both sides then assume the same field of view and eye separation.
    let vr = &options.vr;
    cfg.view = vr
        .enabled
        .then(|| untether_proto::ViewInfo::new(vr.fov_deg, vr.ipd_mm));
}

type Pose = (Option<Box<dyn PoseSource>>, Option<MouseLook>);

/// The head pose source (a failure to open it, no IMU or a bad track, stops the start), and
/// mouse-look when it is the source.
fn open_pose(options: &ClientOptions) -> Result<Pose, ClientError> {
    let spec = options.vr.pose_spec()?;
    let mouse = MouseLook::default();
    let source = crate::pose::open(&spec, options.display == Display::Window, &mouse, now_us())
        .map_err(|e| ClientError::Media(untether_media::MediaError::Other(e.to_string())))?;
    if let Some(src) = &source {
        log::info!(
            "client: head pose from {} at {} Hz",
            src.name(),
            options.vr.pose_rate_hz
        );
    }
    let mouse_look = source
        .as_ref()
        .and(matches!(spec, PoseSpec::Auto | PoseSpec::Mouse).then_some(mouse));
    Ok((source, mouse_look))
}

/// The codecs of `wanted` a software decoder opens for here, in order (a hardware decoder is
/// tried per session, falling back to this software one), as the wire names them. None: an
/// error naming the list.
pub(super) fn decodable(
    wanted: &[untether_media::codec::Codec],
    cfg: &DecoderConfig,
) -> Result<Vec<untether_proto::Codec>, ClientError> {
    let mut out = Vec::new();
    let mut missing = Vec::new();
    for &codec in wanted {
        let sw = DecoderConfig::software(codec, 1);
        let named_other = matches!(&cfg.decoder, untether_media::codec::DecoderChoice::Named(n)
            if untether_media::codec::decoder::decoder_codec(n).is_some_and(|c| untether_media::codec::CodecFfmpeg::id(c) != untether_media::codec::CodecFfmpeg::id(codec)));
        match Decoder::open(&sw) {
            Ok(_) if !named_other => out.push(codec),
            Ok(_) => missing.push(format!(
                "{codec} (decoder {} decodes another codec)",
                cfg.decoder
            )),
            Err(e) => missing.push(format!("{codec} ({e})")),
        }
    }
    if !missing.is_empty() {
        log::info!("client: not offering {}", missing.join(", "));
    }
    if out.is_empty() {
        return Err(ClientError::Config(crate::config::ConfigError::Invalid {
            key: "client.codecs".into(),
            message: format!("no decoder here opens any of them: {}", missing.join(", ")),
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_fallback_is_reported_with_its_reason() {
        let r = link_note("no raw socket here");
        assert_eq!(r.configured, crate::config::Transport::Raw);
        assert_eq!(r.note.as_deref(), Some("no raw socket here"));
        assert_eq!(r.transport, crate::link::LinkReport::udp().transport);
    }
}

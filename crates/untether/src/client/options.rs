//! What a client is told: where the host is and the validated settings ([`ClientOptions`]),
//! and what it does beyond showing the stream ([`ClientIo`]: a pipe sink, input devices,
//! audio, injected input, a frame tap, identities).

use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;

use untether_media::codec::DecodedFrame;
use untether_media::warp::Warp;
use untether_proto::InputEvent;

use super::record::FrameRecord;
use super::ClientError;
use crate::config::{ClientToml, NetworkToml, VrToml};
use crate::identity::ClientTrust;

/// Where decoded pictures go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Display {
    /// An SDL2 window (needs a display: X11 or Wayland).
    Window,
    /// No window: pictures are decoded, stamped times read, then dropped.
    Headless,
}

#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub host: SocketAddr,
    pub client: ClientToml,
    pub network: NetworkToml,
    /// VR (`[vr]`): the head pose source (`vr.pose`, `vr.pose_rate_hz`) and the display path
    /// (side-by-side stereo with lens distortion and late warp).
    pub vr: VrToml,
    pub display: Display,
    /// Stop after this long (None: until the window closes, the host leaves or `stop` is set).
    pub duration: Option<Duration>,
    /// Write the last shown picture here as a binary PPM (P6).
    pub save_frame: Option<PathBuf>,
}

impl ClientOptions {
    /// A client of `host` with the default settings that shows nothing (decodes, reads the
    /// stamps, drops the pictures) and stops after `duration`: what a test, a benchmark or a
    /// recorder embeds.
    pub fn headless(host: SocketAddr, duration: Duration) -> ClientOptions {
        let cfg = crate::config::ConfigToml::default();
        ClientOptions {
            host,
            client: cfg.client,
            network: cfg.network,
            vr: VrToml::default(),
            display: Display::Headless,
            duration: Some(duration),
            save_frame: None,
        }
    }
}

/// A Linux input device (or anything carrying evdev `input_event` records: a pipe, a socket)
/// whose events the client sends to the host.
pub struct InputDevice {
    pub name: String,
    pub(crate) file: File,
}

impl InputDevice {
    /// Opens `/dev/input/eventN` (or any path carrying evdev records: a FIFO, a character
    /// device) for reading.
    pub fn open(path: &std::path::Path) -> Result<InputDevice, ClientError> {
        let file = File::open(path).map_err(|e| {
            ClientError::Media(untether_media::MediaError::Other(format!(
                "cannot open input device {}: {e}{}",
                path.display(),
                if e.kind() == std::io::ErrorKind::PermissionDenied {
                    " (add yourself to the `input` group)"
                } else {
                    ""
                }
            )))
        })?;
        let name = untether_media::evdev::device_name(file.as_fd())
            .unwrap_or_else(|| path.display().to_string());
        Ok(InputDevice { name, file })
    }

    /// Takes an open file descriptor (a device, a pipe's read end, a socket).
    pub fn from_fd(fd: OwnedFd, name: impl Into<String>) -> InputDevice {
        let file = File::from(fd);
        let name = untether_media::evdev::device_name(file.as_fd()).unwrap_or(name.into());
        InputDevice { name, file }
    }
}

impl std::fmt::Debug for InputDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "InputDevice({:?}, fd {})",
            self.name,
            self.file.as_raw_fd()
        )
    }
}

/// Client audio playback.
#[derive(Clone, Debug)]
pub struct ClientAudio {
    /// SDL output device name (None: the default).
    pub device: Option<String>,
    /// Device buffer in samples (240 = 5 ms at 48 kHz).
    pub buffer_samples: u16,
    /// Record what is played (left channel) for this many seconds, into the run.
    pub tap_seconds: u32,
}

impl Default for ClientAudio {
    fn default() -> Self {
        ClientAudio {
            device: None,
            buffer_samples: 240,
            tap_seconds: 0,
        }
    }
}

/// Sees every shown picture with its record, after it was shown and timed (so off that
/// frame's path): for picture-quality measurement. Runs on the presenter thread: keep it short.
pub struct ShownFrameTap(pub ShownFrameFn);

/// The function a [`ShownFrameTap`] calls.
pub type ShownFrameFn = Box<dyn FnMut(&FrameRecord, &DecodedFrame) + Send>;

impl std::fmt::Debug for ShownFrameTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ShownFrameTap")
    }
}

/// The late warp's input for each picture the GPU presenter shows in VR mode: given the
/// record of the picture on screen, the head orientation its frame was rendered for and the
/// newest local one ([`Warp`]), or None (no warp). Called on the presenter thread for every
/// new picture and, between pictures, at every presenter turn (the picture is shown again
/// when the warp changed): keep it short. Only used with `vr.enabled` and `vr.late_warp`.
pub struct WarpSource(pub WarpFn);

/// The function a [`WarpSource`] calls.
pub type WarpFn = Box<dyn FnMut(&FrameRecord) -> Option<Warp> + Send>;

impl std::fmt::Debug for WarpSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WarpSource")
    }
}

/// What the client does beyond showing the stream: a pipe sink, input devices, audio.
#[derive(Debug, Default)]
pub struct ClientIo {
    /// Write every decoded picture as raw I420 here (`-`: standard output), flushed per frame.
    pub sink: Option<String>,
    /// Devices whose evdev records go to the host; numbered 0, 1, … in this order.
    pub input_devices: Vec<InputDevice>,
    pub audio: Option<ClientAudio>,
    /// Treat the host's goodbye as the normal end of the stream (a pipeline whose input ended)
    /// rather than an error.
    pub end_on_host_bye: bool,
    /// Wait for the host's approval when it refuses this client as not paired, trying again
    /// every quarter second (`untether client` sets it from `client.wait_for_approval`).
    pub wait_for_approval: bool,
    /// Wait for a host that shut down (said goodbye) to come back instead of ending the run
    /// (`untether client` sets it from `client.wait_for_host`; `--exit-on-bye` clears it).
    pub wait_for_host: bool,
    /// Events the application sends itself (its own head tracking, synthetic input), sent
    /// like the window's (pointer motion and head pose on the latest-wins state channel).
    pub inject: Option<std::sync::mpsc::Receiver<InputEvent>>,
    /// Sees every shown picture, see [`ShownFrameTap`].
    pub shown_frame_tap: Option<ShownFrameTap>,
    /// The late warp's poses (VR), see [`WarpSource`].
    pub warp: Option<WarpSource>,
    /// The client's identity and the host keys it trusts: the state directory (default) or
    /// in memory.
    pub trust: ClientTrust,
    /// Pair with the host using this one-time PIN (shown by the host).
    pub pin: Option<String>,
    /// The name the host's key is pinned under in `known_hosts.json` (default: its address).
    pub host_label: Option<String>,
    /// The key the host must prove in the handshake: the one it was chosen by (an
    /// advertisement, a fingerprint or key the user named). A pin of another key for this host
    /// is an error; None: the pin, else trust on first use.
    pub host_key: Option<untether_proto::PublicKey>,
    /// Receives what the host publishes on the latest-wins channel.
    pub host_state: Option<super::HostStateView>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_headless_client_has_the_default_settings_and_stops() {
        let host: SocketAddr = "127.0.0.1:9710".parse().unwrap();
        let o = ClientOptions::headless(host, Duration::from_secs(2));
        assert_eq!(o.host, host);
        assert_eq!(o.display, Display::Headless);
        assert_eq!(o.duration, Some(Duration::from_secs(2)));
        assert!(o.save_frame.is_none());
        let cfg = crate::config::ConfigToml::default();
        assert_eq!(o.client.state_dir, cfg.client.state_dir);
    }
}

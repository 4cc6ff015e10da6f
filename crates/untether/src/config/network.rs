//! `[network]`: both sides' network settings. The transport, the FEC policy and the multipath
//! scheduler are typed values, parsed when the file is read or a flag sets them
//! ([`super::parse_key`]).

use serde::{Deserialize, Serialize};
use untether_proto::{FecPolicy, Scheduler};

use super::keys::{de_key, ser_key};
use super::{invalid, limits, ConfigError, Transport};
use super::{IDLE_TIMEOUT_MS, KEEPALIVE_MS, MAX_DATAGRAM, PACING, PACING_BATCH, STATE_BUDGET_KBPS};

/// `[network]`: both sides.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkToml {
    #[serde(deserialize_with = "limits::de_max_datagram")]
    pub max_datagram: u16,
    #[serde(deserialize_with = "limits::de_keepalive_ms")]
    pub keepalive_ms: u64,
    #[serde(deserialize_with = "limits::de_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// Host: forward error correction of video, `"off"`, `"adaptive"` or `"<percent>%"`.
    #[serde(deserialize_with = "de_key", serialize_with = "ser_key")]
    pub fec: FecPolicy,
    /// Host: which of a multipath client's paths carry each datagram: `"redundant"` (all),
    /// `"keyframes"` (keyframes, control and audio on all; other frames on the fastest), or
    /// `"lowest-delay"` (the fastest live path). Used only when the client has several paths.
    #[serde(deserialize_with = "de_key", serialize_with = "ser_key")]
    pub scheduler: Scheduler,
    /// Host: adapt the encoder's bitrate (at most `video.bitrate_kbps`) to the link's
    /// queueing delay and loss.
    pub adaptive_bitrate: bool,
    /// Both sides: resend lost video shards the client asks for when the RTT leaves time
    /// before the frame's deadline (client: ask; host: answer).
    pub retransmit: bool,
    /// Host: send pacing, the fraction (0.0–1.0) of the frame interval over which a frame's
    /// datagrams are spread in batches of `pacing_batch` instead of sent in one burst; `0` =
    /// off. Off by default: pacing delays a frame's last shard — and so glass-to-glass — by up
    /// to this fraction of the interval (0.5 at 60 fps: up to 8.3 ms, capped at 25 ms), which
    /// only pays where bursts are lost (Wi-Fi, a shallow queue, a token-bucket rate limiter).
    /// Try 0.25–0.5 there and measure (`untether bench --pacing`).
    pub pacing: f64,
    /// Host: datagrams per pacing batch, sent back to back (1–64; 64 is the kernel's UDP GSO
    /// segment limit).
    #[serde(deserialize_with = "limits::de_pacing_batch")]
    pub pacing_batch: u32,
    /// Both sides: the bandwidth budget of the latest-wins state channel this side sends
    /// (pointer, head pose, axes; the host's published state), kbit/s, overhead included
    /// (0: none). Within it the stalest keys go first and only newest values leave.
    #[serde(deserialize_with = "limits::de_state_budget_kbps")]
    pub state_budget_kbps: u32,
    /// Both sides: the data plane's transport after the handshake (always over UDP): `"udp"`,
    /// or `"raw"` (Ethernet frames of EtherType 0x88B5 between the two interfaces' MAC
    /// addresses, on an AF_PACKET socket: needs CAP_NET_RAW, and both ends on one link;
    /// without CAP_NET_RAW, or when the peer declines, the session stays on UDP and says so).
    #[serde(deserialize_with = "de_key", serialize_with = "ser_key")]
    pub transport: Transport,
    /// Both sides, with `transport = "raw"`: the network interface (`""`: the one the route to
    /// the peer uses; the host: the one holding `host.bind`'s address, or the only one up).
    pub interface: String,
}

impl Default for NetworkToml {
    fn default() -> Self {
        NetworkToml {
            max_datagram: 1200,
            keepalive_ms: 2000,
            idle_timeout_ms: 30_000,
            fec: FecPolicy::default(),
            scheduler: Scheduler::Redundant,
            adaptive_bitrate: true,
            retransmit: true,
            pacing: 0.0,
            pacing_batch: crate::pacing::DEFAULT_BATCH,
            state_budget_kbps: 0,
            transport: Transport::Udp,
            interface: String::new(),
        }
    }
}

impl NetworkToml {
    /// The state channel's budget in bytes per second (0: none).
    pub fn state_budget_bytes_per_s(&self) -> u64 {
        self.state_budget_kbps as u64 * 1000 / 8
    }

    /// The host's send pacing (`pacing`, `pacing_batch`; checked by
    /// [`validate`](Self::validate)).
    pub fn pacing(&self) -> Result<crate::pacing::Pacing, ConfigError> {
        PACING.check(self.pacing)?;
        PACING_BATCH.check(self.pacing_batch)?;
        Ok(crate::pacing::Pacing {
            fraction: self.pacing,
            batch: self.pacing_batch as usize,
        })
    }

    /// The data plane's transport (`transport`, parsed when it was set), with `interface`
    /// checked (also by [`validate`](Self::validate)).
    pub fn transport(&self) -> Result<Transport, ConfigError> {
        let i = &self.interface;
        // Linux interface names: 1–15 bytes, no '/', no whitespace, not "." or "..".
        if !i.is_empty()
            && (i.len() > 15
                || i == "."
                || i == ".."
                || i.chars()
                    .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control()))
        {
            return Err(invalid(
                "network.interface",
                format!("{i:?} is not an interface name (1–15 characters, no '/', ':' or spaces; see `ip link`)"),
            ));
        }
        Ok(self.transport)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.pacing()?;
        self.transport()?;
        MAX_DATAGRAM.check(self.max_datagram)?;
        STATE_BUDGET_KBPS.check(self.state_budget_kbps)?;
        IDLE_TIMEOUT_MS.check(self.idle_timeout_ms)?;
        KEEPALIVE_MS.check(self.keepalive_ms)?;
        if self.keepalive_ms >= self.idle_timeout_ms {
            return Err(invalid(
                "network.keepalive_ms",
                format!(
                    "{} must be below network.idle_timeout_ms ({})",
                    self.keepalive_ms, self.idle_timeout_ms
                ),
            ));
        }
        Ok(())
    }
}

//! What the dashboard's API reads and changes, run on the network driver's thread with the
//! session at hand (so an approval, a PIN or a hand-over takes effect at once, not at the
//! state directory's next poll): the state the page shows, and the operator's actions. Each
//! action changes what `untether pair` would change, the state directory included, so the two
//! agree.

use serde_json::{json, Value};
use untether_proto::{fingerprint, PairingPin, PublicKey};

use crate::host::network::HostNet;
use crate::identity::{random_pin, unix_now, Access};

/// Why a request is refused: its status and a one-line reason.
pub(crate) type Refused = (u16, String);

/// What the host knows at start and never changes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Facts {
    pub fingerprint: String,
    pub resolution: String,
    pub fps: u32,
    /// `video.bitrate_kbps`: the stream's ceiling.
    pub bitrate_kbps: u32,
    pub pin_ttl_s: u64,
    /// The browser page's address (`webrtc.listen`) and its certificate's fingerprint.
    pub page: Option<String>,
    pub page_cert: Option<String>,
}

/// The lowest bit rate the operator may set, kbit/s.
pub(super) const MIN_KBPS: u32 = 100;
/// The lowest frame rate the operator may set.
pub(super) const MIN_FPS: u32 = 5;

/// One read or action of the API, run on the driver's thread ([`crate::host::ask::Ask`]).
pub(crate) enum Action {
    /// `GET /api/state`.
    State(Facts),
    /// `POST /api/approve`: a pending access request, by fingerprint.
    Approve(String),
    /// `POST /api/deny`.
    Deny(String),
    /// `POST /api/control`: hand control to a connected client.
    Control(String),
    /// `POST /api/grant`: grant (or take back) a viewer's input.
    Grant { fingerprint: String, granted: bool },
    /// `POST /api/pin`: a new pairing PIN.
    RenewPin(Facts),
    /// `POST /api/bitrate`, kbit/s.
    Bitrate(Facts, u64),
    /// `POST /api/fps`.
    Fps(Facts, u64),
    /// `POST /api/link`: a browser's one-time link.
    BrowserLink(Facts),
}

impl Action {
    pub(crate) fn run(self, n: &mut HostNet) -> Result<Value, Refused> {
        match self {
            Action::State(f) => Ok(state(n, &f)),
            Action::Approve(fp) => approve(n, &fp),
            Action::Deny(fp) => deny(n, &fp),
            Action::Control(fp) => control(n, &fp),
            Action::Grant {
                fingerprint,
                granted,
            } => grant(n, &fingerprint, granted),
            Action::RenewPin(f) => renew_pin(n, &f),
            Action::Bitrate(f, kbps) => bitrate(n, &f, kbps),
            Action::Fps(f, rate) => fps(n, &f, rate),
            Action::BrowserLink(f) => browser_link(n, &f),
        }
    }
}

/// Everything the page shows, as JSON (docs/DASHBOARD.md, `GET /api/state`).
fn state(n: &mut HostNet, f: &Facts) -> Value {
    let now = crate::clock::now_us();
    n.roster_refresh();
    let pending: Vec<Value> = n
        .session
        .access_requests()
        .map(|r| {
            json!({
                "fingerprint": r.fingerprint,
                "name": untether_proto::sanitize_peer_text(&r.name),
                "addr": r.addr.to_string(),
                "attempts": r.attempts,
                "waiting_s": now.saturating_sub(r.first_us) / 1_000_000,
                "last_s": now.saturating_sub(r.last_us) / 1_000_000,
            })
        })
        .collect();
    let pin = n.session.pin().map(|p| {
        json!({
            "pin": p.pin,
            "expires_in_s": p.expires_us.saturating_sub(now) / 1_000_000,
            "attempts_left": p.attempts_left,
        })
    });
    let browsers = n
        .webrtc
        .as_ref()
        .map(|w| w.rows(now, &n.session))
        .unwrap_or_default();
    let stages = {
        let s = crate::host::shared::lock(&n.shared.samples);
        let one = |x: &crate::stats::Samples| {
            x.summary()
                .map(|s| json!({"count": s.count, "mean_ms": s.mean, "p50_ms": s.p50}))
        };
        json!({
            "capture": one(&s.capture), "host_queue": one(&s.queue), "convert": one(&s.convert),
            "encode": one(&s.encode), "send": one(&s.send),
        })
    };
    let effective = n
        .target_kbps
        .unwrap_or(f.bitrate_kbps)
        .min(n.bitrate_ceiling.unwrap_or(u32::MAX));
    json!({
        "host": {
            "fingerprint": f.fingerprint,
            "access": n.pairing.access.name(),
            "clients": n.session.client_count(),
            "max_clients": n.session.max_clients(),
            "mono_us": now,
            "resolution": f.resolution,
        },
        "pin": pin,
        "pending": pending,
        "clients": n.roster.list(),
        "browsers": browsers,
        "links": {"page": f.page, "page_cert": f.page_cert},
        "settings": {
            "bitrate_kbps": effective,
            "bitrate_ceiling_kbps": n.bitrate_ceiling,
            "bitrate_controller_kbps": n.target_kbps,
            "bitrate_max_kbps": f.bitrate_kbps,
            "bitrate_min_kbps": MIN_KBPS,
            "fps": n.fps_ceiling.unwrap_or(f.fps),
            "fps_ceiling": n.fps_ceiling,
            "fps_max": f.fps,
            "fps_min": MIN_FPS,
            "fps_live": true,
            "fps_note": "a ceiling: pictures are dropped to it before the encoder, each keeping \
                         its share of the bit rate (so the bit rate falls with it); up to \
                         video.fps, the rate the source runs at",
        },
        "stages": stages,
    })
}

/// The pending request of `fp` (its whole fingerprint, as the page shows it).
fn pending(n: &HostNet, fp: &str) -> Result<(PublicKey, String), Refused> {
    let fp = fp.trim();
    n.session
        .access_requests()
        .find(|r| r.fingerprint.eq_ignore_ascii_case(fp))
        .map(|r| (r.key, untether_proto::sanitize_peer_text(&r.name)))
        .ok_or_else(|| {
            (
                404,
                format!("no pending access request from {fp:?} (approved, denied or expired?)"),
            )
        })
}

/// Approves a pending request: the client gets in at its next try (its patient client retries
/// at once), and stays allowed (the allowlist in the state directory).
fn approve(n: &mut HostNet, fp: &str) -> Result<Value, Refused> {
    let (key, name) = pending(n, fp)?;
    n.session.allow_client(key);
    if let Some(dir) = &n.pairing.dir {
        // Off the pending file and onto the allowlist, as `untether pair approve` does.
        if let Err(e) = dir
            .approve(&fingerprint(&key))
            .or_else(|_| dir.allow(&key, &name))
        {
            log::warn!("host: cannot write the approval to the state directory: {e}");
        }
    }
    let fp = fingerprint(&key);
    n.shared
        .note(format!("{fp} ({name:?}) approved on the dashboard"));
    Ok(json!({"approved": fp}))
}

/// Denies a pending request: its key is refused from now on (the client is told and stops
/// asking) until approved.
fn deny(n: &mut HostNet, fp: &str) -> Result<Value, Refused> {
    let (key, _) = pending(n, fp)?;
    n.session.revoke_client(crate::clock::now_us(), key);
    if let Some(dir) = &n.pairing.dir {
        let _ = dir.deny(&fingerprint(&key));
    }
    let fp = fingerprint(&key);
    n.shared
        .note(format!("{fp}'s access request denied on the dashboard"));
    Ok(json!({"denied": fp}))
}

/// A new one-time PIN (the old one stops working), valid `host.pin_ttl_s`, 3 attempts.
fn renew_pin(n: &mut HostNet, f: &Facts) -> Result<Value, Refused> {
    if n.pairing.access == Access::Open {
        return Err((
            409,
            "host.access is open: every client gets in without a PIN".into(),
        ));
    }
    let failed = |e: crate::identity::IdentityError| (500, format!("cannot make a PIN: {e}"));
    let (pin, ttl, attempts) = match &n.pairing.dir {
        Some(dir) => {
            let p = dir.create_pin(f.pin_ttl_s, 3).map_err(failed)?;
            let ttl = p.expires.saturating_sub(unix_now());
            (p.pin, ttl, p.attempts_left)
        }
        None => (random_pin().map_err(failed)?, f.pin_ttl_s, 3),
    };
    n.session.set_pin(Some(PairingPin {
        pin: pin.clone(),
        expires_us: crate::clock::now_us() + ttl * 1_000_000,
        attempts_left: attempts,
    }));
    n.pairing.pin = Some(pin.clone());
    n.shared.note(format!(
        "a new pairing PIN was made on the dashboard ({ttl} s)"
    ));
    Ok(json!({"pin": pin, "expires_in_s": ttl, "attempts_left": attempts}))
}

/// Hands control to a connected client, for this run (as `Host::hand_control`).
fn control(n: &mut HostNet, fp: &str) -> Result<Value, Refused> {
    let c = n.hand_control(fp).map_err(|e| (404, e.to_string()))?;
    Ok(json!({"controller": c.fingerprint}))
}

/// Grants (or takes back) a viewer's input, for this run (as `Host::grant_input`).
fn grant(n: &mut HostNet, fp: &str, granted: bool) -> Result<Value, Refused> {
    let c = n
        .grant_input(fp, granted)
        .map_err(|e| (404, e.to_string()))?;
    Ok(json!({"fingerprint": c.fingerprint, "input_granted": c.input_granted}))
}

/// Sets the bit rate ceiling: the encoder follows the lower of it and the adaptive
/// controller's target, from the next frame.
fn bitrate(n: &mut HostNet, f: &Facts, kbps: u64) -> Result<Value, Refused> {
    if kbps < MIN_KBPS as u64 || kbps > f.bitrate_kbps as u64 {
        return Err((
            400,
            format!(
                "bitrate_kbps must be {MIN_KBPS}–{} (video.bitrate_kbps, the host's configured \
                 rate, is the ceiling; restart with --bitrate for more)",
                f.bitrate_kbps
            ),
        ));
    }
    let now = n.set_bitrate_ceiling(kbps as u32, f.bitrate_kbps);
    n.shared.note(format!(
        "bit rate ceiling set to {kbps} kbit/s on the dashboard"
    ));
    Ok(json!({"bitrate_ceiling_kbps": kbps, "bitrate_kbps": now}))
}

/// Sets the frame rate ceiling: from the next picture, pictures are dropped to the lower of
/// it and the stream's rate (a client's `--fps`) before the encoder; `video.fps` lifts it.
fn fps(n: &mut HostNet, f: &Facts, fps: u64) -> Result<Value, Refused> {
    if fps < MIN_FPS as u64 || fps > f.fps as u64 {
        return Err((
            400,
            format!(
                "fps must be {MIN_FPS}–{} (video.fps, the rate the source runs at, is the \
                 ceiling; restart with --fps for more)",
                f.fps
            ),
        ));
    }
    let fps = fps as u32;
    let ceiling = (fps < f.fps).then_some(fps);
    n.fps_ceiling = ceiling;
    let _ = n
        .encoder
        .send(crate::host::encode::EncoderEvent::FpsCeiling(ceiling));
    n.shared.note(format!(
        "frame rate ceiling set to {fps} fps on the dashboard"
    ));
    Ok(json!({"fps_ceiling": ceiling, "fps": fps}))
}

/// The next browser's one-time link (`webrtc.listen`).
fn browser_link(n: &mut HostNet, f: &Facts) -> Result<Value, Refused> {
    let (Some(page), Some(w)) = (&f.page, n.webrtc.as_mut()) else {
        return Err((
            409,
            "no browser page: start the host with --webrtc ADDR:PORT (webrtc.listen)".into(),
        ));
    };
    let token = w.link_token(crate::clock::now_us());
    Ok(json!({"link": format!("{page}?token={token}")}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::input::InputSink;
    use crate::host::pairing::tests::memory;
    use crate::host::shared::HostShared;
    use std::sync::{mpsc, Arc};
    use untether_proto::HostSession;

    fn net(access: Access) -> (HostNet, mpsc::Receiver<crate::host::encode::EncoderEvent>) {
        let (pairing, cfg) = memory(access);
        let (encoder, rx) = mpsc::channel();
        let n = HostNet::new(
            HostSession::new(cfg),
            pairing,
            Arc::new(HostShared::new((0, 0))),
            InputSink::Discard,
            encoder,
            crate::pacing::Pacing::default(),
            60,
        );
        (n, rx)
    }

    fn facts() -> Facts {
        Facts {
            fingerprint: "abcd".into(),
            resolution: "640x360".into(),
            fps: 60,
            bitrate_kbps: 8000,
            pin_ttl_s: 300,
            ..Default::default()
        }
    }

    #[test]
    fn the_state_says_what_the_page_shows() {
        let (mut n, _rx) = net(Access::Allowlist);
        let s = state(&mut n, &facts());
        assert_eq!(s["host"]["access"], "allowlist");
        assert_eq!(s["pending"], json!([]));
        assert_eq!(s["pin"], Value::Null);
        assert_eq!(s["settings"]["bitrate_kbps"], 8000);
        assert_eq!(
            (
                s["settings"]["fps_live"].as_bool(),
                s["settings"]["fps"].as_u64()
            ),
            (Some(true), Some(60))
        );
        assert!(s["stages"]["encode"].is_null(), "no frame yet");
        assert_eq!(s["links"]["page"], Value::Null);
    }

    #[test]
    fn unknown_fingerprints_are_refused_with_404() {
        let (mut n, _rx) = net(Access::Allowlist);
        for r in [
            approve(&mut n, "SHA256:nobody"),
            deny(&mut n, "SHA256:nobody"),
            control(&mut n, "nobody-at-all"),
            grant(&mut n, "nobody-at-all", true),
        ] {
            let (status, reason) = r.unwrap_err();
            assert_eq!(status, 404, "{reason}");
            assert!(!reason.is_empty());
        }
    }

    #[test]
    fn a_renewed_pin_is_the_sessions_at_once() {
        let (mut n, _rx) = net(Access::Pin);
        let first = renew_pin(&mut n, &facts()).unwrap();
        assert_eq!(
            n.session.pin().map(|p| p.pin.clone()),
            Some(first["pin"].as_str().unwrap().to_string())
        );
        assert_eq!(first["attempts_left"], 3);
        let s = state(&mut n, &facts());
        assert_eq!(s["pin"]["pin"], first["pin"]);
        let (mut open, _rx) = net(Access::Open);
        assert_eq!(renew_pin(&mut open, &facts()).unwrap_err().0, 409);
    }

    #[test]
    fn the_bit_rate_is_checked_then_handed_to_the_encoder() {
        let (mut n, rx) = net(Access::Allowlist);
        for bad in [0, MIN_KBPS as u64 - 1, 8001, u64::MAX] {
            let (status, reason) = bitrate(&mut n, &facts(), bad).unwrap_err();
            assert_eq!(status, 400);
            assert!(reason.contains("bitrate_kbps"), "{reason}");
        }
        let r = bitrate(&mut n, &facts(), 3000).unwrap();
        assert_eq!(r["bitrate_kbps"], 3000);
        assert!(matches!(
            rx.try_recv(),
            Ok(crate::host::encode::EncoderEvent::Bitrate(3000))
        ));
        assert_eq!(state(&mut n, &facts())["settings"]["bitrate_kbps"], 3000);
        // Without a browser page there is no link to make.
        assert_eq!(browser_link(&mut n, &facts()).unwrap_err().0, 409);
    }

    #[test]
    fn the_frame_rate_is_checked_then_handed_to_the_encoder_as_a_ceiling() {
        use crate::host::encode::EncoderEvent::FpsCeiling;
        let (mut n, rx) = net(Access::Allowlist);
        for bad in [0, MIN_FPS as u64 - 1, 61, u64::MAX] {
            let (status, reason) = fps(&mut n, &facts(), bad).unwrap_err();
            assert_eq!(status, 400);
            assert!(reason.contains("fps must be 5–60"), "{reason}");
        }
        fps(&mut n, &facts(), 20).unwrap();
        assert!(matches!(rx.try_recv(), Ok(FpsCeiling(Some(20)))));
        let s = &state(&mut n, &facts())["settings"];
        assert_eq!(
            (s["fps"].as_u64(), s["fps_ceiling"].as_u64()),
            (Some(20), Some(20))
        );
        // The configured rate lifts the ceiling.
        fps(&mut n, &facts(), 60).unwrap();
        assert!(matches!(rx.try_recv(), Ok(FpsCeiling(None))));
        assert_eq!(state(&mut n, &facts())["settings"]["fps"], 60);
    }
}

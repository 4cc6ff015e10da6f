//! What the host says about a client's request for a stream (`client --resolution --fps
//! --bitrate`): what it granted, and what its limits lowered.

use untether_proto::{SessionParams, StreamWants};

/// `WxH @ F fps, B kbit/s` of what was asked (a field not asked for: "host's").
pub(crate) fn asked_text(w: &StreamWants) -> String {
    let size = if w.width > 0 && w.height > 0 {
        format!("{}x{}", w.width, w.height)
    } else {
        "the host's size".into()
    };
    let fps = if w.fps > 0 {
        format!("{} fps", w.fps)
    } else {
        "the host's frame rate".into()
    };
    let rate = if w.bitrate_kbps > 0 {
        format!("{} kbit/s", w.bitrate_kbps)
    } else {
        "the host's bit rate".into()
    };
    format!("{size} @ {fps}, {rate}")
}

/// `WxH @ F fps, B kbit/s` of a stream.
pub(crate) fn stream_text(p: &SessionParams) -> String {
    format!(
        "{}x{} @ {} fps, {} kbit/s",
        p.width, p.height, p.fps, p.bitrate_kbps
    )
}

/// The host's line for a client that asked for a stream.
pub(crate) fn granted_line(
    who: &str,
    asked: StreamWants,
    granted: &SessionParams,
    limits: &SessionParams,
    clamped: bool,
    shared: bool,
) -> String {
    let asked = asked_text(&asked);
    let got = stream_text(granted);
    match (shared, clamped) {
        (true, _) => format!(
            "client {who} asked for {asked}; it joins the stream the others watch: {got} (the \
             first client of a stream chooses it)"
        ),
        (false, true) => format!(
            "client {who} asked for {asked}, above this host's limits ({}): streaming {got}",
            stream_text(limits)
        ),
        (false, false) => format!("client {who} asked for {asked}: streaming {got}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_says_what_it_granted_and_what_its_limits_lowered() {
        let limits = SessionParams {
            width: 1280,
            height: 720,
            fps: 60,
            codec: untether_proto::Codec::H264,
            bitrate_kbps: 10_000,
            max_datagram: 1200,
            keepalive_ms: 100,
            idle_timeout_ms: 3000,
            refresh_period: 0,
        };
        let asked = StreamWants {
            width: 1920,
            height: 1080,
            fps: 120,
            bitrate_kbps: 0,
        };
        let (granted, clamped) = asked.grant(&limits);
        let line = granted_line("#1 \"pi\"", asked, &granted, &limits, clamped, false);
        assert_eq!(
            line,
            "client #1 \"pi\" asked for 1920x1080 @ 120 fps, the host's bit rate, above this \
             host's limits (1280x720 @ 60 fps, 10000 kbit/s): streaming 1280x720 @ 60 fps, \
             10000 kbit/s"
        );
        let line = granted_line("#2", asked, &granted, &limits, clamped, true);
        assert!(line.contains("joins the stream the others watch"), "{line}");
    }
}

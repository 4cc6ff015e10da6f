//! What the two sides report about the stream in control frames: the host's per-frame timing,
//! the client's Feedback counters and its latency report.

/// Per-frame timing the host reports to the client after sending a frame, so the client can
/// account for every stage. Durations in microseconds; `send_done_us` is host clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameTiming {
    pub frame_number: u32,
    pub capture_dur_us: u32,
    pub convert_us: u32,
    pub encode_us: u32,
    /// First shard handed to the socket → last shard handed to the socket.
    pub send_us: u32,
    /// When the last shard was handed to the socket (host clock).
    pub send_done_us: u64,
    pub frame_bytes: u32,
    /// Host counters at this frame (for reports of a client without the host's own report).
    pub captured: u32,
    pub encoded: u32,
    pub dropped: u32,
}

/// Client → host: how the stream is doing. Counters are cumulative since the session start, so a
/// lost Feedback loses nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Feedback {
    pub frames_complete: u32,
    pub frames_lost: u32,
    pub frames_late: u32,
    pub datagrams_received: u32,
    pub packets_lost: u32,
    /// Interarrival jitter estimate, microseconds (RFC 3550 style).
    pub jitter_us: u32,
    /// The client's smoothed RTT, microseconds (0: unknown).
    pub srtt_us: u32,
    /// The client's recent decode time, microseconds.
    pub decode_us: u32,
}

/// A percentile pair of one latency over a report interval, µs; [`Spread::NONE`]: no sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spread {
    pub p50_us: u32,
    pub p95_us: u32,
}

impl Spread {
    /// No sample in the interval (both fields `u32::MAX` on the wire).
    pub const NONE: Spread = Spread {
        p50_us: u32::MAX,
        p95_us: u32::MAX,
    };

    /// Whether it carries a measurement.
    pub fn is_some(&self) -> bool {
        *self != Spread::NONE
    }
}

impl Default for Spread {
    fn default() -> Self {
        Spread::NONE
    }
}

/// Client → host, beside the Feedback: the latency of the frames the client showed over its
/// last report interval (docs/PROTOCOL.md §7, `Latency`): glass-to-glass and the client-side
/// stages, each as p50/p95. An older host skips the frame by its type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencyReport {
    /// The frames shown in the interval.
    pub frames: u16,
    /// The interval's length, ms.
    pub interval_ms: u16,
    /// Host capture → shown on the client.
    pub glass_to_glass: Spread,
    /// Last shard sent (host) → last shard received (client).
    pub network: Spread,
    /// Last shard received → decoder start.
    pub reassemble: Spread,
    /// FFmpeg decode.
    pub decode: Spread,
    /// Decoded → shown.
    pub present: Spread,
}

impl LatencyReport {
    /// The body's length: two u16 and five spreads.
    pub const LEN: usize = 4 + 5 * 8;

    /// The spreads in wire order, with their names (as the dashboard shows them).
    pub fn spreads(&self) -> [(&'static str, Spread); 5] {
        [
            ("glass_to_glass", self.glass_to_glass),
            ("network", self.network),
            ("reassemble", self.reassemble),
            ("decode", self.decode),
            ("present", self.present),
        ]
    }
}

#[cfg(test)]
mod tests {
    use crate::wire::*;

    /// The Latency frame's test vector of docs/PROTOCOL.md.
    #[test]
    fn test_vectors() {
        use crate::vectors as v;
        let h = |b: &[u8]| Hex(b).to_string();
        let mut out = Vec::new();
        let spread = |a, b| Spread {
            p50_us: a,
            p95_us: b,
        };
        let latency = ControlFrame::Latency(LatencyReport {
            frames: 30,
            interval_ms: 500,
            glass_to_glass: spread(24_000, 31_000),
            network: spread(1_500, 2_500),
            reassemble: spread(200, 400),
            decode: spread(1_400, 2_100),
            present: Spread::NONE,
        });
        latency.encode(&mut out);
        assert_eq!(h(&out), v::LATENCY_FRAME);
        assert_eq!(out.len(), latency.encoded_len());
        assert_eq!(
            ControlFrame::parse_body(out[0], &out[3..]),
            Ok(Some(latency))
        );
        // An older peer's view: a frame type it does not know is skipped by its length.
        assert_eq!(ControlFrame::parse_body(0x7f, &out[3..]), Ok(None));
        assert!(ControlFrame::parse_body(0x20, &out[3..40]).is_err());
    }

    /// A Feedback and a FrameTiming frame written out (docs/PROTOCOL.md §7: `type u8 ‖
    /// length u16 ‖` the fields in order).
    #[test]
    fn feedback_and_frame_timing_bytes() {
        let feedback = ControlFrame::Feedback(Feedback {
            frames_complete: 1,
            frames_lost: 2,
            frames_late: 3,
            datagrams_received: 4,
            packets_lost: 5,
            jitter_us: 6,
            srtt_us: 7,
            decode_us: 8,
        });
        let timing = ControlFrame::FrameTiming(FrameTiming {
            frame_number: 300,
            capture_dur_us: 1_000,
            convert_us: 500,
            encode_us: 4_000,
            send_us: 250,
            send_done_us: 1_016_000,
            frame_bytes: 60_000,
            captured: 301,
            encoded: 300,
            dropped: 1,
        });
        let frames: [(ControlFrame, &[u8]); 2] = [
            (
                feedback,
                &[
                    0x02, 0x00, 0x20, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00,
                    0x00, 0x03, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00,
                    0x06, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x08,
                ],
            ),
            (
                timing,
                &[
                    0x07, 0x00, 0x2c, 0x00, 0x00, 0x01, 0x2c, 0x00, 0x00, 0x03, 0xe8, 0x00, 0x00,
                    0x01, 0xf4, 0x00, 0x00, 0x0f, 0xa0, 0x00, 0x00, 0x00, 0xfa, 0x00, 0x00, 0x00,
                    0x00, 0x00, 0x0f, 0x80, 0xc0, 0x00, 0x00, 0xea, 0x60, 0x00, 0x00, 0x01, 0x2d,
                    0x00, 0x00, 0x01, 0x2c, 0x00, 0x00, 0x00, 0x01,
                ],
            ),
        ];
        for (frame, bytes) in frames {
            let mut out = Vec::new();
            frame.encode(&mut out);
            assert_eq!(out, bytes, "{frame:?}");
            assert_eq!(out.len(), frame.encoded_len());
            assert_eq!(parse_control(&out), Ok(vec![frame]));
        }
        // A spread with no sample is the default, and reads as none.
        assert_eq!(Spread::default(), Spread::NONE);
        assert!(!Spread::NONE.is_some());
    }
}

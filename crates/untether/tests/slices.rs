//! Frames sent in slices end to end over loopback (docs/PROTOCOL.md §6.3): x264 through its own
//! API handing each slice over as it is written, real UDP sockets on 127.0.0.1, FFmpeg's
//! decoder fed slice by slice, the real test scene. A few seconds each.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use untether::client::{ClientOptions, ClientRun, Display, ShownFrameTap};
use untether::config::ConfigToml;
use untether::{report, ClientIo, DemoOptions, HostOptions, HostSetup, SentFrameTap};
use untether_media::codec::InputPicture;
use untether_media::stamp;

fn options(seconds: f64, slices: u8) -> DemoOptions {
    let mut cfg = ConfigToml::default();
    cfg.video.slices = slices;
    DemoOptions {
        host: HostOptions {
            video: cfg.video.validate().unwrap(),
            scene: cfg.scene.clone(),
            host: cfg.host.clone(),
            network: cfg.network.clone(),
            vr: cfg.vr.clone(),
            webrtc: cfg.webrtc.clone(),
        },
        client: ClientOptions {
            host: ([127, 0, 0, 1], 0).into(),
            client: cfg.client.clone(),
            network: cfg.network.clone(),
            display: Display::Headless,
            duration: Some(Duration::from_secs_f64(seconds)),
            save_frame: None,
            vr: cfg.vr.clone(),
        },
    }
}

/// Runs host and client in-process and returns both sides' measurements.
fn stream(
    mut opts: DemoOptions,
    setup: HostSetup,
    io: ClientIo,
) -> (ClientRun, untether::HostSummary) {
    opts.host.host.bind = "127.0.0.1:0".into();
    let (host_trust, client_trust) = untether::identity::memory_pair();
    let host = untether::Host::start_with(
        opts.host.clone(),
        HostSetup {
            trust: host_trust,
            ..setup
        },
    )
    .expect("host starts");
    opts.client.host = host.local_addr();
    let run = untether::client::run_client_with(
        &opts.client,
        ClientIo {
            trust: client_trust,
            ..io
        },
        Arc::new(AtomicBool::new(false)),
    )
    .expect("client runs");
    std::thread::sleep(Duration::from_millis(20));
    let summary = host.stop();
    assert!(summary.fatal.is_none(), "host failed: {:?}", summary.fatal);
    (run, summary)
}

#[test]
fn sliced_frames_are_all_decoded_in_order_with_their_slice_timeline() {
    let opts = options(3.0, 4);
    let (run, host) = stream(opts.clone(), HostSetup::default(), ClientIo::default());
    assert!(host.sent >= 60, "sent only {} frames in 3 s", host.sent);
    // Every frame sent (but the last few, in flight when the client stopped) was complete
    // and decoded: nothing lost, nothing concealed.
    assert!(
        run.decoded + 3 >= host.sent,
        "decoded {} of {} sent frames",
        run.decoded,
        host.sent
    );
    let a = run.stats.assembler;
    assert_eq!((a.frames_lost, a.slices_lost, a.frames_partial), (0, 0, 0));
    assert_eq!(run.decode_errors, 0);
    assert_eq!(run.concealed, 0);
    assert_eq!(run.stamp_unreadable, 0);
    // Every decoded picture was shown, or replaced in the latest-wins slot before the
    // presenter took it (counted), or was the last one waiting there at the end.
    assert!(
        run.shown + run.dropped_presenter + 1 >= run.decoded,
        "decoded {}, shown {}, dropped {}",
        run.decoded,
        run.shown,
        run.dropped_presenter
    );
    // Pictures are shown in order; each frame's slices were decoded as they came: the first
    // slice before the picture, the picture before it was shown.
    let mut last = None;
    for r in run.records.iter().filter(|r| r.shown_us != 0) {
        let n = r.stamp.expect("stamp readable").frame_number;
        assert!(last.is_none_or(|l| n > l), "frame {n} after {last:?}");
        last = Some(n);
        assert_eq!((r.slices, r.slices_lost), (4, 0));
        assert!(r.decode_start_us <= r.first_slice_decoded_us);
        assert!(r.first_slice_decoded_us <= r.last_decode_start_us);
        assert!(r.last_decode_start_us <= r.decode_end_us);
        assert!(r.decode_end_us <= r.shown_us);
        assert!(r.decode_us <= r.decode_end_us - r.decode_start_us + 1);
    }
    for (f, &(count, first, last)) in &run.slice_timings {
        assert_eq!(count, 4, "frame {f}");
        assert!(first <= last, "frame {f}: first slice out after the last");
    }
    let config = untether::report_config(&opts.host, Display::Headless, "udp-loopback");
    let rep = report::build(config, &run, Some(&host));
    let s = &rep.latency_ms.slices;
    assert_eq!(s.count, 4);
    for p in [&s.first_out, &s.last_out, &s.first_decoded, &s.last_decoded] {
        assert!(p.count >= 50, "{p:?}");
    }
    // Per frame first ≤ last, so the medians keep that order too.
    assert!(s.first_out.p50 <= s.last_out.p50);
    assert!(s.first_decoded.p50 <= s.last_decoded.p50);
    assert_eq!(rep.config.slices, 4);
    // Glass-to-glass read from pixels and from protocol timestamps agree.
    let g = rep.latency_ms.glass_to_glass.p50.unwrap();
    let gp = rep.latency_ms.glass_to_glass_pixels.p50.unwrap();
    assert!(
        (g - gp).abs() <= 1.0,
        "timestamp g2g {g} ms, pixels {gp} ms"
    );
    let json = serde_json::to_value(&rep).unwrap();
    assert!(json["latency_ms"]["slices"]["first_out"]["p50"].is_number());
    assert!(rep.to_text().contains("4 slices: first out"));
}

/// Luma every 4th pixel of every 4th row: 320x180 at 720p.
type Small = Vec<u8>;

fn small_from_bgra(data: &[u8], stride: usize, w: u32, h: u32) -> Small {
    let mut out = Vec::with_capacity((w as usize / 4) * (h as usize / 4));
    for y in (0..h as usize).step_by(4) {
        for x in (0..w as usize).step_by(4) {
            let p = &data[y * stride + 4 * x..];
            let (b, g, r) = (p[0] as u32, p[1] as u32, p[2] as u32);
            out.push((((66 * r + 129 * g + 25 * b + 128) >> 8) + 16) as u8);
        }
    }
    out
}

fn small_from_plane(plane: &[u8], stride: usize, w: u32, h: u32) -> Small {
    let mut out = Vec::with_capacity((w as usize / 4) * (h as usize / 4));
    for y in (0..h as usize).step_by(4) {
        for x in (0..w as usize).step_by(4) {
            out.push(plane[y * stride + x]);
        }
    }
    out
}

/// The stamp of a BGRA picture (it is grey: any channel is its plane).
fn stamp_of_bgra(data: &[u8], stride: usize, w: u32, h: u32) -> Option<stamp::Stamp> {
    let (aw, ah) = stamp::stamp_area(w, h);
    let (aw, ah) = (aw as usize, ah as usize);
    let mut plane = vec![0u8; aw * ah];
    for y in 0..ah {
        for x in 0..aw {
            plane[y * aw + x] = data[y * stride + 4 * x + 1];
        }
    }
    stamp::read_plane(&plane, aw, w, h)
}

/// Mean |a − b| over the rows of `a`/`b` (320 samples each) in `rows` (pixel rows, 720p).
fn mad(a: &Small, b: &Small, rows: impl Iterator<Item = usize>) -> f64 {
    let (mut sum, mut n) = (0u64, 0u64);
    for y in rows.filter(|y| y % 4 == 0) {
        let i = (y / 4) * 320;
        for x in 0..320 {
            sum += (a[i + x] as i64 - b[i + x] as i64).unsigned_abs();
            n += 1;
        }
    }
    sum as f64 / n.max(1) as f64
}

/// A lost slice (every shard of it) costs only its own region: the frame is shown at once
/// with the rest of the picture as intact as any frame's, the frames after it keep coming,
/// the client asks for a keyframe, and after it the pictures are whole again.
#[test]
fn a_lost_slice_costs_only_its_region_until_the_keyframe() {
    let lost = [(90u32, 2u8), (150, 1)];
    // The slices' pixel rows, from x264's layout for these settings (80 macroblocks a row).
    let enc = untether_media::x264::SliceEncoder::new(untether_media::x264::SliceEncoderConfig {
        width: 1280,
        height: 720,
        fps: 60,
        bitrate_kbps: 10_000,
        preset: "ultrafast".into(),
        threads: 2,
        slices: 4,
        conversion: untether_media::convert::Conversion::Simd,
        x264_params: String::new(),
    })
    .unwrap();
    let starts: Vec<usize> = enc
        .layout()
        .iter()
        .map(|&mb| mb as usize / 80 * 16)
        .chain(std::iter::once(720))
        .collect();
    // Rows touching slice i (a slice may start mid-row).
    let band = |i: usize| starts[i]..(starts[i + 1] + 16).min(720);
    let sources: Arc<Mutex<BTreeMap<u32, Small>>> = Arc::default();
    let shown: Arc<Mutex<BTreeMap<u32, (u32, Small)>>> = Arc::default();
    let (src, seen) = (sources.clone(), shown.clone());
    let setup = HostSetup {
        lose_slices: lost.to_vec(),
        sent_frame_tap: Some(SentFrameTap(Arc::new(move |p: &InputPicture<'_>| {
            if let InputPicture::Bgra {
                width,
                height,
                data,
                stride,
            } = *p
            {
                if let Some(s) = stamp_of_bgra(data, stride, width, height) {
                    src.lock()
                        .unwrap()
                        .insert(s.frame_number, small_from_bgra(data, stride, width, height));
                }
            }
        }))),
        ..Default::default()
    };
    let io = ClientIo {
        shown_frame_tap: Some(ShownFrameTap(Box::new(move |r, pic| {
            if let Some(s) = r.stamp {
                let (plane, stride) = pic.luma();
                seen.lock().unwrap().insert(
                    r.frame_number,
                    (
                        s.frame_number,
                        small_from_plane(plane, stride, pic.width(), pic.height()),
                    ),
                );
            }
        }))),
        ..Default::default()
    };
    let (run, host) = stream(options(3.5, 4), setup, io);
    assert!(host.sent >= 180, "sent only {} frames", host.sent);
    let by_number: BTreeMap<u32, &untether::client::FrameRecord> = run
        .records
        .iter()
        .filter(|r| r.session == 0)
        .map(|r| (r.frame_number, r))
        .collect();
    // Both damaged frames were decoded (concealed) and nothing else was lost.
    for &(f, s) in &lost {
        let r = by_number
            .get(&f)
            .unwrap_or_else(|| panic!("frame {f} not decoded"));
        assert_eq!(r.slices_lost, 1, "frame {f}");
        assert!(
            r.stamp.is_some(),
            "frame {f}: its stamp (slice 0) was not lost"
        );
        let _ = s;
    }
    assert_eq!(run.stats.assembler.slices_lost, 2);
    assert_eq!(run.stats.assembler.frames_lost, 0);
    assert_eq!(run.concealed, 2);
    assert_eq!(run.decode_errors, 0);
    // No freeze: every frame around the losses was decoded.
    for f in 80..=160 {
        assert!(by_number.contains_key(&f), "frame {f} not decoded");
    }
    // The client asked for a keyframe after each loss and one came within a few frames; the
    // frames after it are whole.
    assert!(run.stats.keyframe_requests_sent >= 2);
    for &(f, _) in &lost {
        let key = (f + 1..f + 40)
            .find(|k| by_number.get(k).is_some_and(|r| r.keyframe))
            .unwrap_or_else(|| panic!("no keyframe after frame {f}"));
        for k in key..key + 10 {
            assert_eq!(by_number[&k].slices_lost, 0, "frame {k}");
        }
    }
    // Pixels: outside its lost slice, a damaged frame is as close to its source as the
    // undamaged frames before it; after the keyframe the whole picture is again.
    let sources = sources.lock().unwrap();
    let shown = shown.lock().unwrap();
    let whole = |f: u32| -> Option<f64> {
        let (stamp, pic) = shown.get(&f)?;
        Some(mad(sources.get(stamp)?, pic, 0..720))
    };
    let clean: Vec<f64> = (60..90).filter_map(whole).collect();
    assert!(clean.len() >= 10, "only {} clean frames shown", clean.len());
    let worst_clean = clean.iter().cloned().fold(0.0, f64::max);
    let mut checked = 0;
    for &(f, s) in &lost {
        let Some((stamp, pic)) = shown.get(&f) else {
            continue;
        };
        let src = &sources[stamp];
        let outside = (0..720).filter(|y| !band(s as usize).contains(y));
        let m = mad(src, pic, outside);
        let inside = mad(src, pic, band(s as usize));
        eprintln!(
            "frame {f}: slice {s} lost; distance from the source outside it {m:.2}, inside it \
             {inside:.2} (clean frames ≤ {worst_clean:.2})"
        );
        assert!(
            m <= worst_clean * 1.25 + 0.5,
            "frame {f}: outside its lost slice {m:.2} from the source; clean frames ≤ {worst_clean:.2}"
        );
        checked += 1;
        let key = (f + 1..f + 40)
            .find(|k| by_number.get(k).is_some_and(|r| r.keyframe))
            .unwrap_or(f + 40);
        for k in key + 1..key + 10 {
            if let Some(m) = whole(k) {
                assert!(
                    m <= worst_clean * 1.25 + 0.5,
                    "frame {k} after the keyframe: {m:.2}; clean frames ≤ {worst_clean:.2}"
                );
            }
        }
    }
    assert!(checked >= 1, "neither damaged frame reached the screen");
}

/// Records every access unit the host hands its other consumers (as RTSP would get them).
#[derive(Default)]
struct Recorder(Mutex<Vec<(bool, Vec<u8>)>>);

impl untether::host::StreamConsumer for Recorder {
    fn attach(&self, _: untether::host::StreamInfo, _: untether::host::KeyframeRequests) {}
    fn video(&self, frame: &untether::host::EncodedVideo) {
        self.0
            .lock()
            .unwrap()
            .push((frame.keyframe, frame.data.to_vec()));
    }
    fn audio(&self, _: &untether_proto::AudioPacket) {}
    fn watching(&self) -> bool {
        false
    }
    fn summary(&self) -> untether::host::ConsumerSummary {
        Default::default()
    }
}

/// With slices, each frame still carries the head pose it was rendered for (its FramePose
/// leaves ahead of its first slice), and the host's other consumers (RTSP) get every frame as
/// one whole access unit that a plain decoder decodes to the full picture.
#[test]
fn sliced_frames_carry_their_pose_and_consumers_get_whole_access_units() {
    let mut track = untether::pose::track::Track::generate("turn", 10.0, 500).unwrap();
    for (_, p) in track.samples.iter_mut() {
        p.position = [0.3, 0.0, 0.2];
    }
    let file =
        std::env::temp_dir().join(format!("untether-slices-pose-{}.csv", std::process::id()));
    std::fs::write(&file, track.to_text()).unwrap();
    let mut opts = options(2.5, 4);
    let mut cfg = ConfigToml::default();
    cfg.video.slices = 4;
    cfg.video.resolution = "640x360".into();
    cfg.vr.enabled = true;
    cfg.vr.pose = format!("track:{}", file.display());
    cfg.vr.pose_rate_hz = 500;
    opts.host.video = cfg.video.validate().unwrap();
    opts.host.vr = cfg.vr.clone();
    opts.client.vr = cfg.vr.clone();
    let recorder = Arc::new(Recorder::default());
    let setup = HostSetup {
        consumers: vec![untether::host::Consumer(recorder.clone())],
        ..Default::default()
    };
    let (run, host) = stream(opts, setup, ClientIo::default());
    std::fs::remove_file(&file).ok();
    assert!(run.decoded > 60, "{} frames decoded", run.decoded);
    assert_eq!(run.stats.assembler.slices_lost, 0);
    // Nearly every decoded frame knows its pose (the first frames may precede the first).
    assert!(
        run.frames_with_pose * 10 >= run.decoded * 9,
        "{} of {} frames with a pose",
        run.frames_with_pose,
        run.decoded
    );
    let posed: Vec<_> = run.records.iter().filter_map(|r| r.pose).collect();
    assert!(!posed.is_empty());
    assert!(posed.iter().all(|p| p.pose.position == [0.3, 0.0, 0.2]));
    assert!(run.records.iter().all(|r| r.slices == 4));
    // The consumer's access units: one per encoded frame, each whole.
    let units = recorder.0.lock().unwrap();
    assert_eq!(units.len() as u64, host.encoded);
    assert!(units[0].0, "the first is a keyframe");
    let mut decoder = untether_media::codec::Decoder::new(1).unwrap();
    for (i, (_, au)) in units.iter().enumerate() {
        let picture = decoder
            .decode(au)
            .unwrap_or_else(|e| panic!("access unit {i}: {e}"))
            .unwrap_or_else(|| panic!("access unit {i}: no picture"));
        assert_eq!((picture.width(), picture.height()), (640, 360));
    }
}

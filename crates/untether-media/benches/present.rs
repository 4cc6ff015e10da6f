//! What showing a 720p picture costs: the GPU presenter (mono; VR with lens distortion; VR
//! with late warp; each with the statistics overlay) against SDL's renderer, and the overlay's
//! text rasterisation. Needs a display (Xvfb: Mesa's llvmpipe, the CPU doing the GPU's work):
//! `xvfb-run -a -s "-screen 0 1920x1080x24" cargo bench -p untether-media --bench present`
//!
//! Each iteration uploads a new picture, draws it and swaps, then waits for GL to finish
//! (`glFinish`), so the time is the whole presentation; the overlay's cost is the difference
//! between a variant with and without it.
use criterion::{criterion_group, criterion_main, Criterion};
use std::time::Duration;
use untether_media::codec::{DecodedFrame, Decoder, Encoder, EncoderConfig};
use untether_media::convert::Conversion;
use untether_media::lens::LensProfile;
use untether_media::overlay::{OverlayModel, TextRaster};
use untether_media::present::{Presenter, SdlPresenter, WindowSpec};
use untether_media::present_gl::GlPresenter;
use untether_media::scene::{Scene, SceneConfig};
use untether_media::warp::{Fov, Quat, Warp};
use untether_media::BgraFrame;

fn pictures(w: u32, h: u32, n: usize) -> Vec<DecodedFrame> {
    let mut s = Scene::new(SceneConfig::new(w, h)).expect("scene");
    let mut enc = Encoder::new(EncoderConfig {
        threads: 2,
        conversion: Conversion::Simd,
        ..EncoderConfig::new(w, h, 60, 10_000)
    })
    .expect("encoder");
    let mut dec = Decoder::new(2).expect("decoder");
    (0..n)
        .map(|i| {
            let mut f = BgraFrame::new(w, h).expect("frame");
            s.render(i as f64 / 60.0, &mut f);
            let e = enc
                .encode(&f, i == 0)
                .expect("encode")
                .expect("libx264 zerolatency: a frame out per frame in");
            dec.decode(&e.data).expect("decode").expect("picture")
        })
        .collect()
}

/// CPU time used by this process so far (every thread).
fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn model() -> OverlayModel {
    let mut m = OverlayModel {
        header: "gl · 1280x720 · vr".into(),
        fps: Some(59.9),
        glass_to_glass_ms: Some(7.9),
        glass_to_glass_max_ms: Some(10.2),
        stages_ms: [
            "capture",
            "host_queue",
            "convert",
            "encode",
            "send",
            "network",
            "reassemble",
            "decode",
            "present",
        ]
        .iter()
        .map(|s| (*s, Some(1.25)))
        .collect(),
        bitrate_mbps: Some(9.84),
        loss_percent: Some(0.0),
        fec_repaired: Some(0),
        nacks: Some(0),
        rtt_ms: Some(0.41),
        paths: Some((1, 1)),
        ..Default::default()
    };
    m.set_pose_to_photon(None);
    m
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("overlay");
    g.sample_size(30).measurement_time(Duration::from_secs(3));
    let mut raster = TextRaster::new(15.0).expect("font");
    let mut m = model();
    let mut i = 0u64;
    // A new text each time (as every 0.5 s in a run): layout + rasterisation.
    g.bench_function("rasterise_text", |b| {
        b.iter(|| {
            i += 1;
            m.rtt_ms = Some(i as f64 / 100.0);
            raster.update(&m.lines())
        })
    });
    g.finish();

    if std::env::var_os("DISPLAY").is_none() {
        eprintln!("present benches skipped: no DISPLAY (run under xvfb-run)");
        return;
    }
    let (w, h) = (1280u32, 720u32);
    let pics = pictures(w, h, 8);
    let fov = Fov::from_horizontal(90f32.to_radians(), w / 2, h);
    let mut g = c.benchmark_group("present_720p");
    g.sample_size(20).measurement_time(Duration::from_secs(6));
    let spec = |vr: bool| WindowSpec {
        title: "untether bench".into(),
        width: w,
        height: h,
        fullscreen: false,
        vr: vr.then(LensProfile::generic),
    };
    for (name, vr, warp, overlay) in [
        ("gl_mono", false, false, false),
        ("gl_mono_overlay", false, false, true),
        ("gl_vr_lens", true, false, false),
        ("gl_vr_lens_warp", true, true, false),
        ("gl_vr_lens_warp_overlay", true, true, true),
    ] {
        let mut p = match GlPresenter::open(&spec(vr)) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("{name} skipped: {e}");
                continue;
            }
        };
        if warp {
            p.set_warp(Some(Warp {
                rendered: Quat::IDENTITY,
                latest: Quat::from_rotation_y(0.05),
                fov,
            }));
        }
        if overlay {
            p.set_overlay(Some(&model())).expect("overlay");
        }
        let mut k = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                k = (k + 1) % pics.len();
                p.present(&pics[k]).expect("present");
                p.poll_events();
                p.finish();
            })
        });
    }
    // The overlay's own cost per frame: its blended quad over the picture (the text's
    // rasterisation and upload happen every 0.5 s at most, above).
    if let Ok(mut p) = GlPresenter::open(&spec(true)) {
        p.present(&pics[0]).expect("present");
        p.set_overlay(Some(&model())).expect("overlay");
        g.bench_function("gl_overlay_quad_only", |b| b.iter(|| p.draw_overlay_only()));
        // The same in CPU time of the whole process (llvmpipe's threads included), which a
        // loaded box inflates less than wall time.
        g.bench_function("gl_overlay_quad_only_cpu_time", |b| {
            b.iter_custom(|n| {
                let t0 = process_cpu();
                for _ in 0..n {
                    p.draw_overlay_only();
                }
                process_cpu() - t0
            })
        });
        // The same call with the overlay hidden: glFinish alone, the baseline to subtract.
        p.set_overlay(None).expect("overlay off");
        g.bench_function("gl_overlay_hidden_baseline", |b| {
            b.iter(|| p.draw_overlay_only())
        });
    }
    for (name, overlay) in [("sdl", false), ("sdl_overlay", true)] {
        let mut p = match SdlPresenter::open(&spec(false)) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("{name} skipped: {e}");
                continue;
            }
        };
        if overlay {
            p.set_overlay(Some(&model())).expect("overlay");
        }
        let mut k = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                k = (k + 1) % pics.len();
                p.present(&pics[k]).expect("present");
                p.poll_events();
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

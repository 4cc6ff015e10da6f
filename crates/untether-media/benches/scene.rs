//! Scene rendering and the pixel stamp. `cargo bench -p untether-media --bench scene`
use criterion::{criterion_group, criterion_main, Criterion};
use std::time::Duration;
use untether_media::scene::{Scene, SceneConfig};
use untether_media::stamp::{self, Stamp};
use untether_media::BgraFrame;

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("scene");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    for (name, w, h) in [("720p", 1280, 720), ("1080p", 1920, 1080)] {
        let mut s = Scene::new(SceneConfig::new(w, h)).expect("scene");
        let mut f = BgraFrame::new(w, h).expect("frame");
        let mut t = 0.0;
        g.bench_function(format!("render {name}"), |b| {
            b.iter(|| {
                t += 1.0 / 60.0;
                s.render(t, &mut f)
            })
        });
        let st = Stamp {
            frame_number: 7,
            capture_us: 123_456_789,
            input_seq: 3,
        };
        g.bench_function(format!("stamp write {name}"), |b| {
            b.iter(|| stamp::write_bgra(&mut f, &st))
        });
        let y: Vec<u8> = f.data.chunks_exact(4).map(|p| p[1]).collect();
        g.bench_function(format!("stamp read {name}"), |b| {
            b.iter(|| stamp::read_plane(&y, w as usize, w, h))
        });
    }
    // VR: two eye views side by side (each half the width) from a head pose, with the pose
    // markers: what `--vr` renders on the host.
    for (name, w, h) in [("720p", 1280, 720), ("1080p", 1920, 1080)] {
        let mut cfg = SceneConfig::new(w, h);
        cfg.stereo = true;
        cfg.pose_markers = true;
        let mut s = Scene::new(cfg).expect("scene");
        let mut f = BgraFrame::new(w, h).expect("frame");
        let mut t = 0.0;
        g.bench_function(format!("render {name} stereo"), |b| {
            b.iter(|| {
                t += 1.0 / 60.0;
                s.set_head_pose((t * 60.0) as f32 % 360.0, 5.0, [0.1, 0.0, -0.1]);
                s.render(t, &mut f)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

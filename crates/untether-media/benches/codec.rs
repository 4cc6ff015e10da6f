//! Colour conversion, x264 encode and h264 decode on the real moving scene.
//! `cargo bench -p untether-media --bench codec`
use criterion::{criterion_group, criterion_main, Criterion};
use std::time::Duration;
use untether_media::codec::{Decoder, Encoder, EncoderConfig};
use untether_media::convert::{Conversion, Converter, I420Frame};
use untether_media::scene::{Scene, SceneConfig};
use untether_media::BgraFrame;

fn frames(w: u32, h: u32, n: usize) -> Vec<BgraFrame> {
    let mut s = Scene::new(SceneConfig::new(w, h)).expect("scene");
    (0..n)
        .map(|i| {
            let mut f = BgraFrame::new(w, h).expect("frame");
            s.render(i as f64 / 60.0, &mut f);
            f
        })
        .collect()
}

fn cfg(w: u32, h: u32, kbps: u32, preset: &str, conversion: Conversion) -> EncoderConfig {
    let encoder = if conversion == Conversion::Rgb {
        "libx264rgb"
    } else {
        "libx264"
    };
    EncoderConfig {
        preset: preset.into(),
        conversion,
        ..EncoderConfig::new(w, h, 60, kbps).with_encoder(encoder)
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("codec");
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    for (name, w, h, kbps) in [
        ("720p", 1280u32, 720u32, 10_000u32),
        ("1080p", 1920, 1080, 15_000),
    ] {
        let fs = frames(w, h, 120);
        for conv in [Conversion::Simd, Conversion::Swscale] {
            let mut c = Converter::new(conv, w, h).expect("converter");
            let mut out = I420Frame::new(w, h);
            g.bench_function(format!("bgra->i420 {} {name}", conv.name()), |b| {
                b.iter(|| c.convert(&fs[0], out.planes_mut()).expect("convert"))
            });
        }
        for (preset, conv) in [
            ("ultrafast", Conversion::Simd),
            ("superfast", Conversion::Simd),
            ("ultrafast", Conversion::Rgb),
        ] {
            let mut enc = Encoder::new(cfg(w, h, kbps, preset, conv)).expect("encoder");
            let mut i = 0;
            let label = if conv == Conversion::Rgb {
                "libx264rgb"
            } else {
                "libx264"
            };
            g.bench_function(
                format!(
                    "encode {label} {preset} {name} {}M (convert+encode)",
                    kbps / 1000
                ),
                |b| {
                    b.iter(|| {
                        i += 1;
                        enc.encode(&fs[i % fs.len()], i == 1)
                            .expect("encode")
                            .expect("a frame")
                    })
                },
            );
        }
        // Decode a realistic stream: one keyframe then P-frames, in a loop.
        let mut enc =
            Encoder::new(cfg(w, h, kbps, "ultrafast", Conversion::Simd)).expect("encoder");
        let aus: Vec<Vec<u8>> = fs
            .iter()
            .enumerate()
            .map(|(i, f)| {
                enc.encode(f, i == 0)
                    .expect("encode")
                    .expect("a frame")
                    .data
            })
            .collect();
        for threads in [1, 2] {
            let mut dec = Decoder::new(threads).expect("decoder");
            for au in &aus {
                let _ = dec.decode(au);
            }
            let mut i = 0;
            g.bench_function(format!("decode {name} {threads} thread(s)"), |b| {
                b.iter(|| {
                    i = (i % (aus.len() - 1)) + 1;
                    dec.decode(&aus[i]).expect("decode")
                })
            });
        }
        let mut dec = Decoder::new(2).expect("decoder");
        let pic = dec.decode(&aus[0]).expect("decode").expect("picture");
        g.bench_function(format!("i420->bgra {name}"), |b| {
            b.iter(|| pic.to_bgra().expect("to_bgra"))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

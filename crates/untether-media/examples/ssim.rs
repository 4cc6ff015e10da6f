use untether_media::{codec::*, convert::Conversion, quality::*, scene::*, BgraFrame};
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let spin: f32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(30.0);
    let kbps: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10000);
    let preset = args.get(3).cloned().unwrap_or("ultrafast".into());
    let (w, h) = (1280, 720);
    let mut cfg = SceneConfig::new(w, h);
    cfg.spin_deg_per_s = spin;
    let mut scene = Scene::new(cfg).unwrap();
    let mut enc = Encoder::new(EncoderConfig {
        preset,
        conversion: Conversion::Simd,
        extra_params: std::env::var("XP").unwrap_or_default(),
        ..EncoderConfig::new(w, h, 60, kbps)
    })
    .unwrap();
    let mut dec = Decoder::new(2).unwrap();
    let mut meter = QualityMeter::new(w, h, CompareSpace::Yuv420).unwrap();
    let mut f = BgraFrame::new(w, h).unwrap();
    let (mut ssim, mut psnr, mut n, mut bytes, mut et) = (0.0, 0.0, 0.0, 0usize, 0u64);
    for i in 0..180 {
        scene.render(i as f64 / 60.0, &mut f);
        let e = enc.encode(&f, i == 0).unwrap().unwrap();
        bytes += e.data.len();
        et += e.encode_us;
        let pic = dec.decode(&e.data).unwrap().unwrap();
        if i >= 30 && i % 5 == 0 {
            let q = meter.compare(&Picture::Bgra(&f), &pic.picture()).unwrap();
            ssim += q.ssim_y;
            psnr += q.psnr_y_db;
            n += 1.0;
        }
    }
    println!(
        "spin {spin} kbps {kbps}: SSIM {:.4} PSNR {:.2} avg frame {} B, encode {:.2} ms",
        ssim / n,
        psnr / n,
        bytes / 180,
        et as f64 / 180.0 / 1000.0
    );
}

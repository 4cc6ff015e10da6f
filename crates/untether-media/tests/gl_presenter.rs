//! The GPU presenter in a real window under a display (Xvfb with Mesa's llvmpipe in `make
//! test`): what it shows is read back from its back buffer and checked against the CPU model
//! of the same arithmetic (`LensProfile::distort`, `Warp::sample_uv`) — two distorted eye
//! views with black corners, the picture's centres where the lens profile puts them, straight
//! lines shown curved where the model says, the overlay drawn over the video only while on.

use untether_media::codec::{DecodedFrame, Decoder, Encoder, EncoderConfig};
use untether_media::convert::Conversion;
use untether_media::lens::{Eye, LensProfile};
use untether_media::overlay::{OverlayModel, RgbaImage};
use untether_media::present::{Presenter, WindowSpec};
use untether_media::present_gl::GlPresenter;
use untether_media::scene::{Scene, SceneConfig};
use untether_media::warp::{Fov, Quat, Vec2, Warp};
use untether_media::zero_copy::memfd::memfd_nv12_picture;
use untether_media::BgraFrame;

fn display() -> bool {
    if std::env::var_os("DISPLAY").is_none() {
        eprintln!("skipped: no DISPLAY (make test runs this under Xvfb)");
        return false;
    }
    true
}

/// Encodes and decodes `f` (a keyframe at a high bitrate): a real decoded picture.
fn decoded(f: &BgraFrame) -> DecodedFrame {
    let mut enc = Encoder::new(EncoderConfig {
        threads: 1,
        conversion: Conversion::Simd,
        ..EncoderConfig::new(f.width, f.height, 60, 40_000)
    })
    .unwrap();
    Decoder::new(1)
        .unwrap()
        .decode(&enc.encode(f, true).unwrap().unwrap().data)
        .unwrap()
        .unwrap()
}

fn open(w: u32, h: u32, vr: Option<LensProfile>) -> GlPresenter {
    GlPresenter::open(&WindowSpec {
        title: "untether GL test".into(),
        width: w,
        height: h,
        fullscreen: false,
        vr,
    })
    .expect("the GL presenter starts under Xvfb (Mesa llvmpipe, OpenGL ES 3)")
}

fn px(img: &RgbaImage, x: u32, y: u32) -> [u8; 4] {
    let i = ((y * img.width + x) * 4) as usize;
    [
        img.data[i],
        img.data[i + 1],
        img.data[i + 2],
        img.data[i + 3],
    ]
}

/// With `UNTETHER_TEST_DUMP=DIR`, writes `img` there as a PPM, to look at.
fn dump(name: &str, img: &RgbaImage) {
    if let Some(dir) = std::env::var_os("UNTETHER_TEST_DUMP") {
        let mut out = format!("P6\n{} {}\n255\n", img.width, img.height).into_bytes();
        for p in img.data.chunks(4) {
            out.extend_from_slice(&p[..3]);
        }
        let _ = std::fs::write(std::path::Path::new(&dir).join(format!("{name}.ppm")), out);
    }
}

/// Mean absolute difference of the RGB channels over a rectangle.
fn mad(a: &RgbaImage, b: &RgbaImage, x0: u32, y0: u32, x1: u32, y1: u32) -> f64 {
    let (mut sum, mut n) = (0.0, 0.0);
    for y in y0..y1 {
        for x in x0..x1 {
            let (p, q) = (px(a, x, y), px(b, x, y));
            for c in 0..3 {
                sum += (p[c] as f64 - q[c] as f64).abs();
                n += 1.0;
            }
        }
    }
    sum / n
}

#[test]
fn the_gl_window_shows_the_decoded_picture_in_rgb() {
    if !display() {
        return;
    }
    let (w, h) = (640, 360);
    let mut scene = Scene::new(SceneConfig::new(w, h)).unwrap();
    let mut f = BgraFrame::new(w, h).unwrap();
    scene.render(0.7, &mut f);
    let pic = decoded(&f);
    let expected = pic.to_bgra().unwrap();
    let mut p = open(w, h, None);
    assert_eq!(p.kind(), "gl");
    // Twice: the second upload reuses the textures.
    p.present(&pic).unwrap();
    p.present(&pic).unwrap();
    let shot = p.snapshot().unwrap().unwrap();
    zero_copy_falls_back_and_the_stream_goes_on(&mut p, &pic, &shot);
    dump("mono", &shot);
    dump(
        "mono-expected",
        &RgbaImage {
            width: w,
            height: h,
            data: expected
                .data
                .chunks(4)
                .flat_map(|p| [p[2], p[1], p[0], 255])
                .collect(),
        },
    );
    assert_eq!((shot.width, shot.height), (w, h));
    // The shader's BT.601 limited-range conversion against the CPU's (yuvutils).
    let (mut sum, mut n) = (0.0, 0.0);
    for y in h / 8..7 * h / 8 {
        for x in w / 8..7 * w / 8 {
            let s = px(&shot, x, y);
            let i = (y as usize * expected.stride) + x as usize * 4;
            let e = &expected.data[i..i + 3];
            // RGBA against BGRA.
            for (c, ec) in [(0, 2), (1, 1), (2, 0)] {
                sum += (s[c] as f64 - e[ec] as f64).abs();
                n += 1.0;
            }
        }
    }
    let m = sum / n;
    assert!(
        m < 3.0,
        "the window differs from the decoded picture by {m}"
    );
}

const EYE_W: u32 = 640;
const H: u32 = 720;
const LINE_V: f32 = 0.25;

/// A side-by-side test picture: per eye a light background, dark horizontal lines at a
/// quarter and three quarters of the height, a dark vertical line at a quarter of the width,
/// and a square marker at the eye picture's centre (green left, magenta right).
fn stereo_test_picture() -> BgraFrame {
    let mut f = BgraFrame::new(2 * EYE_W, H).unwrap();
    for y in 0..H {
        let row = f.row_mut(y);
        for x in 0..2 * EYE_W {
            let (eye, ex) = ((x / EYE_W) as usize, x % EYE_W);
            let line = (y as i32 - (H as f32 * LINE_V) as i32).abs() < 3
                || (y as i32 - (H as f32 * 0.75) as i32).abs() < 3
                || (ex as i32 - (EYE_W / 4) as i32).abs() < 3;
            let marker = (ex as i32 - (EYE_W / 2) as i32).abs() < 24
                && (y as i32 - (H / 2) as i32).abs() < 24;
            let bgr = if marker {
                if eye == 0 {
                    [0, 200, 0]
                } else {
                    [200, 0, 200]
                }
            } else if line {
                [30, 30, 30]
            } else {
                [210, 210, 210]
            };
            row[4 * x as usize..4 * x as usize + 3].copy_from_slice(&bgr);
        }
    }
    f
}

fn test_lens() -> LensProfile {
    let mut l = LensProfile::generic();
    // Lenses closer together than the viewports' centres: the picture centres move inwards.
    l.center = [0.58, 0.5];
    l
}

/// What the window should show, computed on the CPU from the decoded picture with the same
/// model (nearest sample; the shader filters bilinearly).
fn model(pic: &BgraFrame, lens: &LensProfile, warp: Option<Warp>) -> RgbaImage {
    let (ww, wh) = (2 * EYE_W, H);
    let aspect = H as f32 / EYE_W as f32;
    let mut data = Vec::with_capacity((ww * wh * 4) as usize);
    for y in 0..wh {
        for x in 0..ww {
            let (eye, ex) = if x < EYE_W {
                (Eye::Left, x)
            } else {
                (Eye::Right, x - EYE_W)
            };
            let s = Vec2::new(
                (ex as f32 + 0.5) / EYE_W as f32,
                (y as f32 + 0.5) / wh as f32,
            );
            let mut rgb = [0u8; 3];
            for (c, out) in rgb.iter_mut().enumerate() {
                let p = lens.distort(eye, s, aspect, aspect, c);
                let p = match warp {
                    Some(w) => w.sample_uv(p),
                    None => (p.x >= 0.0 && p.x <= 1.0 && p.y >= 0.0 && p.y <= 1.0).then_some(p),
                };
                if let Some(p) = p {
                    let px = ((p.x * EYE_W as f32) as u32).min(EYE_W - 1)
                        + if eye == Eye::Right { EYE_W } else { 0 };
                    let py = ((p.y * H as f32) as u32).min(H - 1);
                    let i = py as usize * pic.stride + px as usize * 4;
                    *out = pic.data[i + 2 - c];
                }
            }
            data.extend_from_slice(&[rgb[0], rgb[1], rgb[2], 255]);
        }
    }
    RgbaImage {
        width: ww,
        height: wh,
        data,
    }
}

/// The row of the darkest green sample in column `x` between rows `y0` and `y1`.
fn darkest_row(img: &RgbaImage, x: u32, y0: u32, y1: u32) -> u32 {
    (y0..y1).min_by_key(|&y| px(img, x, y)[1]).unwrap()
}

/// The screen row (eye viewport uv) where the picture row `v` shows in column `u`, by
/// bisection on the model (green channel).
fn predicted_row(lens: &LensProfile, eye: Eye, u: f32, v: f32) -> f32 {
    let aspect = H as f32 / EYE_W as f32;
    let (mut lo, mut hi) = (0.0f32, 0.5f32);
    for _ in 0..40 {
        let mid = 0.5 * (lo + hi);
        if lens.distort(eye, Vec2::new(u, mid), aspect, aspect, 1).y < v {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The screenshot test of issue 17: two distorted eye views and the overlay, checked from
/// what the presenter drew.
#[test]
fn vr_mode_shows_two_distorted_eye_views_and_the_overlay_on_top() {
    if !display() {
        return;
    }
    let lens = test_lens();
    let f = stereo_test_picture();
    let pic = decoded(&f);
    let src = pic.to_bgra().unwrap();
    let mut p = open(2 * EYE_W, H, Some(lens.clone()));
    p.present(&pic).unwrap();
    let shot = p.snapshot().unwrap().unwrap();
    assert_eq!((shot.width, shot.height), (2 * EYE_W, H));

    // The whole picture against the CPU model of the same arithmetic.
    let expected = model(&src, &lens, None);
    dump("vr", &shot);
    dump("vr-model", &expected);
    let m = mad(&shot, &expected, 0, 0, 2 * EYE_W, H);
    assert!(m < 6.0, "the GL picture differs from the lens model by {m}");

    for (eye, x0) in [(Eye::Left, 0), (Eye::Right, EYE_W)] {
        // The corners of each eye's viewport are black (outside the picture).
        for (cx, cy) in [(2, 2), (EYE_W - 3, 2), (2, H - 3), (EYE_W - 3, H - 3)] {
            let c = px(&shot, x0 + cx, cy);
            assert!(
                c[..3].iter().all(|&v| v < 8),
                "{eye:?} corner {cx},{cy}: {c:?}"
            );
        }
        // The eye picture's centre (its marker) is where the lens centre is.
        let centre = lens.picture_centre_on_screen(eye);
        let (mx, my) = (
            x0 + (centre.x * EYE_W as f32) as u32,
            (centre.y * H as f32) as u32,
        );
        let c = px(&shot, mx, my);
        match eye {
            Eye::Left => assert!(c[1] > 150 && c[0] < 60 && c[2] < 60, "left centre {c:?}"),
            Eye::Right => assert!(c[0] > 150 && c[2] > 150 && c[1] < 60, "right centre {c:?}"),
        }
        // ... and not at the viewport's middle, 8 % of its width (51 px) towards the nose.
        let middle = px(&shot, x0 + EYE_W / 2, my);
        assert_ne!(
            &middle[..3],
            &c[..3],
            "{eye:?}: the marker is at the middle"
        );
        // The straight line at a quarter of the height shows curved, bowed outwards (barrel):
        // higher up at the lens centre's column than towards the sides, each row where the
        // model puts it.
        let mut rows = Vec::new();
        for du in [0.0f32, -0.3, 0.3] {
            let u = centre.x + du;
            let predicted = predicted_row(&lens, eye, u, LINE_V) * H as f32;
            let x = x0 + (u * EYE_W as f32) as u32;
            let seen = darkest_row(
                &shot,
                x,
                (predicted - 12.0).max(0.0) as u32,
                predicted as u32 + 12,
            );
            assert!(
                (seen as f32 - predicted).abs() <= 2.5,
                "{eye:?} column {x}: the line is at row {seen}, the model says {predicted:.1}"
            );
            rows.push(predicted);
        }
        assert!(
            rows[1] - rows[0] > 6.0 && rows[2] - rows[0] > 6.0,
            "{eye:?}: a straight line should curve: rows {rows:?}"
        );
    }

    // The overlay: drawn over the video only while on, once in each eye at the same place
    // (it was drawn flat over the left eye's corner).
    let mut model_text = OverlayModel {
        header: "gl · 1280x720 · vr".into(),
        fps: Some(60.0),
        glass_to_glass_ms: Some(7.9),
        ..Default::default()
    };
    model_text.set_pose_to_photon(None);
    p.set_overlay(Some(&model_text)).unwrap();
    let with = p.snapshot().unwrap().unwrap();
    dump("vr-overlay", &with);
    p.set_overlay(None).unwrap();
    let without = p.snapshot().unwrap().unwrap();
    assert_eq!(
        without, shot,
        "with the overlay off the window is the video alone"
    );
    let [left, right] = [0, EYE_W].map(|x0| text_box(&with, &without, x0, x0 + EYE_W));
    let left = left.expect("no overlay in the left eye");
    let right = right.expect("no overlay in the right eye");
    assert_eq!(
        (left.0 + EYE_W, left.1, left.2 + EYE_W, left.3),
        right,
        "the overlay is not at the same place in both eyes"
    );
    // The same text in both eyes: the text's pixels agree but for anti-aliased edges, which
    // blend with each eye's own video (green on the left, magenta on the right).
    let (mut text, mut differ) = (0u32, 0u32);
    for y in 0..H {
        for x in 0..EYE_W {
            let (l, r) = (
                is_text(&with, &without, x, y),
                is_text(&with, &without, x + EYE_W, y),
            );
            text += u32::from(l || r);
            differ += u32::from(l != r);
        }
    }
    assert!(
        text > 0 && differ * 20 <= text,
        "the eyes' overlays differ at {differ} of {text} text pixels"
    );
    // Near the middle of the eye, inside what the lens shows, not in its corner.
    let centre = (left.0 + left.2) / 2;
    assert!(
        centre.abs_diff(EYE_W / 2) <= EYE_W / 8,
        "overlay box {left:?}"
    );
    assert!(left.1 >= H / 8, "overlay box {left:?}");
    // Light text in it.
    let light = (left.1..left.3)
        .flat_map(|y| (left.0..left.2).map(move |x| (x, y)))
        .filter(|&(x, y)| px(&with, x, y)[..3].iter().all(|&v| v > 200))
        .count();
    assert!(light > 100, "no overlay text: {light} light pixels");
}

/// Whether `a` shows overlay text at x, y over `b` (the same window without the overlay):
/// changed, and light (the panel under the text only darkens).
fn is_text(a: &RgbaImage, b: &RgbaImage, x: u32, y: u32) -> bool {
    let p = px(a, x, y);
    p != px(b, x, y) && p[..3].iter().all(|&v| v > 200)
}

/// The bounding box (x0, y0, x1, y1 exclusive) of the overlay's text in `a` between columns
/// `x0` and `x1` ([`is_text`]).
fn text_box(a: &RgbaImage, b: &RgbaImage, x0: u32, x1: u32) -> Option<(u32, u32, u32, u32)> {
    let mut bx: Option<(u32, u32, u32, u32)> = None;
    for y in 0..a.height {
        for x in x0..x1 {
            if is_text(a, b, x, y) {
                let c = bx.get_or_insert((x, y, x + 1, y + 1));
                *c = (c.0.min(x), c.1.min(y), c.2.max(x + 1), c.3.max(y + 1));
            }
        }
    }
    bx
}

/// The F12 overlay's text grows with the output: at 1080p its lines take 22 px or more each
/// (it was a fixed 13 px font, ~9 px letters on a 1080p screen).
#[test]
fn the_overlay_text_scales_with_the_output_height() {
    if !display() {
        return;
    }
    let (w, h) = (1920, 1080);
    let mut scene = Scene::new(SceneConfig::new(640, 360)).unwrap();
    let mut f = BgraFrame::new(640, 360).unwrap();
    scene.render(0.7, &mut f);
    let pic = decoded(&f);
    let mut p = open(w, h, None);
    p.present(&pic).unwrap();
    let model_text = OverlayModel {
        header: "gl · 640x360".into(),
        fps: Some(60.0),
        glass_to_glass_ms: Some(7.9),
        ..Default::default()
    };
    let lines = model_text.lines().len() as u32;
    p.set_overlay(Some(&model_text)).unwrap();
    let with = p.snapshot().unwrap().unwrap();
    p.set_overlay(None).unwrap();
    let without = p.snapshot().unwrap().unwrap();
    dump("overlay-1080p", &with);
    let b = text_box(&with, &without, 0, w).expect("no overlay drawn");
    let height = b.3 - b.1;
    assert!(
        height >= lines * 22,
        "{lines} lines in {height} px at 1080p: the text is too small ({b:?})"
    );
    assert!(b.0 < 60 && b.1 < 60, "not in the top-left corner: {b:?}");
}

#[test]
fn late_warp_moves_the_picture_by_the_head_rotation() {
    if !display() {
        return;
    }
    let lens = test_lens();
    let pic = decoded(&stereo_test_picture());
    let src = pic.to_bgra().unwrap();
    let mut p = open(2 * EYE_W, H, Some(lens.clone()));
    let fov = Fov::from_horizontal(90f32.to_radians(), EYE_W, H);
    p.present(&pic).unwrap();
    let plain = p.snapshot().unwrap().unwrap();
    // No head motion: the same picture as without warp.
    p.set_warp(Some(Warp::identity(fov)));
    p.redraw().unwrap();
    let identity = p.snapshot().unwrap().unwrap();
    assert!(mad(&identity, &plain, 0, 0, 2 * EYE_W, H) < 0.5);
    // The head turned left by 10° since the frame was rendered: the world moves right.
    let warp = Warp {
        rendered: Quat::IDENTITY,
        latest: Quat::from_rotation_y(10f32.to_radians()),
        fov,
    };
    p.set_warp(Some(warp));
    p.redraw().unwrap();
    let warped = p.snapshot().unwrap().unwrap();
    let m = mad(&warped, &model(&src, &lens, Some(warp)), 0, 0, 2 * EYE_W, H);
    assert!(m < 6.0, "the warped picture differs from the model by {m}");
    // The left eye's green marker moved right of the lens centre.
    let centre_x = (lens.center_of(Eye::Left).x * EYE_W as f32) as u32;
    let green: Vec<u32> = (0..EYE_W)
        .filter(|&x| {
            let c = px(&warped, x, H / 2);
            c[1] > 150 && c[0] < 80
        })
        .collect();
    assert!(!green.is_empty(), "the marker left the view");
    let mean = green.iter().sum::<u32>() as f32 / green.len() as f32;
    assert!(
        mean > centre_x as f32 + 30.0,
        "marker at x {mean}, lens centre {centre_x}"
    );
    // Turned fully around: nothing of the picture is in view.
    p.set_warp(Some(Warp {
        latest: Quat::from_rotation_y(std::f32::consts::PI),
        ..warp
    }));
    p.redraw().unwrap();
    let behind = p.snapshot().unwrap().unwrap();
    assert!(behind
        .data
        .chunks(4)
        .all(|c| c[..3].iter().all(|&v| v == 0)));
}

/// The `_NET_WM_NAME` (UTF-8) of every top-level window (no window manager under Xvfb: SDL's
/// windows are the root's children).
fn net_wm_names() -> Vec<String> {
    use x11rb::connection::Connection;
    use x11rb::protocol::xproto::{AtomEnum, ConnectionExt};
    let (conn, screen) = x11rb::connect(None).expect("the test's X display");
    let atom = |name: &[u8]| conn.intern_atom(false, name).unwrap().reply().unwrap().atom;
    let (net_wm_name, utf8) = (atom(b"_NET_WM_NAME"), atom(b"UTF8_STRING"));
    let root = conn.setup().roots[screen].root;
    let tree = conn.query_tree(root).unwrap().reply().unwrap();
    tree.children
        .iter()
        .filter_map(|&w| {
            let p = conn
                .get_property(false, w, net_wm_name, AtomEnum::ANY, 0, 1024)
                .ok()?
                .reply()
                .ok()?;
            (p.type_ == utf8).then(|| String::from_utf8(p.value).expect("UTF-8"))
        })
        .collect()
}

#[test]
fn the_window_title_reaches_x11_as_utf8() {
    if !display() {
        return;
    }
    let mut p = open(320, 180, None);
    let title = format!("untether — ünïcode · 接続 {}", std::process::id());
    p.set_title(&title);
    // SDL flushes the property to the server before set_title returns; another client sees
    // it once the server has taken the request: asked again until then (at most 2 s).
    let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let mut names = net_wm_names();
    while !names.contains(&title) && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(20));
        names = net_wm_names();
    }
    assert!(
        names.contains(&title),
        "no window titled {title:?}; _NET_WM_NAME of the windows: {names:?}"
    );
}

/// A picture a hardware decoder left on the GPU (DRM PRIME, here on a memfd: this box has no
/// GPU) in the window of the test above: the presenter tries the EGL import, which cannot run
/// here (a GLX context, an EGL without `EGL_EXT_image_dma_buf_import`, or an import refused:
/// a memfd is not a dma-buf), says why once, and shows the picture through system memory;
/// a software picture after it is shown as before.
fn zero_copy_falls_back_and_the_stream_goes_on(
    p: &mut GlPresenter,
    pic: &DecodedFrame,
    before: &RgbaImage,
) {
    let (w, h) = (before.width, before.height);
    assert!(p.takes_gpu_pictures());
    // Pure red and pure blue, BT.601 limited range.
    for (yuv, rgb) in [([81, 90, 240], [255, 0, 0]), ([41, 240, 110], [0, 0, 255])] {
        let on_gpu = memfd_nv12_picture(w, h, yuv).unwrap();
        p.present(&on_gpu).unwrap();
        let shot = p.snapshot().unwrap().unwrap();
        let got = px(&shot, w / 2, h / 2);
        for c in 0..3 {
            assert!(got[c].abs_diff(rgb[c]) <= 6, "{got:?} for {rgb:?}");
        }
    }
    // The NV12 textures and shader variant the imports draw with, filled from memory: a
    // picture half red (left), half blue.
    let (cw, ch) = ((w / 2) as usize, (h / 2) as usize);
    let y: Vec<u8> = (0..h)
        .flat_map(|_| (0..w).map(|x| if x < w / 2 { 81 } else { 41 }))
        .collect();
    let uv: Vec<u8> = (0..ch)
        .flat_map(|_| (0..cw).flat_map(|x| if x < cw / 2 { [90, 240] } else { [240, 110] }))
        .collect();
    p.present_nv12(&y, &uv, w, h).unwrap();
    let shot = p.snapshot().unwrap().unwrap();
    for (x, rgb) in [(w / 4, [255, 0, 0]), (3 * w / 4, [0, 0, 255])] {
        let got = px(&shot, x, h / 2);
        for c in 0..3 {
            assert!(
                got[c].abs_diff(rgb[c]) <= 6,
                "NV12 at x {x}: {got:?} for {rgb:?}"
            );
        }
    }
    let (why, imported) = p.zero_copy_state();
    let why = why.expect("zero-copy cannot run without a GPU");
    println!("zero-copy fallback here: {why}");
    assert!(why.contains("EGL") || why.contains("DMA-BUF"), "{why}");
    assert_eq!(imported, 0);
    // The software path after it: the I420 textures again.
    p.present(pic).unwrap();
    let after = p.snapshot().unwrap().unwrap();
    assert!(
        mad(before, &after, 0, 0, w, h) < 0.5,
        "the same picture, shown the same way"
    );
}

//! Zero-copy encode's fallback (issue 34 item 3), in this process over loopback UDP: an
//! application host asked whether its encoder takes DMA-BUF pictures on a machine without a
//! GPU gets the reason once — ONE line in the host's log and summary, naming the missing
//! render node — a DMA-BUF picture is refused by name, and the frames it then hands over in
//! memory (read back) stream to a client as always. On a machine with a render node and a
//! VA-API encoder the answer differs, and this test only checks that it is the same every time.

use std::os::fd::AsFd;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use untether::client::{run_client_with, ClientOptions};
use untether::host::{InputSpec, SourceSpec};
use untether::{ClientIo, HostOptions, HostSetup};
use untether_media::codec::dma_buf::{DRM_FORMAT_MOD_LINEAR, DRM_FORMAT_XRGB8888};
use untether_media::codec::{DmaBufPicture, DmaBufPlane, InputPicture};

#[test]
fn without_a_gpu_zero_copy_is_off_with_one_line_and_frames_stream_read_back() {
    let (w, h) = (640u32, 360u32);
    let (host_trust, client_trust) = untether::identity::memory_pair();
    let mut o = HostOptions::default();
    o.host.bind = "127.0.0.1:0".into();
    o.video.resolution = untether::config::Resolution {
        width: w,
        height: h,
    };
    o.video.fps = 30;
    let host = untether::Host::start_with(
        o,
        HostSetup {
            source: SourceSpec::App,
            input: InputSpec::Queue,
            encoder_thread: true,
            trust: host_trust,
            ..HostSetup::default()
        },
    )
    .expect("host");
    let gpu = !untether_media::codec::hw::render_nodes().is_empty();
    let first = host.dma_buf_input();
    assert_eq!(host.dma_buf_input(), first, "decided once");
    if !gpu {
        let why = first
            .clone()
            .expect_err("no zero-copy without a render node");
        assert_eq!(why, "no GPU render node: /dev/dri/renderD* is missing");
        // A DMA-BUF picture is refused by name, and nothing is copied.
        let file = std::fs::File::open("/dev/null").unwrap();
        let pic = DmaBufPicture::packed(
            w,
            h,
            DRM_FORMAT_XRGB8888,
            DRM_FORMAT_MOD_LINEAR,
            DmaBufPlane {
                fd: file.as_fd(),
                offset: 0,
                pitch: w * 4,
            },
        );
        let keep: Arc<()> = Arc::new(());
        let e = host
            .publish_dma_buf(&pic, keep.clone(), None, untether::clock::now_us())
            .expect_err("zero-copy is off")
            .to_string();
        assert!(
            e.contains("zero-copy is off") && e.contains("renderD"),
            "{e}"
        );
        assert_eq!(Arc::strong_count(&keep), 1, "the image is not held");
        // The application's own reason after the host's: still one line.
        host.refuse_dma_buf("the Vulkan device has no VK_EXT_external_memory_dma_buf");
    }
    let opts = ClientOptions::headless(host.local_addr(), Duration::from_secs(2));
    let client = std::thread::spawn(move || {
        let io = ClientIo {
            trust: client_trust,
            ..Default::default()
        };
        run_client_with(&opts, io, Arc::new(AtomicBool::new(false)))
    });
    assert!(host.wait_for_client(Duration::from_secs(10)));
    let pixels = vec![90u8; (w * h * 4) as usize];
    let picture = InputPicture::Bgra {
        width: w,
        height: h,
        data: &pixels,
        stride: w as usize * 4,
    };
    while !client.is_finished() {
        assert_eq!(
            host.dma_buf_input(),
            first,
            "the decision holds for the stream"
        );
        host.publish_with_pose_at(&picture, None, untether::clock::now_us())
            .expect("published");
        std::thread::sleep(Duration::from_millis(33));
    }
    let run = client.join().unwrap().expect("client run");
    let summary = host.stop();
    let shown = run.records.iter().filter(|r| r.shown_us > 0).count();
    assert!(shown > 10, "{shown} frames shown");
    let lines: Vec<&String> = summary
        .events
        .iter()
        .filter(|e| e.contains("zero-copy"))
        .collect();
    if !gpu {
        assert_eq!(
            lines,
            vec![
                "zero-copy off (no GPU render node: /dev/dri/renderD* is missing): frames read \
                 back by the CPU"
            ],
        );
    }
}

//! `untether host --source pipe:-` and `untether client --sink pipe:-` in a shell-style
//! pipeline: raw frames in on the host's stdin, decoded frames out on the client's stdout.

use std::io::{Read, Write};
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use untether_media::stamp::{self, Stamp};

fn untether() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_untether"));
    c.env("RUST_LOG", "warn");
    // Keys, allowlists and known hosts of this test run, not the user's.
    c.env(
        "UNTETHER_STATE_DIR",
        std::env::temp_dir().join(format!("untether-cli-state-{}", std::process::id())),
    );
    c
}

#[test]
fn frames_written_to_the_host_stdin_come_out_of_the_client_stdout_in_order_one_at_a_time() {
    let (w, h) = (640usize, 360usize);
    let frame_len = w * h * 3 / 2;
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut host = untether()
        .args([
            "host",
            "--access",
            "open",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--source",
            "pipe:-",
            "--pipe-format",
            "i420",
            "--size",
            "640x360",
            "--fps",
            "30",
            "--bitrate",
            "4M",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        untether_netem::ports::wait_for_udp_port(port, Duration::from_secs(20)),
        "the host never bound udp port {port}"
    );
    let mut client = untether()
        .args(["client", &format!("127.0.0.1:{port}"), "--sink", "pipe:-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_host = host.stdin.take().unwrap();
    let mut from_client = client.stdout.take().unwrap();
    // Lock-step: frame n goes in only after frame n−1 came out. If the host read ahead or
    // either side held frames back, this would stall (and time out) instead of completing.
    let frames = 40u32;
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || loop {
        let mut buf = vec![0u8; frame_len];
        if from_client.read_exact(&mut buf).is_err() {
            return;
        }
        if tx.send(buf).is_err() {
            return;
        }
    });
    let mut y = vec![0u8; w * h];
    let chroma = vec![128u8; w * h / 2];
    let mut got = Vec::new();
    let t = Instant::now();
    for n in 0..frames {
        for (i, px) in y.iter_mut().enumerate() {
            *px = 40 + ((i % w + (i / w) * 3 + n as usize * 5) % 160) as u8;
        }
        stamp::write_luma(
            &mut y,
            w,
            w as u32,
            h as u32,
            &Stamp {
                frame_number: 1000 + n,
                capture_us: n as u64,
                input_seq: 0,
            },
        );
        to_host.write_all(&y).unwrap();
        to_host.write_all(&chroma).unwrap();
        to_host.flush().unwrap();
        let out = rx
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_else(|_| panic!("frame {n} did not come out of the client"));
        let s = stamp::read_plane(&out[..w * h], w, w as u32, h as u32)
            .unwrap_or_else(|| panic!("frame {n}: stamp unreadable"));
        got.push(s.frame_number);
        // Nothing else is waiting: exactly one frame out per frame in.
        assert!(
            rx.try_recv().is_err(),
            "an extra frame came out after frame {n}"
        );
    }
    let expected: Vec<u32> = (1000..1000 + frames).collect();
    assert_eq!(got, expected);
    // End of input: the host says goodbye, both exit cleanly.
    drop(to_host);
    let deadline = Instant::now() + Duration::from_secs(5);
    let (mut hs, mut cs) = (None, None);
    while Instant::now() < deadline && (hs.is_none() || cs.is_none()) {
        hs = hs.or(host.try_wait().unwrap());
        cs = cs.or(client.try_wait().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Reap both (kill is a no-op for one that already exited).
    if hs.is_none() {
        let _ = host.kill();
    }
    if cs.is_none() {
        let _ = client.kill();
    }
    let _ = (host.wait(), client.wait());
    let mut err = String::new();
    if let Some(mut e) = client.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    assert!(hs.is_some_and(|s| s.success()), "host did not end cleanly");
    assert!(
        cs.is_some_and(|s| s.success()),
        "client did not end cleanly: {err}"
    );
    assert!(
        err.contains("glass-to-glass"),
        "the report goes to stderr: {err}"
    );
    eprintln!("{frames} frames in lock-step in {:?}", t.elapsed());
}

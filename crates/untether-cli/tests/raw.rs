//! The raw layer-2 transport as a user runs it: over a veth pair between two network
//! namespaces (root), without CAP_NET_RAW (falls back to UDP, saying so), and with an interface
//! that does not exist (an error naming it).

use std::path::{Path, PathBuf};
use std::process::Command;

fn untether() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_untether"));
    c.env("RUST_LOG", "warn");
    c
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("untether-raw-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The one JSON report a bench run wrote into `dir`.
fn report(dir: &Path) -> serde_json::Value {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap()
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn raw_layer_2_over_a_veth_pair_shows_99_percent_of_frames() {
    if !is_root() {
        eprintln!("skipped: needs root (network namespaces, CAP_NET_RAW); CI runs as root");
        return;
    }
    let out = tmp("veth");
    // The command (no picture-quality batches: they only cost CPU here).
    let o = untether()
        .args(["bench", "--netns", "--transport", "raw", "--duration", "5"])
        .args(["--quality-batch", "0", "--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let r = report(&out);
    let link = &r["network"]["link"];
    for side in ["client", "host"] {
        assert_eq!(link[side]["transport"], "raw", "{side}: {link}");
        assert_eq!(link[side]["configured"], "raw", "{side}: {link}");
        assert_eq!(link[side]["unexpected_mac"], 0, "{side}: {link}");
        assert!(
            link[side]["frames_received"].as_u64().unwrap() > 0,
            "{link}"
        );
    }
    assert_eq!(r["config"]["transport"], "raw-netns-veth");
    let f = &r["frames"];
    let (sent, shown) = (f["sent"].as_u64().unwrap(), f["shown"].as_u64().unwrap());
    assert!(sent > 100, "{f}");
    assert!(
        shown as f64 >= 0.99 * sent as f64,
        "{shown} of {sent} frames shown: {f}"
    );
}

#[test]
fn without_cap_net_raw_the_session_stays_on_udp_and_says_so() {
    if !is_root() {
        eprintln!("skipped: needs root (network namespaces; the test drops CAP_NET_RAW itself)");
        return;
    }
    let out = tmp("nocap");
    // setpriv (util-linux): the bench runs as root without CAP_NET_RAW in its bounding set.
    let o = Command::new("setpriv")
        .args(["--bounding-set", "-net_raw", "--inh-caps", "-net_raw", "--"])
        .arg(env!("CARGO_BIN_EXE_untether"))
        .env("RUST_LOG", "warn")
        .args(["bench", "--netns", "--transport", "raw", "--duration", "2"])
        .args([
            "--resolution",
            "640x360",
            "--quality-batch",
            "0",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    // One line per side, naming the capability.
    let lines: Vec<&str> = t.lines().filter(|l| l.contains("CAP_NET_RAW")).collect();
    assert_eq!(lines.len(), 2, "{t}");
    assert!(lines.iter().any(|l| l.contains("host:")), "{t}");
    assert!(lines.iter().any(|l| l.contains("client:")), "{t}");
    assert!(lines.iter().all(|l| l.contains("staying on UDP")), "{t}");
    let r = report(&out);
    let link = &r["network"]["link"];
    for side in ["client", "host"] {
        assert_eq!(link[side]["transport"], "udp", "{link}");
        assert_eq!(link[side]["configured"], "raw", "{link}");
        assert!(
            link[side]["note"]
                .as_str()
                .is_some_and(|n| n.contains("CAP_NET_RAW")),
            "{link}"
        );
    }
    assert_eq!(r["config"]["transport"], "udp-netns-veth");
    assert!(
        r["frames"]["shown"].as_u64().unwrap() > 30,
        "{}",
        r["frames"]
    );
}

#[test]
fn an_interface_that_does_not_exist_names_itself() {
    let o = untether()
        .args(["host", "--bind", "127.0.0.1:0", "--transport", "raw"])
        .args(["--interface", "nope0", "--duration", "1"])
        .output()
        .unwrap();
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        t.contains("network.interface") && t.contains("--interface") && t.contains("nope0"),
        "{t}"
    );
    // A name that cannot be an interface is refused before anything opens.
    let o = untether()
        .args(["host", "--bind", "127.0.0.1:0", "--transport", "raw"])
        .args(["--interface", "a/b", "--duration", "1"])
        .output()
        .unwrap();
    let t = text(&o);
    assert!(
        !o.status.success() && t.contains("network.interface"),
        "{t}"
    );
}

//! Getting connected as a new user does (issue 26): the host found on the local network
//! (mDNS, on one machine and across two network namespaces, again after its address moved),
//! a client that waits for its approval and for a host that restarts, a failed connect that
//! says only why, and roles that survive a host restart.

mod common;

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::Proc;
use untether_netem::netns::{Side, Testbed};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_untether")
}

/// A state directory of this test run (mode 0700, as untether wants it).
fn state(name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("untether-gc-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

fn untether(dir: &Path) -> Command {
    let mut c = Command::new(bin());
    c.env("RUST_LOG", "info").arg("--state-dir").arg(dir);
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A host of the test scene on `bind` (still: the held picture and the live one agree).
/// `c` (program, arguments, environment) run on `side` of the testbed.
fn in_ns(tb: &Testbed, side: Side, c: Command) -> Command {
    let mut w = tb.command(side, c.get_program());
    w.args(c.get_args());
    for (k, v) in c.get_envs() {
        if let Some(v) = v {
            w.env(k, v);
        }
    }
    w
}

fn host(dir: &Path, bind: &str, extra: &[&str]) -> Command {
    let mut c = untether(dir);
    c.args(["host", "--bind", bind, "--spin", "0", "--walk", "0"])
        .args(["--resolution", "640x360", "--fps", "30"])
        .args(extra);
    c
}

/// `frames: … complete N · decoded M …` of a client's printed report.
fn complete_and_decoded(report: &str) -> (u64, u64) {
    let field = |name: &str| {
        report
            .split(&format!("{name} "))
            .nth(1)
            .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {name:?} count in:\n{report}"))
    };
    (field("complete"), field("decoded"))
}

#[test]
fn a_failed_connect_says_why_without_an_empty_report() {
    let dir = state("refused");
    let port = free_udp_port();
    let o = untether(&dir)
        .args(["client", &format!("127.0.0.1:{port}"), "--headless"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.trim().is_empty(),
        "no latency report for a run that never connected:\n{stdout}"
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("untether: error:") && stderr.contains("refused"),
        "{stderr}"
    );
}

#[test]
fn the_host_is_found_on_one_machine_by_discover_and_by_name() {
    let (hd, cd) = (state("one-host"), state("one-client"));
    let name = format!("gc-one-{}", std::process::id());
    let port = free_udp_port();
    let mut h = Proc::spawn(host(
        &hd,
        &format!("0.0.0.0:{port}"),
        &["--access", "open", "--host-name", &name],
    ));
    let (_, id) = h.wait_for("identity ", Duration::from_secs(10));
    let fp = id
        .split("identity ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap()
        .trim_end_matches(',')
        .to_string();
    h.wait_for("advertised on the local network", Duration::from_secs(5));
    let o = untether(&cd)
        .args(["discover", "--wait", "1500ms", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let list: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let me = list
        .as_array()
        .and_then(|a| a.iter().find(|h| h["name"] == name.as_str()))
        .unwrap_or_else(|| panic!("{name} not listed: {list}"));
    assert_eq!(me["fingerprint"], fp.as_str());
    assert_eq!(me["paired"], false);
    assert!(me["address"]
        .as_str()
        .is_some_and(|a| a.ends_with(&format!(":{port}"))));
    // A name no DNS server knows: found on the local network, connected, pinned by it.
    let o = untether(&cd)
        .args(["client", &name, "--headless", "--duration", "700ms"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("found \"{name}\"")),
        "{}",
        text(&o)
    );
    let known = std::fs::read_to_string(cd.join("known_hosts.json")).unwrap();
    assert!(known.contains(&format!("\"{name}\"")), "{known}");
    let (_, _, log) = h.interrupt();
    assert!(log.contains("connected from"), "{log}");
}

/// Issue 33, item 2: a forged advertisement (the real host's name and key, at an impostor's
/// address where another host answers) leads nowhere whichever way the host is named — by
/// fingerprint, by key, by name — and nothing is pinned; with no address, an unpaired host is
/// not chosen on its own.
#[test]
fn a_forged_advertisement_of_a_hosts_name_and_key_leads_nowhere() {
    use untether::discovery::{Advert, Advertiser};
    use untether::identity::{key_hex, Role, StateDir};
    let (real, cd, ad) = (
        state("forged-real"),
        state("forged-client"),
        state("forged-attacker"),
    );
    let name = format!("gc-forged-{}", std::process::id());
    // The real host's key (the host itself need not run: its key is what is claimed).
    let key = StateDir::at(&real)
        .load_or_create_identity(Role::Host)
        .unwrap()
        .public;
    let fp = untether_proto::fingerprint(&key);
    // The impostor: a host of its own key, open to anyone, advertising nothing itself.
    let port = free_udp_port();
    let mut attacker = Proc::spawn(host(
        &ad,
        &format!("127.0.0.1:{port}"),
        &["--access", "open", "--no-advertise"],
    ));
    attacker.wait_for("identity ", Duration::from_secs(10));
    assert!(untether_netem::ports::wait_for_udp_port(
        port,
        Duration::from_secs(10)
    ));
    let _forged = Advertiser::start(&Advert {
        name: name.clone(),
        key,
        port,
        addr: Some([127, 0, 0, 1].into()),
        ipv4_only: true,
        web: None,
        rtsp: None,
        access: "open".into(),
    })
    .unwrap();
    for how in [fp.clone(), key_hex(&key), name.clone()] {
        let o = untether(&cd)
            .args(["client", &how, "--headless", "--duration", "700ms"])
            .output()
            .unwrap();
        let t = text(&o);
        assert!(!o.status.success(), "named by {how}: {t}");
        assert!(
            t.contains("could not prove the key it was chosen by") && t.contains(&fp),
            "named by {how}: {t}"
        );
    }
    let known = std::fs::read_to_string(cd.join("known_hosts.json")).unwrap_or_default();
    assert!(
        known.trim().is_empty() || known.trim() == "[]",
        "pinned: {known}"
    );
    let o = untether(&cd)
        .args(["client", "--headless", "--duration", "700ms"])
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("has not paired with yet"), "{}", text(&o));
    let (_, _, log) = attacker.interrupt();
    assert!(!log.contains("connected from"), "{log}");
}

/// The two-machine case: the host in one namespace, the client in the other, joined
/// by a veth pair (multicast crosses it); then the host's address changes and the paired
/// client finds it again by its key.
#[test]
fn discovery_across_two_namespaces_finds_a_moved_host_by_its_key() {
    if !is_root() {
        eprintln!("skipped: needs root for network namespaces");
        return;
    }
    let tb = Testbed::create(None).expect("testbed");
    let (hd, cd) = (state("ns-host"), state("ns-client"));
    let name = format!("gc-ns-{}", std::process::id());
    let in_ns = |side: Side, c: Command| in_ns(&tb, side, c);
    let start_host = || {
        let mut h = Proc::spawn(in_ns(
            Side::Host,
            host(
                &hd,
                "0.0.0.0:9710",
                &["--access", "open", "--host-name", &name],
            ),
        ));
        h.wait_for("advertised on the local network", Duration::from_secs(10));
        h
    };
    let h = start_host();
    let mut discover = untether(&cd);
    discover.args(["discover", "--wait", "3s"]);
    let o = in_ns(Side::Client, discover).output().unwrap();
    let listing = text(&o);
    assert!(o.status.success(), "{listing}");
    let row = listing
        .lines()
        .find(|l| l.starts_with(&name))
        .unwrap_or_else(|| panic!("{name} not listed:\n{listing}"));
    assert!(
        row.contains(&format!("{}:9710", tb.host_addr())) && row.contains(" no "),
        "{row}"
    );
    // No address: the only host there, but not paired yet: named, not chosen on its own.
    let fp = row.split_whitespace().nth(2).unwrap().to_string();
    let mut client = untether(&cd);
    client.args(["client", "--headless", "--duration", "500ms"]);
    let o = in_ns(Side::Client, client).output().unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("has not paired with yet")
            && text(&o).contains(&format!("untether client {fp}")),
        "{}",
        text(&o)
    );
    // Named by the fingerprint it showed: connected, and paired.
    let mut client = untether(&cd);
    client.args(["client", &fp, "--headless", "--duration", "500ms"]);
    let o = in_ns(Side::Client, client).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("connected to {}:9710", tb.host_addr())),
        "{}",
        text(&o)
    );
    // Paired now: a bare `untether client` chooses it.
    let mut client = untether(&cd);
    client.args(["client", "--headless", "--duration", "500ms"]);
    let o = in_ns(Side::Client, client).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    drop(h.interrupt());
    // The host moves to another network; the client's pin names the old address.
    let dev = |ns: &str| {
        let o = Command::new("ip")
            .args(["-n", ns, "-o", "link", "show", "type", "veth"])
            .output()
            .unwrap();
        let l = String::from_utf8_lossy(&o.stdout).to_string();
        l.split(": ")
            .nth(1)
            .and_then(|d| d.split('@').next())
            .unwrap()
            .to_string()
    };
    let (hns, cns) = (tb.namespace(Side::Host), tb.namespace(Side::Client));
    let ip = |args: &[&str]| {
        let s = Command::new("ip").args(args).status().unwrap();
        assert!(s.success(), "ip {args:?}");
    };
    let (hdev, cdev) = (dev(hns), dev(cns));
    ip(&["-n", cns, "addr", "add", "10.99.77.2/24", "dev", &cdev]);
    ip(&["-n", hns, "addr", "add", "10.99.77.1/24", "dev", &hdev]);
    ip(&[
        "-n",
        hns,
        "addr",
        "del",
        &format!("{}/30", tb.host_addr()),
        "dev",
        &hdev,
    ]);
    let h = start_host();
    let mut client = untether(&cd);
    client.args(["client", &name, "--headless", "--duration", "500ms"]);
    let o = in_ns(Side::Client, client).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("connected to 10.99.77.1:9710"),
        "{}",
        text(&o)
    );
    let known = std::fs::read_to_string(cd.join("known_hosts.json")).unwrap();
    assert!(
        known.contains("10.99.77.1:9710"),
        "the pin moved with the host: {known}"
    );
    let mut discover = untether(&cd);
    discover.args(["discover", "--wait", "3s"]);
    let o = in_ns(Side::Client, discover).output().unwrap();
    assert!(
        text(&o)
            .lines()
            .any(|l| l.starts_with(&name) && l.contains(" yes ")),
        "paired: {}",
        text(&o)
    );
    drop(h.interrupt());
}

/// README's "Two machines" section, walked from clean state directories on two network
/// namespaces: `untether host --dashboard`, `untether discover`, `untether client FINGERPRINT`
/// waiting until `untether pair approve` on the host, streaming; the client's report names the
/// host's encoder and its figures match what the host's report says it sent that client.
#[test]
fn readmes_two_machines_walk_ends_streaming_with_reports_that_agree() {
    if !is_root() {
        eprintln!("skipped: needs root for network namespaces");
        return;
    }
    let tb = Testbed::create(None).expect("testbed");
    let (hd, cd) = (state("walk-host"), state("walk-client"));
    let name = format!("gc-walk-{}", std::process::id());
    let in_ns = |side: Side, c: Command| in_ns(&tb, side, c);
    let host_report = hd.join("host-report.json");
    let client_report = cd.join("client-report.json");
    let mut h = untether(&hd);
    h.args([
        "host",
        "--dashboard",
        "--host-name",
        &name,
        "--spin",
        "0",
        "--walk",
        "0",
    ])
    .args(["--resolution", "640x360", "--fps", "30", "--report"])
    .arg(&host_report);
    let mut h = Proc::spawn(in_ns(Side::Host, h));
    h.wait_for("advertised on the local network", Duration::from_secs(10));
    let mut discover = untether(&cd);
    discover.args(["discover", "--wait", "3s"]);
    let o = in_ns(Side::Client, discover).output().unwrap();
    let listing = text(&o);
    let row = listing
        .lines()
        .find(|l| l.starts_with(&name))
        .unwrap_or_else(|| panic!("{name} not listed:\n{listing}"));
    let fp = row.split_whitespace().nth(2).unwrap().to_string();
    let mut client = untether(&cd);
    client
        .args(["client", &fp, "--headless", "--duration", "4", "--report"])
        .arg(&client_report);
    let mut c = Proc::spawn(in_ns(Side::Client, client));
    let (_, waiting) = c.wait_for("has not approved this client yet", Duration::from_secs(10));
    let client_fp = waiting
        .split("untether pair approve ")
        .nth(1)
        .and_then(|s| s.split('`').next())
        .unwrap_or_else(|| panic!("no fingerprint to approve in {waiting:?}"))
        .to_string();
    let o = untether(&hd)
        .args(["pair", "approve", &client_fp])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let (ok, _, log) = c.finish();
    assert!(ok, "{log}");
    let (_, _, host_log) = h.interrupt();
    let read = |p: &Path| -> serde_json::Value {
        let t = std::fs::read_to_string(p)
            .unwrap_or_else(|e| panic!("{}: {e}\n{host_log}", p.display()));
        serde_json::from_str(&t).expect("JSON")
    };
    let (cr, hr) = (read(&client_report), read(&host_report));
    // The same stream, named alike on both sides.
    for k in [
        "width",
        "height",
        "fps",
        "codec",
        "encoder",
        "preset",
        "conversion",
    ] {
        assert_eq!(cr["config"][k], hr["config"][k], "config.{k}");
    }
    let clients = hr["clients"].as_array().expect("the host's clients");
    assert_eq!(clients.len(), 1, "{clients:?}");
    let sent = clients[0]["frames_sent"].as_u64().unwrap_or(0);
    let complete = cr["frames"]["complete"].as_u64().unwrap_or(0);
    let shown = cr["frames"]["shown"].as_u64().unwrap_or(0);
    let captured = cr["frames"]["captured"].as_u64().unwrap_or(0);
    eprintln!(
        "host sent {sent}; the client completed {complete}, showed {shown}; host frames over \
         its session {captured}"
    );
    assert!(
        shown > 60 && complete <= sent && complete * 10 >= sent * 9,
        "sent {sent}, complete {complete}"
    );
    // The host's counts over the client's session, from its FrameTimings: about what it sent.
    assert!(
        captured.abs_diff(sent) <= 5,
        "captured {captured}, sent {sent}"
    );
    let bytes_sent = clients[0]["bytes_sent"].as_u64().unwrap_or(0) as f64;
    let bytes_received = cr["network"]["bytes_received"].as_u64().unwrap_or(0) as f64;
    assert!(
        (bytes_received - bytes_sent).abs() <= 0.1 * bytes_sent,
        "received {bytes_received} of {bytes_sent} bytes"
    );
}

/// The patient client: it waits for approval (saying which host and how to approve) and is
/// in within a second of `untether pair approve`; after the host's Ctrl-C it waits and
/// reconnects to the restarted host; its report counts every session's frames.
#[test]
fn a_client_waits_for_approval_and_for_a_restarted_host() {
    let (hd, cd) = (state("wait-host"), state("wait-client"));
    let port = free_udp_port();
    let bind = format!("127.0.0.1:{port}");
    let mut h = Proc::spawn(host(&hd, &bind, &["--no-advertise"]));
    h.wait_for("listening on udp", Duration::from_secs(10));
    let mut client = untether(&cd);
    client.args(["client", &bind, "--duration", "30", "--headless"]);
    let mut c = Proc::spawn(client);
    let (_, waiting) = c.wait_for("has not approved this client yet", Duration::from_secs(10));
    let fp = waiting
        .split("untether pair approve ")
        .nth(1)
        .and_then(|s| s.split('`').next())
        .unwrap_or_else(|| panic!("no fingerprint to approve in {waiting:?}"))
        .to_string();
    let o = untether(&hd)
        .args(["pair", "approve", &fp])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let approved = Instant::now();
    let (t, _) = c.wait_for("connected to", Duration::from_secs(5));
    let took = t.saturating_duration_since(approved);
    assert!(
        took < Duration::from_secs(1),
        "in {took:?} after the approval, not within 1 s"
    );
    eprintln!("the waiting client was in {took:?} after `untether pair approve` returned");
    c.wait_for("approved by the host", Duration::from_secs(2));
    std::thread::sleep(Duration::from_millis(1500));
    drop(h.interrupt());
    c.wait_for("waiting for it to come back", Duration::from_secs(5));
    let mut h = Proc::spawn(host(&hd, &bind, &["--no-advertise"]));
    h.wait_for("listening on udp", Duration::from_secs(10));
    c.wait_for("reconnected to", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(300));
    let (ok, report, log) = c.interrupt();
    assert!(ok, "{log}");
    let (complete, decoded) = complete_and_decoded(&report);
    assert!(
        complete >= decoded && decoded > 0,
        "the report counts both sessions: complete {complete}, decoded {decoded}\n{report}"
    );
    drop(h.interrupt());
}

/// Roles survive a host restart by key: the controller of the host's last run gets control
/// back when it returns, even after a viewer that came back first (which watches meanwhile).
#[test]
fn a_restarted_host_gives_control_back_to_its_controller_whoever_returns_first() {
    let (hd, ad, bd) = (state("roles-host"), state("roles-a"), state("roles-b"));
    let port = free_udp_port();
    let bind = format!("127.0.0.1:{port}");
    let open = ["--no-advertise", "--access", "open"];
    let client = |dir: &Path, name: &str| {
        let mut c = untether(dir);
        c.args([
            "client",
            &bind,
            "--duration",
            "30",
            "--headless",
            "--name",
            name,
        ]);
        Proc::spawn(c)
    };
    let mut h = Proc::spawn(host(&hd, &bind, &open));
    h.wait_for("listening on udp", Duration::from_secs(10));
    let a = client(&ad, "alpha");
    h.wait_for("\"alpha\"", Duration::from_secs(10));
    let mut b = client(&bd, "beta");
    let (_, joined) = h.wait_for("\"beta\"", Duration::from_secs(10));
    assert!(joined.contains("as viewer"), "{joined}");
    // The host restarts; the controller's machine is slower to come back than the viewer's.
    drop(h.interrupt());
    drop(a.interrupt());
    let mut h = Proc::spawn(host(&hd, &bind, &open));
    h.wait_for("control is kept for", Duration::from_secs(10));
    b.wait_for("reconnected to", Duration::from_secs(10));
    let (_, back) = h.wait_for("\"beta\"", Duration::from_secs(2));
    assert!(
        back.contains("as viewer"),
        "the viewer came back first: {back}"
    );
    let a = client(&ad, "alpha");
    let (_, again) = h.wait_for("\"alpha\"", Duration::from_secs(10));
    assert!(
        again.contains("is now the controller") || again.contains("as controller"),
        "{again}"
    );
    std::thread::sleep(Duration::from_millis(300));
    // The viewer leaves first (the controller leaving would rightly hand it control).
    drop(b.interrupt());
    drop(a.interrupt());
    let (_, _, log) = h.interrupt();
    assert!(
        !log.lines()
            .any(|l| l.contains("\"beta\"") && l.contains("is now the controller")),
        "the viewer never controlled the restarted host:\n{log}"
    );
}

/// `client --resolution --fps --bitrate`: within the host's limits the stream is what was
/// asked (the picture decoded at that size); above them the host clamps, and both sides say
/// so. One host for both runs.
#[test]
fn a_client_gets_the_stream_it_asks_for_within_the_hosts_limits() {
    let (hd, cd) = (state("ask-host"), state("ask-client"));
    let port = free_udp_port();
    let bind = format!("127.0.0.1:{port}");
    let mut h = Proc::spawn(host(&hd, &bind, &["--no-advertise", "--access", "open"]));
    h.wait_for("listening on udp", Duration::from_secs(10));
    let frame = std::env::temp_dir().join(format!("untether-gc-{}-ask.ppm", std::process::id()));
    let o = untether(&cd)
        .args(["client", &bind, "--headless", "--duration", "1500ms"])
        .args([
            "--resolution",
            "320x180",
            "--fps",
            "15",
            "--bitrate",
            "400k",
        ])
        .arg("--save-frame")
        .arg(&frame)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("320x180 @ 15 fps, h264, 400 kbit/s"),
        "{}",
        text(&o)
    );
    // Its report names the host's encoder (the one that opened), preset and conversion, told
    // beside the Accept: it was "unknown".
    assert!(
        text(&o).contains("h264 by libx264 (ultrafast preset, simd conversion"),
        "{}",
        text(&o)
    );
    let ppm = std::fs::read(&frame).expect("the last picture was saved");
    assert!(
        ppm.starts_with(b"P6\n320 180\n"),
        "decoded at the size asked for"
    );
    h.wait_for(
        "asked for 320x180 @ 15 fps, 400 kbit/s: streaming 320x180",
        Duration::from_secs(3),
    );
    let o = untether(&cd)
        .args(["client", &bind, "--headless", "--duration", "800ms"])
        .args(["--resolution", "1080p", "--fps", "120"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("the host grants 640x360 for 1920x1080, 30 fps for 120"),
        "{}",
        text(&o)
    );
    h.wait_for(
        "above this host's limits (640x360 @ 30 fps",
        Duration::from_secs(3),
    );
    drop(h.interrupt());
}

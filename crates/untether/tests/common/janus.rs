//! Janus 1.1.2 (Debian's `janus`) with its VideoRoom, behind `simple-whip-server` (Debian's,
//! on node.js), started here with their own configuration files and free ports in the client
//! namespace of a two-namespace testbed (Janus gathers ICE candidates on every interface but
//! loopback, so it needs one: the testbed's veth, which exists only on this machine), and
//! stopped (their process groups killed) when dropped. Never the system's configuration or
//! default ports.

use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::browser::scratch_dir;
use untether_netem::netns::{Side, Testbed};

/// The VideoRoom room the host publishes into.
pub const ROOM: u32 = 1234;

const PLUGINS: &str = "/usr/lib/x86_64-linux-gnu/janus";

/// Where simple-whip-server's sources are: Debian's package, or the copy `scripts/setup.sh
/// browser` unpacks when a non-Debian node.js keeps apt from installing it.
fn whip_sources() -> Option<PathBuf> {
    [
        "/usr/share/simple-whip-server/src",
        "/usr/local/lib/untether/simple-whip-server/usr/share/simple-whip-server/src",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.join("server.js").is_file())
}

fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

fn spawn(cmd: &mut Command, log: &Path) -> std::io::Result<Child> {
    let f = std::fs::File::create(log)?;
    cmd.stdin(Stdio::null())
        .stdout(f.try_clone()?)
        .stderr(f)
        .process_group(0)
        .spawn()
}

fn kill(child: &mut Child) {
    let pgid = child.id() as i32;
    // SAFETY: kill takes no pointers; the group is the child's own.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
    let _ = child.wait();
}

fn wait_port(ip: std::net::Ipv4Addr, port: u16, timeout: Duration) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if TcpStream::connect((ip, port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn http_post_json(ip: std::net::Ipv4Addr, port: u16, path: &str, body: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s = TcpStream::connect((ip, port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let req = format!(
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp.split_whitespace().nth(1)?.parse().ok()
}

pub struct Janus {
    janus: Child,
    whip: Child,
    dir: PathBuf,
    ip: std::net::Ipv4Addr,
    http_port: u16,
    whip_port: u16,
}

impl Janus {
    /// Starts Janus and the WHIP server in `tb`'s client namespace (call it from a thread in
    /// the host namespace); None (after one line saying why) when they are not installed.
    pub fn start(tb: &Testbed) -> Option<Janus> {
        let ip = tb.client_addr();
        let janus_bin = Path::new("/usr/bin/janus");
        let Some(whip_src) = whip_sources() else {
            println!("skipped: simple-whip-server is not installed (scripts/setup.sh browser installs it)");
            return None;
        };
        if !janus_bin.is_file() || !Path::new(PLUGINS).is_dir() {
            println!("skipped: janus is not installed (scripts/setup.sh browser installs it)");
            return None;
        }
        let dir = scratch_dir("janus");
        let http_port = free_tcp_port();
        let ws_port = free_tcp_port();
        let whip_port = free_tcp_port();
        // An RTP range of its own: above the usual ephemeral ports' start, per process.
        let base = 20_000 + (std::process::id() % 400) as u16 * 50;
        let conf = |name: &str, text: String| std::fs::write(dir.join(name), text).unwrap();
        conf(
            "janus.jcfg",
            format!(
                r#"general: {{
    configs_folder = "{d}"
    plugins_folder = "{PLUGINS}/plugins"
    transports_folder = "{PLUGINS}/transports"
    events_folder = "{PLUGINS}/events"
    loggers_folder = "{PLUGINS}/loggers"
    debug_level = 4
    session_timeout = 60
}}
media: {{
    rtp_port_range = "{base}-{end}"
}}
nat: {{
    ice_enforce_list = "{ip}"
    ignore_mdns = true
}}
plugins: {{
    disable = "libjanus_audiobridge.so,libjanus_duktape.so,libjanus_echotest.so,libjanus_lua.so,libjanus_nosip.so,libjanus_recordplay.so,libjanus_sip.so,libjanus_streaming.so,libjanus_textroom.so,libjanus_videocall.so,libjanus_voicemail.so"
}}
transports: {{
    disable = "libjanus_pfunix.so,libjanus_mqtt.so,libjanus_nanomsg.so,libjanus_rabbitmq.so"
}}
loggers: {{
    disable = "libjanus_jsonlog.so"
}}
events: {{
    broadcast = false
    disable = "libjanus_gelfevh.so,libjanus_mqttevh.so,libjanus_nanomsgevh.so,libjanus_rabbitmqevh.so,libjanus_sampleevh.so,libjanus_wsevh.so"
}}
"#,
                d = dir.display(),
                end = base + 49
            ),
        );
        conf(
            "janus.transport.http.jcfg",
            format!(
                r#"general: {{
    json = "compact"
    base_path = "/janus"
    http = true
    port = {http_port}
    https = false
}}
admin: {{
    admin_http = false
    admin_https = false
}}
cors: {{
}}
"#
            ),
        );
        conf(
            "janus.transport.websockets.jcfg",
            format!(
                r#"general: {{
    json = "compact"
    ws = true
    ws_port = {ws_port}
    ws_ip = "127.0.0.1"
    wss = false
}}
admin: {{
    admin_ws = false
    admin_wss = false
}}
"#
            ),
        );
        conf(
            "janus.plugin.videoroom.jcfg",
            format!(
                r#"general: {{
}}
room-{ROOM}: {{
    description = "untether"
    publishers = 1
    bitrate = 0
    fir_freq = 0
    videocodec = "h264"
    h264_profile = "42e01f"
    audiocodec = "opus"
}}
"#
            ),
        );
        let mut janus = match spawn(
            tb.command(Side::Client, janus_bin)
                .arg(format!("--configs-folder={}", dir.display()))
                .arg(format!("--config={}", dir.join("janus.jcfg").display()))
                .arg("--disable-colors"),
            &dir.join("janus.log"),
        ) {
            Ok(c) => c,
            Err(e) => {
                println!("skipped: janus cannot start: {e}");
                return None;
            }
        };
        if !wait_port(ip, http_port, Duration::from_secs(15)) {
            let log = std::fs::read_to_string(dir.join("janus.log")).unwrap_or_default();
            kill(&mut janus);
            panic!("janus did not open its ports:\n{log}");
        }
        // simple-whip-server, its sources copied beside a configuration of our own.
        let wdir = dir.join("whip");
        std::fs::create_dir_all(wdir.join("src")).unwrap();
        std::fs::create_dir_all(wdir.join("web")).unwrap();
        for f in ["server.js", "whip-janus.js"] {
            std::fs::copy(whip_src.join(f), wdir.join("src").join(f)).unwrap();
        }
        std::fs::write(
            wdir.join("src/config.js"),
            format!(
                "module.exports = {{ janus: {{ address: 'ws://127.0.0.1:{ws_port}' }}, port: {whip_port}, \
                 rest: '/whip', allowTrickle: true, strictETags: false, iceServers: [] }};\n"
            ),
        )
        .unwrap();
        let arch = "/usr/lib/x86_64-linux-gnu/nodejs";
        let private = "/usr/local/lib/untether/simple-whip-server";
        let node_path = format!(
            "/usr/share/nodejs:/usr/lib/nodejs:{arch}:{private}/usr/share/nodejs:{private}{arch}"
        );
        let mut whip = match spawn(
            tb.command(Side::Client, "node")
                .arg("src/server.js")
                .current_dir(&wdir)
                .env("NODE_PATH", node_path)
                .env("DEBUG", "whip:*,-whip:debug"),
            &dir.join("whip.log"),
        ) {
            Ok(c) => c,
            Err(e) => {
                kill(&mut janus);
                println!("skipped: simple-whip-server cannot start (node): {e}");
                return None;
            }
        };
        if !wait_port(ip, whip_port, Duration::from_secs(15)) {
            let log = std::fs::read_to_string(dir.join("whip.log")).unwrap_or_default();
            kill(&mut whip);
            kill(&mut janus);
            panic!("simple-whip-server did not open its port:\n{log}");
        }
        let j = Janus {
            janus,
            whip,
            dir,
            ip,
            http_port,
            whip_port,
        };
        let created = http_post_json(
            ip,
            whip_port,
            "/whip/create",
            &format!(r#"{{"id":"untether","room":{ROOM}}}"#),
        );
        assert_eq!(created, Some(200), "{}", j.log_tail());
        Some(j)
    }

    /// The WHIP endpoint the host publishes to.
    pub fn whip_endpoint(&self) -> String {
        format!(
            "http://{}:{}/whip/endpoint/untether",
            self.ip, self.whip_port
        )
    }

    /// Janus's HTTP API (the viewer page talks to it).
    pub fn http_api(&self) -> String {
        format!("http://{}:{}/janus", self.ip, self.http_port)
    }

    pub fn log_tail(&self) -> String {
        let tail = |f: &str| {
            let t = std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
            let lines: Vec<&str> = t.lines().filter(|l| !l.contains("still waiting")).collect();
            let head = lines.len().min(40);
            let tail = lines.len().saturating_sub(30).max(head);
            format!(
                "{}\n…\n{}",
                lines[..head].join("\n"),
                lines[tail..].join("\n")
            )
        };
        format!(
            "--- janus\n{}\n--- whip\n{}",
            tail("janus.log"),
            tail("whip.log")
        )
    }
}

impl Drop for Janus {
    fn drop(&mut self) {
        kill(&mut self.whip);
        kill(&mut self.janus);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

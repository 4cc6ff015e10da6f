//! The desktop portal on the headless sway: a private session bus (`dbus-daemon --session`),
//! PipeWire and WirePlumber, xdg-desktop-portal-wlr configured to pick HEADLESS-1 without a
//! chooser dialog (`chooser_type=none`), and xdg-desktop-portal itself, all in a private
//! runtime directory and killed by their pids when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::Sway;

/// A running portal stack for one compositor.
pub struct PortalDesktop {
    children: Vec<(String, Child)>,
    dir: PathBuf,
    /// The session bus's address (for `DBUS_SESSION_BUS_ADDRESS`).
    pub bus: String,
}

const PROGRAMS: [&str; 5] = [
    "dbus-daemon",
    "pipewire",
    "wireplumber",
    "/usr/libexec/xdg-desktop-portal-wlr",
    "/usr/libexec/xdg-desktop-portal",
];

impl PortalDesktop {
    /// Starts the stack on `sway` and waits until the portal's ScreenCast answers, or says in
    /// one line why it cannot here.
    pub fn start(sway: &Sway) -> Result<PortalDesktop, String> {
        if let Some(p) = PROGRAMS
            .iter()
            .find(|p| which(p).is_none() && !Path::new(p).exists())
        {
            return Err(format!(
                "{p} is not installed (scripts/setup.sh installs it)"
            ));
        }
        let dir = std::env::temp_dir().join(format!("untether-portal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (run, cfg, data) = (dir.join("run"), dir.join("config"), dir.join("data"));
        for d in [&run, &cfg.join("xdg-desktop-portal-wlr"), &data] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        std::fs::set_permissions(&run, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .map_err(|e| e.to_string())?;
        std::fs::write(
            cfg.join("xdg-desktop-portal-wlr/config"),
            "[screencast]\nchooser_type=none\noutput_name=HEADLESS-1\n",
        )
        .map_err(|e| e.to_string())?;
        let bus = format!("unix:path={}", run.join("bus").display());
        let mut desk = PortalDesktop {
            children: Vec::new(),
            dir: dir.clone(),
            bus: bus.clone(),
        };
        let env = |c: &mut Command| {
            c.env("XDG_RUNTIME_DIR", &run)
                .env("WAYLAND_DISPLAY", &sway.socket)
                .env("XDG_CURRENT_DESKTOP", "sway")
                .env("XDG_CONFIG_HOME", &cfg)
                .env("XDG_DATA_HOME", &data)
                .env("HOME", &dir)
                .env("DBUS_SESSION_BUS_ADDRESS", &bus)
                .env_remove("DISPLAY");
        };
        for (name, args) in [
            ("dbus-daemon", vec!["--session", "--nofork", "--nopidfile"]),
            ("pipewire", vec![]),
            ("wireplumber", vec![]),
            (
                "/usr/libexec/xdg-desktop-portal-wlr",
                vec!["-r", "-l", "INFO"],
            ),
            ("/usr/libexec/xdg-desktop-portal", vec!["-r"]),
        ] {
            let mut c = Command::new(name);
            c.args(&args);
            if name == "dbus-daemon" {
                c.arg(format!("--address={bus}"));
            }
            env(&mut c);
            let log = std::fs::File::create(
                dir.join(format!("{}.log", name.rsplit('/').next().unwrap_or(name))),
            )
            .map_err(|e| e.to_string())?;
            let child = c
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .map_err(|e| format!("cannot start {name}: {e}"))?;
            desk.children.push((name.to_string(), child));
            // The bus first: the others connect to it at start.
            if name == "dbus-daemon" {
                desk.wait_for("the session bus", |_| run.join("bus").exists())?;
            }
            if name == "pipewire" {
                desk.wait_for("PipeWire", |_| run.join("pipewire-0").exists())?;
            }
        }
        desk.wait_for("the portal's ScreenCast", |d| {
            Command::new("dbus-send")
                .args([
                    &format!("--bus={}", d.bus),
                    "--print-reply",
                    "--reply-timeout=1000",
                    "--dest=org.freedesktop.portal.Desktop",
                    "/org/freedesktop/portal/desktop",
                    "org.freedesktop.DBus.Properties.Get",
                    "string:org.freedesktop.portal.ScreenCast",
                    "string:version",
                ])
                .output()
                .is_ok_and(|o| o.status.success())
        })?;
        Ok(desk)
    }

    fn wait_for(&mut self, what: &str, ready: impl Fn(&Self) -> bool) -> Result<(), String> {
        let t = Instant::now();
        while !ready(self) {
            for (name, c) in &mut self.children {
                if let Ok(Some(st)) = c.try_wait() {
                    return Err(format!("{name} exited ({st}) before {what} was ready"));
                }
            }
            if t.elapsed() > Duration::from_secs(15) {
                return Err(format!("{what} not ready in 15 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// The private directory (for the restore token file).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The runtime directory (PipeWire's socket).
    pub fn runtime_dir(&self) -> PathBuf {
        self.dir.join("run")
    }

    /// xdg-desktop-portal-wlr's log.
    pub fn backend_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("xdg-desktop-portal-wlr.log")).unwrap_or_default()
    }

    /// The last lines of the portal backends' logs (for failure messages).
    pub fn log_tail(&self) -> String {
        ["xdg-desktop-portal-wlr.log", "xdg-desktop-portal.log"]
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                format!(
                    "{f}: {}",
                    lines[lines.len().saturating_sub(3)..].join(" | ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

fn which(p: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(p))
        .find(|f| f.exists())
}

impl Drop for PortalDesktop {
    fn drop(&mut self) {
        // The portals first, the bus last.
        for (_, c) in self.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::env::var_os("UNTETHER_KEEP_PORTAL_LOGS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

//! The doctor's Wayland lines: which Wayland capture paths this machine can use (a compositor
//! in `WAYLAND_DISPLAY`, its wlr-screencopy global, the desktop portal's ScreenCast on the
//! session bus) and whether input can be replayed there (uinput).

use std::process::Command;

use untether_media::wlr::{self, SCREENCOPY_GLOBAL};

use super::{check, Check, Findings, Status};

pub(super) fn checks(f: &mut Findings) {
    let display = std::env::var("WAYLAND_DISPLAY").ok();
    let globals = match &display {
        None => {
            f.checks.push(check(
                "capture",
                "wayland",
                Status::Absent,
                "no WAYLAND_DISPLAY: not in a Wayland session (X11 capture: --capture x11)".into(),
            ));
            None
        }
        Some(d) => match wlr::globals(None) {
            Ok(g) => {
                f.checks.push(check(
                    "capture",
                    "wayland",
                    Status::Ok,
                    format!("compositor at {d} ({} globals)", g.len()),
                ));
                Some(g)
            }
            Err(e) => {
                f.checks.push(Check {
                    fix: "run the doctor inside the Wayland session (WAYLAND_DISPLAY and \
                          XDG_RUNTIME_DIR as the desktop sets them)"
                        .into(),
                    ..check("capture", "wayland", Status::Warn, e.to_string())
                });
                None
            }
        },
    };
    if let Some(g) = globals {
        f.checks.push(if g.iter().any(|i| i == SCREENCOPY_GLOBAL) {
            check(
                "capture",
                "wlr-screencopy",
                Status::Ok,
                format!("{SCREENCOPY_GLOBAL}: --capture wlr[:OUTPUT] works here"),
            )
        } else {
            Check {
                fix: "wlr-screencopy is wlroots' (sway, Hyprland, river); GNOME and KDE offer \
                      only the desktop portal"
                    .into(),
                ..check(
                    "capture",
                    "wlr-screencopy",
                    Status::Absent,
                    format!("the compositor has no {SCREENCOPY_GLOBAL}"),
                )
            }
        });
    }
    f.checks.push(portal());
    f.checks.push(uinput());
}

/// Whether the desktop portal's ScreenCast interface answers on the session bus.
fn portal() -> Check {
    if std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_none() {
        return check(
            "capture",
            "portal",
            Status::Absent,
            "no DBUS_SESSION_BUS_ADDRESS: no session bus, so no desktop portal".into(),
        );
    }
    let out = Command::new("dbus-send")
        .args([
            "--session",
            "--print-reply",
            "--reply-timeout=3000",
            "--dest=org.freedesktop.portal.Desktop",
            "/org/freedesktop/portal/desktop",
            "org.freedesktop.DBus.Properties.Get",
            "string:org.freedesktop.portal.ScreenCast",
            "string:version",
        ])
        .output();
    match out {
        Err(e) => check(
            "capture",
            "portal",
            Status::Absent,
            format!("cannot ask the session bus (dbus-send: {e})"),
        ),
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            let version = text.split_whitespace().last().unwrap_or("?").to_string();
            check(
                "capture",
                "portal",
                Status::Warn,
                format!(
                    "org.freedesktop.portal.ScreenCast version {version} answers; untether does \
                     not capture through it yet (wlr-screencopy and X11 only)"
                ),
            )
        }
        Ok(o) => Check {
            fix: "install xdg-desktop-portal and the desktop's backend (-gnome, -kde, -wlr)".into(),
            ..check(
                "capture",
                "portal",
                Status::Absent,
                format!(
                    "ScreenCast does not answer: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
            )
        },
    }
}

/// Whether uinput (Wayland input, virtual gamepads) can be opened.
fn uinput() -> Check {
    let path = "/dev/uinput";
    match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(_) => check(
            "input",
            "uinput",
            Status::Ok,
            format!("{path} opens: keyboard, mouse and gamepads replay on Wayland and consoles"),
        ),
        Err(e) => Check {
            fix: "modprobe uinput, and let the host's user write it (group input and a udev \
                  rule)"
                .into(),
            ..check(
                "input",
                "uinput",
                Status::Absent,
                format!("{path}: {e} (no input on Wayland captures, no virtual gamepads)"),
            )
        },
    }
}

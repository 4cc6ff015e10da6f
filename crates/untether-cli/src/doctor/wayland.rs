//! The doctor's Wayland lines: which Wayland capture paths this machine can use (a compositor
//! in `WAYLAND_DISPLAY`, its wlr-screencopy global, the desktop portal's ScreenCast on the
//! session bus) and whether input can be replayed there (uinput).

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

/// Whether the desktop portal's ScreenCast interface answers on the session bus, and whether
/// GStreamer can read its PipeWire stream (`--capture portal`).
#[cfg(feature = "portal")]
fn portal() -> Check {
    let absent = |detail: String, fix: &str| Check {
        fix: fix.into(),
        ..check("capture", "portal", Status::Absent, detail)
    };
    let offer = match untether_portal::session_bus().and_then(|c| untether_portal::offer(&c)) {
        Ok(o) => o,
        Err(e) => {
            return absent(
                e.to_string(),
                "run inside the desktop session, with xdg-desktop-portal and the desktop's \
                 backend (-gnome, -kde, -wlr) installed",
            )
        }
    };
    if let Err(e) = untether_portal::pipewiresrc_available() {
        return absent(e.to_string(), "apt install gstreamer1.0-pipewire");
    }
    let kinds = [(1, "monitor"), (2, "window"), (4, "virtual")]
        .iter()
        .filter(|(bit, _)| offer.source_types & bit != 0)
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join(", ");
    check(
        "capture",
        "portal",
        Status::Ok,
        format!(
            "org.freedesktop.portal.ScreenCast version {} ({kinds}), pipewiresrc: --capture \
             portal can work here ({}; the cast itself is not tried: it would show the dialog)",
            offer.version,
            if offer.version >= 4 {
                "the user approves once: the restore token is kept in the state directory"
            } else {
                "the portal keeps no permission before version 4: it asks at every start"
            }
        ),
    )
}

#[cfg(not(feature = "portal"))]
fn portal() -> Check {
    check(
        "capture",
        "portal",
        Status::Absent,
        "this build has no portal capture (built without the `portal` feature)".into(),
    )
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

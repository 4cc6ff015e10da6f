//! `untether generate` (hidden): the man pages and shell completions, generated from the
//! command line's own clap definitions, for `make install` and the Debian package.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, CommandFactory, Subcommand, ValueEnum};
use clap_mangen::roff::{bold, roman, Roff};
use clap_mangen::Man;
use untether::identity as id;

#[derive(Args, Debug, Clone)]
pub struct GenerateArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand, Debug, Clone)]
enum What {
    /// Man pages (section 1): untether.1 and one per command (untether-host.1, …) in DIR.
    Man {
        /// Folder to write them into (created if missing).
        dir: PathBuf,
    },
    /// A shell's completion script in DIR: bash → untether.bash, zsh → _untether, fish →
    /// untether.fish.
    Completions {
        shell: Shell,
        /// Folder to write it into (created if missing).
        dir: PathBuf,
    },
}

/// The shells `make install` installs completions for.
#[derive(ValueEnum, Debug, Clone, Copy)]
enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Writes what `args` asks for; prints each file written on standard error.
pub fn run(args: GenerateArgs) -> Result<()> {
    match args.what {
        What::Man { dir } => {
            create(&dir)?;
            let mut cmd = crate::Cli::command().disable_help_subcommand(true);
            cmd.build();
            write_pages(&cmd, &dir, true)?;
            eprintln!("untether: man pages written to {}", dir.display());
        }
        What::Completions { shell, dir } => {
            create(&dir)?;
            let mut cmd = crate::Cli::command();
            let path = match shell {
                Shell::Bash => write(clap_complete::Shell::Bash, &mut cmd, &dir)?,
                Shell::Zsh => write(clap_complete::Shell::Zsh, &mut cmd, &dir)?,
                Shell::Fish => write(clap_complete::Shell::Fish, &mut cmd, &dir)?,
            };
            eprintln!(
                "untether: {shell:?} completions written to {}",
                path.display()
            );
        }
    }
    Ok(())
}

fn create(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

fn write(shell: clap_complete::Shell, cmd: &mut clap::Command, dir: &Path) -> Result<PathBuf> {
    clap_complete::generate_to(shell, cmd, "untether", dir).with_context(|| {
        format!(
            "cannot write the {shell} completions into {}",
            dir.display()
        )
    })
}

/// Writes the page of `cmd` and of each visible command under it (untether.1, untether-host.1,
/// untether-pair-approve.1, …), as `clap_mangen::generate_to` does, with two changes: the
/// description keeps the line structure `--help` shows ([`description`]), and untether.1 has
/// ENVIRONMENT, FILES and EXAMPLES sections; each command's page points at it.
fn write_pages(cmd: &clap::Command, dir: &Path, top: bool) -> Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, false)?;
    }
    let man = Man::new(cmd.clone());
    let path = dir.join(man.get_filename());
    let mut page = Vec::new();
    render(&man, cmd, top, &mut page)
        .and_then(|()| std::fs::write(&path, page))
        .with_context(|| format!("cannot write the man page {}", path.display()))
}

/// One page: clap_mangen's sections, our description, and on untether.1 our own sections.
fn render(
    man: &Man,
    cmd: &clap::Command,
    top: bool,
    w: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    man.render_title(w)?;
    let mut roff = Roff::new();
    // No hyphenation: paths, keys and variable names are searched for as written; and ragged
    // right, since long unbreakable words would stretch the spaces of a justified line.
    roff.control("nh", []);
    roff.control("ad", ["l"]);
    roff.to_writer(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    let mut roff = Roff::new();
    roff.control("SH", ["DESCRIPTION"]);
    let about = cmd.get_long_about().or_else(|| cmd.get_about());
    description(&mut roff, &about.map(|a| a.to_string()).unwrap_or_default());
    roff.to_writer(w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(w)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(w)?;
    }
    if cmd.get_after_long_help().is_some() || cmd.get_after_help().is_some() {
        man.render_extra_section(w)?;
    }
    let mut roff = Roff::new();
    if top {
        environment(&mut roff);
        files(&mut roff);
        list(&mut roff, "EXAMPLES", EXAMPLES);
    } else {
        roff.control("SH", ["SEE ALSO"]);
        roff.text([
            bold("untether"),
            roman("(1): the quick start, environment, files, examples"),
        ]);
    }
    roff.to_writer(w)?;
    if cmd.get_version().is_some() {
        man.render_version_section(w)?;
    }
    Ok(())
}

/// A description laid out as `--help` shows it. roff fills lines into paragraphs, so each line
/// of the text starts a new line here (`.br`), a blank line a new paragraph, and an indented
/// line — a command, two spaces or more, a note (the quick start, the bench's examples) —
/// becomes a tagged paragraph: the command in bold on its own line, the note under it.
pub(crate) fn description(roff: &mut Roff, text: &str) {
    for paragraph in text.split("\n\n") {
        roff.control("PP", []);
        let mut in_list = false;
        let mut first = true;
        for line in paragraph.lines() {
            if line.starts_with(' ') {
                let line = line.trim();
                let (command, note) = line.split_once("  ").unwrap_or((line, ""));
                if !in_list {
                    // No blank line between the entries of one list.
                    roff.control("PD", ["0"]);
                    in_list = true;
                }
                roff.control("TP", []);
                roff.text([bold(command.trim_end())]);
                if !note.trim().is_empty() {
                    roff.text([roman(note.trim())]);
                }
            } else {
                if in_list {
                    roff.control("PD", []);
                    roff.control("PP", []);
                    in_list = false;
                } else if !first {
                    roff.control("br", []);
                }
                roff.text([roman(line)]);
            }
            first = false;
        }
        if in_list {
            roff.control("PD", []);
        }
    }
}

/// A section of tagged paragraphs: each entry's first part in bold, the second under it.
fn list(roff: &mut Roff, title: &str, entries: &[(&str, &str)]) {
    roff.control("SH", [title]);
    for (tag, text) in entries {
        roff.control("TP", []);
        roff.text([bold(*tag)]);
        roff.text([roman(*text)]);
    }
}

/// What untether.1's EXAMPLES shows.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "untether demo --codec hevc --resolution 1080p",
        "Stream the test scene through HEVC at 1080p on this machine for 10 s, then print the \
         latency report.",
    ),
    (
        "untether host --capture x11 --access pin",
        "Stream this X11 desktop, and print a one-time PIN that pairs a new client.",
    ),
    (
        "untether client 192.168.1.20 --pin 123456",
        "Connect to that host, pairing with the PIN it shows; later just untether client.",
    ),
    (
        "untether pair list",
        "On the host: the clients waiting for approval and the allowed ones; then untether pair \
         approve FINGERPRINT.",
    ),
    (
        "untether client --fullscreen --hwaccel auto",
        "Connect to the paired host found on the local network, full screen, decoding on the \
         GPU where one is.",
    ),
    (
        "untether run -- vkcube",
        "Start a Vulkan application and stream what it presents.",
    ),
    (
        "untether --config lan.toml host --duration 1m --report host.json",
        "Settings from lan.toml, stop after a minute, and write the JSON report.",
    ),
    (
        "untether doctor",
        "What this machine can encode, decode and capture, and what to fix.",
    ),
    (
        "systemctl --user enable --now untether-host",
        "Run the host as a service of this user (its log: journalctl --user -u untether-host).",
    ),
];

/// untether.1's FILES: the config files the command reads, the state directory and its files,
/// the systemd user unit.
fn files(roff: &mut Roff) {
    let state = [
        "host.key, client.key (the key pairs)",
        id::ALLOWED_FILE,
        id::REVOKED_FILE,
        id::PENDING_FILE,
        id::PIN_FILE,
        id::GRANTS_FILE,
        id::CONTROL_FILE,
        id::CLIENTS_FILE,
        id::KNOWN_HOSTS_FILE,
        id::WEBRTC_CERT_FILE,
        id::DASHBOARD_LINK_FILE,
        id::BROWSER_LINK_FILE,
    ]
    .join(", ");
    let state = format!(
        "The state directory ($UNTETHER_STATE_DIR, else $XDG_STATE_HOME/untether, or --state-dir, \
         host.state_dir, client.state_dir): {state}."
    );
    list(
        roff,
        "FILES",
        &[
            (
                "~/.config/untether/untether.toml",
                "The per-user config file ($XDG_CONFIG_HOME/untether/untether.toml), read \
                 without --config; every key is in docs/CONFIG.md and \
                 PREFIX/share/doc/untether/untether.example.toml. untether doctor says which file \
                 is read.",
            ),
            (
                crate::config_file::SYSTEM,
                "The system-wide config file, read when there is no per-user one (e.g. for the \
                 host's service).",
            ),
            ("~/.local/state/untether/", &state),
            (
                "PREFIX/lib/systemd/user/untether-host.service",
                "The host as a systemd user service (PREFIX: /usr for the package, /usr/local for \
                 make install): systemctl --user enable --now untether-host.",
            ),
            (
                "~/.config/untether/host.env",
                "The service's environment: extra flags for untether host in \
                 UNTETHER_HOST_ARGS, e.g. UNTETHER_HOST_ARGS=--capture x11 and DISPLAY=:0.",
            ),
            (
                "PREFIX/lib/untether/libuntether_capture_hook.so",
                "The capture hook untether run loads into applications (its Vulkan layer and GL \
                 hook).",
            ),
        ],
    );
}

/// untether.1's ENVIRONMENT: every variable the command reads (and the OpenXR runtime's).
fn environment(roff: &mut Roff) {
    list(
        roff,
        "ENVIRONMENT",
        &[
            (
                "RUST_LOG",
                "The log filter (env_logger's syntax, e.g. untether=debug) when neither -v nor \
                 -q is given; default info.",
            ),
            (
                "XDG_CONFIG_HOME, HOME",
                "Where the per-user config file is: $XDG_CONFIG_HOME/untether/untether.toml \
                 (an absolute path), else ~/.config/untether/untether.toml.",
            ),
            (
                "UNTETHER_STATE_DIR, XDG_STATE_HOME",
                "The state directory without --state-dir: $UNTETHER_STATE_DIR, else \
                 $XDG_STATE_HOME/untether, else ~/.local/state/untether.",
            ),
            (
                "DISPLAY, WAYLAND_DISPLAY",
                "The client (and demo) opens a window only with one of them set, else runs \
                 headless. --capture x11 captures $DISPLAY, --capture wlr the compositor of \
                 $WAYLAND_DISPLAY (its socket in XDG_RUNTIME_DIR).",
            ),
            (
                "XDG_RUNTIME_DIR",
                "The Wayland socket's directory; untether run keeps the capture layer's private \
                 files there.",
            ),
            (
                "DBUS_SESSION_BUS_ADDRESS",
                "The session bus through which --capture portal asks the desktop portal.",
            ),
            (
                "SDL_AUDIODRIVER, SDL_VIDEODRIVER",
                "SDL's audio and video backends (SDL_AUDIODRIVER=dummy plays nowhere).",
            ),
            (
                "UNTETHER_SDL_RENDERER",
                "accelerated: the SDL presenter (--presenter sdl) uses SDL's GPU renderer \
                 instead of its software one.",
            ),
            (
                "UNTETHER_ZERO_COPY",
                "auto (the default) or off: off sends hardware-decoded pictures through system \
                 memory instead of keeping them on the GPU (to compare the two).",
            ),
            (
                "UNTETHER_FFMPEG_LOG",
                "Set: FFmpeg's own log messages are shown (quiet otherwise).",
            ),
            (
                "SVT_LOG",
                "SVT-AV1's log level; untether sets 1 (errors only) unless it is set.",
            ),
            (
                "UNTETHER_HOOK_LIBRARY",
                "Where untether run finds its capture hook library (default: beside the binary, \
                 or ../lib/untether/ from it).",
            ),
            (
                "XR_RUNTIME_JSON",
                "The OpenXR runtime's manifest, which untether doctor checks (else \
                 openxr/1/active_runtime.json under XDG_CONFIG_HOME, XDG_CONFIG_DIRS, /etc; \
                 docs/OPENXR.md).",
            ),
            (
                "UNTETHER_CONFIG, UNTETHER_LOG",
                "Read by the OpenXR runtime (libuntether_openxr.so) only: its config file \
                 (else the per-user one) and its log filter (else RUST_LOG, default warnings).",
            ),
            (
                "UNTETHER_HOST_ARGS",
                "Extra flags for untether host in the systemd user service (set in \
                 ~/.config/untether/host.env).",
            ),
        ],
    );
}

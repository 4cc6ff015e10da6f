//! `untether pair`: pending access requests, the allowlist, revocation and one-time PINs.
//!
//! ```text
//! untether pair                    list pending requests (with their fingerprints) and allowed
//!                                  clients; creates nothing
//! untether pair approve ABCD-EFGH  approve the request with this fingerprint (8+ characters)
//! untether pair deny ABCD-EFGH     forget a request
//! untether pair revoke ABCD-EFGH   remove an allowed client (it is refused from then on)
//! untether pair --pin [--wait]     create a one-time PIN to type on the client
//! untether pair grant ABCD-EFGH input      let a viewer's input through
//! untether pair revoke-grant ABCD-EFGH     take it back
//! untether pair control ABCD-EFGH  hand control to this client (whenever it is connected)
//! untether pair control --release  forget the hand-over
//! ```
//! The running host writes the pending requests and picks up approvals, revocations and the
//! PIN from the same directory (see `untether::identity`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use untether::identity::{fingerprint, unix_now, Role, StateDir};

/// Arguments of `untether pair`.
#[derive(clap::Args, Debug, Clone)]
#[command(
    after_help = "Run these on the host, next to `untether host` (same --state-dir). \
    A client the host does not know is refused with \"not paired\" and shows up here as a \
    pending request; approve it by its fingerprint (check it with the client's owner: the \
    client shows its own at start) and it connects on its next try. Or pair with a PIN: \
    `untether pair --pin --wait` here, then `untether client HOST --pin PIN` on the client \
    (`untether host --access pin` prints a PIN at start instead). The running host re-reads \
    the allowlist within a second: approvals and revocations need no restart.\n\n\
    Several clients: the first to connect controls (its input drives the application), the \
    others are viewers whose input is dropped. `untether pair grant FINGERPRINT input` lets \
    a viewer's input through (`revoke-grant` takes it back); `untether pair control \
    FINGERPRINT` makes that client the controller whenever it is connected (`--release` \
    forgets it; the current controller then keeps control, and when it leaves the \
    longest-connected client takes over). The running host applies these within a second; \
    `untether pair` lists the connected clients and their roles."
)]
pub struct PairArgs {
    #[command(subcommand)]
    pub action: Option<PairAction>,
    /// Create a one-time PIN the host accepts for pairing (type it on the client).
    #[arg(long)]
    pub pin: bool,
    /// How long the PIN is valid: seconds (300) or with a unit (90s, 5m, 1h); 10 s to 24 h.
    #[arg(long, default_value = "5m", value_name = "DURATION", value_parser = crate::duration_arg, requires = "pin")]
    pub pin_ttl: std::time::Duration,
    /// How many wrong PINs the host tolerates before it drops the PIN (1 to 10).
    #[arg(long, default_value_t = 3, requires = "pin")]
    pub pin_attempts: u32,
    /// With --pin: wait until a client pairs with the PIN (or it expires or is used up).
    #[arg(long, requires = "pin")]
    pub wait: bool,
    /// The host's state directory: the global `--state-dir`, else the config's `host.state_dir`
    /// (set by `main`; default: $UNTETHER_STATE_DIR, $XDG_STATE_HOME/untether or
    /// ~/.local/state/untether).
    #[arg(skip)]
    pub state_dir: Option<PathBuf>,
    /// The client's state directory, for `forget` (the global `--state-dir`, else the
    /// config's `client.state_dir`; set by `main`).
    #[arg(skip)]
    pub client_state_dir: Option<PathBuf>,
}

/// What `untether pair` does.
#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum PairAction {
    /// List pending access requests and allowed clients (the default).
    List,
    /// Allow a client that asked for access, or one denied or revoked before: its fingerprint
    /// as `untether pair` lists it (8 or more of its characters, naming one) or its hex key.
    /// Not a list number (a flood of requests moves them) nor a name (the client chose it).
    Approve { fingerprint: String },
    /// Deny a pending access request (its fingerprint, as for approve): the client is told
    /// and refused from then on, until `approve` takes the denial back.
    Deny { fingerprint: String },
    /// Remove an allowed client (its fingerprint or hex key, as for approve): it is refused
    /// from then on, and disconnected if connected.
    Revoke { fingerprint: String },
    /// List only the allowed clients.
    Allowed,
    /// Let a viewer's input through (it is dropped otherwise): the client by its fingerprint
    /// or hex key as for approve (8 or more fingerprint characters; never a name), among the
    /// allowed and the connected clients; then what is granted (`input`).
    Grant {
        fingerprint: String,
        #[arg(value_parser = ["input"])]
        what: String,
    },
    /// Take a viewer's input grant back (its fingerprint or hex key, as for approve).
    RevokeGrant {
        fingerprint: String,
        #[arg(value_parser = ["input"], default_value = "input")]
        what: String,
    },
    /// Hand control to a client (its fingerprint or hex key as for approve, allowed or
    /// connected): it is the controller whenever it is connected. --release forgets the
    /// hand-over.
    Control {
        #[arg(required_unless_present = "release", conflicts_with = "release")]
        fingerprint: Option<String>,
        #[arg(long)]
        release: bool,
    },
    /// On a client: forget a host this client trusts (its entries in known_hosts.json), named
    /// as it was pinned (the name or address typed, or found by `untether discover`), or by
    /// its fingerprint (8 or more characters). Its next connection trusts on first use again.
    Forget { host: String },
}

/// Runs `untether pair`, printing to stdout.
pub fn run(args: PairArgs) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    run_to(args, &mut stdout.lock())
}

fn ago(t: u64) -> String {
    let d = unix_now().saturating_sub(t);
    match d {
        0..=59 => format!("{d} s ago"),
        60..=3599 => format!("{} min ago", d / 60),
        3600..=86_399 => format!("{} h ago", d / 3600),
        _ => format!("{} days ago", d / 86_400),
    }
}

/// Runs `untether pair`, printing to `out`.
pub fn run_to(args: PairArgs, out: &mut impl Write) -> anyhow::Result<()> {
    if let Some(PairAction::Forget { host }) = &args.action {
        let dir = StateDir::resolve(args.client_state_dir.as_deref())?;
        for h in dir.forget_host(host)? {
            writeln!(
                out,
                "Forgot host {} ({}); the next connection to it trusts its key on first use \
                 again",
                h.describe(),
                untether::identity::parse_key(&h.key).map_or("?".into(), |k| fingerprint(&k))
            )?;
        }
        return Ok(());
    }
    let dir = StateDir::resolve(args.state_dir.as_deref())?;
    if args.pin {
        let pin_ttl = args.pin_ttl.as_secs();
        untether::config::PIN_TTL_S
            .check(pin_ttl)
            .map_err(|e| anyhow::anyhow!("--pin-ttl: {e}"))?;
        untether::config::PIN_ATTEMPTS.check(args.pin_attempts)?;
        let host = dir
            .load_or_create_identity(Role::Host)
            .context("loading the host's key")?;
        let pin = dir.create_pin(pin_ttl, args.pin_attempts)?;
        writeln!(
            out,
            "One-time PIN: {}  (valid {} s, {} attempts; the running host picks it up)",
            pin.pin, pin_ttl, pin.attempts_left
        )?;
        writeln!(
            out,
            "On the client: untether client HOST --pin {}   (host fingerprint {})",
            pin.pin,
            fingerprint(&host.public)
        )?;
        if args.wait {
            out.flush()?;
            return wait_for_pairing(&dir, &pin.pin, out);
        }
        return Ok(());
    }
    match args.action.unwrap_or(PairAction::List) {
        PairAction::List => {
            // Listing only reads: no key, no folder is created.
            match dir
                .load_identity(Role::Host)
                .context("loading the host's key")?
            {
                Some(host) => writeln!(out, "This host: {}", fingerprint(&host.public))?,
                None => writeln!(
                    out,
                    "This host: no key yet (`untether host` makes one at its first start)"
                )?,
            }
            writeln!(out, "State: {}", dir.path().display())?;
            let pending = dir.pending()?;
            if pending.is_empty() {
                writeln!(out, "No pending access requests.")?;
            } else {
                writeln!(
                    out,
                    "Pending access requests (the names are the clients' own claims: check the \
                     fingerprint with the client's owner before approving):"
                )?;
                let state = args
                    .state_dir
                    .as_ref()
                    .map(|d| format!(" --state-dir {}", shell_word(&d.display().to_string())))
                    .unwrap_or_default();
                for p in &pending {
                    writeln!(
                        out,
                        "  {}  {:<20} from {}, {} ({} attempts)",
                        p.fingerprint,
                        format!("{:?}", p.name),
                        p.addr,
                        ago(p.last_seen),
                        p.attempts
                    )?;
                    writeln!(
                        out,
                        "      approve: untether pair{state} approve {}",
                        p.fingerprint
                    )?;
                }
            }
            list_allowed(&dir, out)?;
            list_roles(&dir, out)?;
            if let Some(pin) = dir.current_pin()? {
                writeln!(
                    out,
                    "A PIN is active until {} s from now ({} attempts left).",
                    pin.expires.saturating_sub(unix_now()),
                    pin.attempts_left
                )?;
            }
        }
        PairAction::Approve { fingerprint } => {
            let e = dir.approve(&fingerprint)?;
            writeln!(out, "Allowed {} ({:?}).", e.fingerprint(), e.name)?;
        }
        PairAction::Deny { fingerprint } => {
            let r = dir.deny(&fingerprint)?;
            writeln!(
                out,
                "Denied {} ({:?}): it is told so and refused from now on (`untether pair \
                 approve {}` takes this back).",
                r.fingerprint, r.name, r.fingerprint
            )?;
        }
        PairAction::Revoke { fingerprint } => {
            let e = dir.revoke(&fingerprint)?;
            writeln!(
                out,
                "Revoked {} ({:?}): it is refused from its next connection on.",
                e.fingerprint(),
                e.name
            )?;
        }
        PairAction::Allowed => list_allowed(&dir, out)?,
        PairAction::Grant { fingerprint, .. } => {
            let e = dir.grant_input(&fingerprint)?;
            writeln!(
                out,
                "Granted input to {} ({:?}): its input is applied while it is a viewer (the \
                 running host picks this up within a second).",
                e.fingerprint(),
                e.name
            )?;
        }
        PairAction::RevokeGrant { fingerprint, .. } => {
            let e = dir.revoke_input_grant(&fingerprint)?;
            writeln!(
                out,
                "Took the input grant of {} ({:?}) back: its input is dropped while it is a \
                 viewer.",
                e.fingerprint(),
                e.name
            )?;
        }
        PairAction::Control {
            fingerprint: Some(fp),
            ..
        } => {
            let e = dir.hand_control(&fp)?;
            writeln!(
                out,
                "Handed control to {} ({:?}): it controls whenever it is connected (the running \
                 host switches within a second).",
                e.fingerprint(),
                e.name
            )?;
        }
        PairAction::Control {
            fingerprint: None, ..
        } => match dir.release_control()? {
            Some(e) => writeln!(
                out,
                "Released control from {} ({:?}): the current controller keeps it; when it \
                 leaves, the longest-connected client takes over.",
                e.fingerprint(),
                e.name
            )?,
            None => writeln!(out, "Control was not handed to anyone.")?,
        },
        PairAction::Forget { .. } => {}
    }
    Ok(())
}

/// The connected clients (as the running host wrote them), the input grants and the control
/// hand-over.
fn list_roles(dir: &StateDir, out: &mut impl Write) -> anyhow::Result<()> {
    match dir.connected_clients()? {
        Some(f) if !f.clients.is_empty() => {
            writeln!(out, "Connected now (host pid {}):", f.host_pid)?;
            for c in &f.clients {
                writeln!(
                    out,
                    "  {}  {:<20} {:<10}{} from {}, {}",
                    c.fingerprint,
                    format!("{:?}", c.name),
                    c.role,
                    if c.input_granted { " +input" } else { "" },
                    c.addr,
                    ago(c.since)
                )?;
            }
        }
        Some(_) => writeln!(out, "No client is connected.")?,
        None => {}
    }
    let grants = dir.input_grants()?;
    if !grants.is_empty() {
        writeln!(out, "Viewers granted input:")?;
        for e in &grants {
            writeln!(
                out,
                "  {}  {:<20} granted {}",
                e.fingerprint(),
                format!("{:?}", e.name),
                ago(e.added)
            )?;
        }
    }
    if let Some(e) = dir.control()? {
        writeln!(
            out,
            "Control handed to {} ({:?}) {}.",
            e.fingerprint(),
            e.name,
            ago(e.added)
        )?;
    }
    Ok(())
}

/// `s` as one shell word (quoted if it holds anything but plain path characters).
fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Waits until the PIN is used (a new client on the allowlist), used up or expired.
fn wait_for_pairing(dir: &StateDir, pin: &str, out: &mut impl Write) -> anyhow::Result<()> {
    let before: Vec<String> = dir.allowed()?.into_iter().map(|e| e.key).collect();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let allowed = dir.allowed()?;
        if let Some(e) = allowed.iter().find(|e| !before.contains(&e.key)) {
            writeln!(out, "Paired with {} ({:?}).", e.fingerprint(), e.name)?;
            return Ok(());
        }
        match dir.current_pin()? {
            Some(p) if p.pin == pin => {}
            _ => anyhow::bail!(
                "the PIN expired or was used up (too many wrong attempts) before a client paired"
            ),
        }
    }
}

fn list_allowed(dir: &StateDir, out: &mut impl Write) -> anyhow::Result<()> {
    let allowed = dir.allowed()?;
    if allowed.is_empty() {
        writeln!(out, "No allowed clients.")?;
    } else {
        list_entries(out, "Allowed clients:", &allowed, "added")?;
    }
    let refused = dir.revoked()?;
    if !refused.is_empty() {
        list_entries(
            out,
            "Refused clients (denied or revoked; `untether pair approve FINGERPRINT` lets one \
             in again):",
            &refused,
            "since",
        )?;
    }
    Ok(())
}

/// `heading`, then each entry: its fingerprint, name and age (`when`: "added", "since").
fn list_entries(
    out: &mut impl Write,
    heading: &str,
    entries: &[untether::identity::KeyEntry],
    when: &str,
) -> anyhow::Result<()> {
    writeln!(out, "{heading}")?;
    for e in entries {
        writeln!(
            out,
            "  {}  {:<20} {when} {}",
            e.fingerprint(),
            format!("{:?}", e.name),
            ago(e.added)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `untether pair` with the global --state-dir, as `main` hands it over.
    #[derive(Parser)]
    struct Cli {
        #[arg(long, global = true)]
        state_dir: Option<PathBuf>,
        #[command(flatten)]
        pair: PairArgs,
    }

    fn run_args(args: &[&str]) -> anyhow::Result<String> {
        let mut cli = Cli::try_parse_from(std::iter::once("pair").chain(args.iter().copied()))?;
        cli.pair.client_state_dir = cli.state_dir.clone();
        cli.pair.state_dir = cli.state_dir;
        let mut out = Vec::new();
        run_to(cli.pair, &mut out)?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    #[test]
    fn forget_removes_a_known_host_and_names_what_is_left() {
        let dir = std::env::temp_dir().join(format!("untether-forget-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let d = dir.to_str().unwrap();
        let cd = StateDir::at(&dir);
        cd.trust_host("pc", "10.0.0.2:9710", &[4; 32]).unwrap();
        cd.trust_host("tv", "10.0.0.5:9710", &[5; 32]).unwrap();
        let text = run_args(&["--state-dir", d, "forget", "pc"]).unwrap();
        assert!(
            text.starts_with("Forgot host \"pc\" (10.0.0.2:9710)"),
            "{text}"
        );
        let e = run_args(&["--state-dir", d, "forget", "pc"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no known host matches \"pc\"") && e.contains("\"tv\""),
            "{e}"
        );
        let hosts: Vec<String> = cd
            .known_hosts()
            .unwrap()
            .into_iter()
            .map(|h| h.host)
            .collect();
        assert_eq!(hosts, vec!["tv".to_string()]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn list_approve_revoke_pin() {
        let dir = std::env::temp_dir().join(format!("untether-pair-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let d = dir.to_str().unwrap();
        let cd = StateDir::at(&dir);
        cd.record_request(&[3; 32], "quest", "10.0.0.2:5000")
            .unwrap();
        let s = run_args(&["--state-dir", d]).unwrap();
        assert!(s.contains("Pending access requests"), "{s}");
        let fp = fingerprint(&[3; 32]);
        assert!(s.contains(&fp));
        // The exact command, with this state directory.
        assert!(
            s.contains(&format!("untether pair --state-dir {d} approve {fp}")),
            "{s}"
        );
        // Not by number, not by the client's name: the error says to give the fingerprint.
        for wrong in ["1", "quest"] {
            let e = run_args(&["--state-dir", d, "approve", wrong]).unwrap_err();
            assert!(e.to_string().contains("fingerprint"), "{e}");
        }
        let s = run_args(&["--state-dir", d, "approve", &fp[..9]]).unwrap();
        assert!(s.starts_with("Allowed"), "{s}");
        let s = run_args(&["--state-dir", d, "allowed"]).unwrap();
        assert!(s.contains("quest"));
        let s = run_args(&["--state-dir", d, "revoke", &fp]).unwrap();
        assert!(s.starts_with("Revoked"), "{s}");
        assert!(run_args(&["--state-dir", d, "revoke", &fp]).is_err());
        // A revoked client is listed, and approve takes it back (issue 36, item 4).
        let s = run_args(&["--state-dir", d, "allowed"]).unwrap();
        assert!(s.contains("Refused clients") && s.contains(&fp), "{s}");
        let s = run_args(&["--state-dir", d, "approve", &fp]).unwrap();
        assert!(s.starts_with("Allowed"), "{s}");
        assert!(!run_args(&["--state-dir", d, "allowed"])
            .unwrap()
            .contains("Refused clients"));
        // A denied request stays denied: refused, listed, until approved.
        cd.record_request(&[4; 32], "pest", "10.0.0.3:5000")
            .unwrap();
        let fp4 = fingerprint(&[4; 32]);
        let s = run_args(&["--state-dir", d, "deny", &fp4]).unwrap();
        assert!(
            s.starts_with("Denied") && s.contains("refused from now on"),
            "{s}"
        );
        assert!(cd.revoked().unwrap().iter().any(|e| e.fingerprint() == fp4));
        assert!(cd.pending().unwrap().is_empty());
        let s = run_args(&["--state-dir", d, "approve", &fp4]).unwrap();
        assert!(s.starts_with("Allowed"), "{s}");
        assert!(cd.revoked().unwrap().is_empty());
        // --pin-attempts within 1..=10, the error naming the flag and the range.
        let e = run_args(&["--state-dir", d, "--pin", "--pin-attempts", "4294967295"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--pin-attempts") && e.contains("1..=10"), "{e}");
        assert!(cd.current_pin().unwrap().is_none());
        let s = run_args(&["--state-dir", d, "--pin", "--pin-ttl", "60"]).unwrap();
        assert!(s.contains("One-time PIN"), "{s}");
        assert!(cd.current_pin().unwrap().is_some());
        assert!(run_args(&["--state-dir", d, "deny", "7"]).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn grants_and_control_hand_over() {
        let dir = std::env::temp_dir().join(format!("untether-pair-roles-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let d = dir.to_str().unwrap();
        let cd = StateDir::at(&dir);
        cd.allow(&[5; 32], "spectator").unwrap();
        let fp = fingerprint(&[5; 32]);
        let s = run_args(&["--state-dir", d, "grant", &fp[..9], "input"]).unwrap();
        assert!(s.starts_with("Granted input"), "{s}");
        assert_eq!(cd.input_grants().unwrap().len(), 1);
        // Only input can be granted; the error names what can.
        let e = run_args(&["--state-dir", d, "grant", &fp, "audio"]).unwrap_err();
        assert!(e.to_string().contains("input"), "{e}");
        let s = run_args(&["--state-dir", d]).unwrap();
        assert!(
            s.contains("Viewers granted input") && s.contains(&fp),
            "{s}"
        );
        // Grant and control take a client as approve does: not by the name it chose, not by 4
        // characters, not by a list number; by 8 or more fingerprint characters or the key.
        for action in [&["grant"][..], &["control"], &["revoke-grant"], &["revoke"]] {
            for wrong in ["spectator", &fp[..4], "1"] {
                let mut args = vec!["--state-dir", d];
                args.extend_from_slice(action);
                args.push(wrong);
                if action == ["grant"] {
                    args.push("input");
                }
                let e = run_args(&args).unwrap_err();
                assert!(e.to_string().contains("fingerprint"), "{args:?}: {e}");
            }
        }
        let s = run_args(&["--state-dir", d, "revoke-grant", &fp]).unwrap();
        assert!(s.starts_with("Took the input grant"), "{s}");
        assert!(cd.input_grants().unwrap().is_empty());
        assert!(cd.control().unwrap().is_none());
        let s = run_args(&["--state-dir", d, "control", &fp[..9]]).unwrap();
        assert!(s.starts_with("Handed control"), "{s}");
        let s = run_args(&[
            "--state-dir",
            d,
            "control",
            &untether::identity::key_hex(&[5; 32]),
        ])
        .unwrap();
        assert!(s.starts_with("Handed control"), "{s}");
        assert!(run_args(&["--state-dir", d])
            .unwrap()
            .contains("Control handed to"));
        let s = run_args(&["--state-dir", d, "control", "--release"]).unwrap();
        assert!(s.starts_with("Released control"), "{s}");
        // Naming nobody known is an error that says where to look.
        let e = run_args(&["--state-dir", d, "control", "ZZZZ-ZZZZ"]).unwrap_err();
        assert!(e.to_string().contains("untether pair"), "{e}");
        assert!(run_args(&["--state-dir", d, "control"]).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

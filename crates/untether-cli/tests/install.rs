//! What installing untether gives a user, and the command line's rough edges found by trying
//! it as a new user: `--version` names its commit, a closed pipe (`untether … | head`) ends
//! quietly, duration flags take units, the default config file is read without `--config`,
//! the host logs a status line at the default level. Then the Debian package (`make deb`,
//! which scripts/test.sh runs first): it installs into a clean root with dpkg, `untether
//! --version` runs from there, the systemd user unit passes `systemd-analyze verify`, the bash
//! completions load and the man pages are there.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("untether-install-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn untether() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_untether"));
    c.env_remove("RUST_LOG");
    // No config file of the user's: an empty config home.
    c.env("XDG_CONFIG_HOME", scratch("no-config"));
    c.env("UNTETHER_STATE_DIR", scratch("state"));
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn git_commit() -> Option<String> {
    let o = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// `untether --version`: the crate's version and the commit it was built from.
fn check_version(binary: &Path) {
    let o = Command::new(binary).arg("--version").output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v = String::from_utf8_lossy(&o.stdout);
    assert!(v.starts_with("untether 0."), "{v}");
    match git_commit() {
        Some(c) => assert!(v.contains(&format!("commit {c}")), "{v} lacks {c}"),
        None => {
            println!("not a git checkout: --version is checked for its fallback only");
            assert!(v.contains("commit "), "{v}");
        }
    }
}

#[test]
fn version_names_the_commit() {
    check_version(Path::new(env!("CARGO_BIN_EXE_untether")));
}

/// `untether … | head`: the reader closes the pipe; untether ends with status 0 and no panic,
/// both where it prints with the macros (bench) and where it writes through an io::Write
/// (track, pair).
#[test]
fn a_closed_pipe_ends_quietly() {
    for args in [
        &["bench", "--cleanup"][..],
        &["track", "--seconds", "10", "--rate", "10000"],
        &["pair"],
    ] {
        let mut child = untether()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Closed before untether writes anything: its first write meets EPIPE.
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success() && !err.contains("panicked") && !err.contains("Broken pipe"),
            "{args:?}: {:?} {err}",
            o.status
        );
    }
    // And the usual case: head reads a line, then closes.
    let mut child = untether()
        .args(["track", "--seconds", "10", "--rate", "10000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(!first.is_empty());
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{:?} {}", o.status, text(&o));
}

/// Every duration flag takes the one unit parser's forms.
#[test]
fn duration_flags_take_units() {
    let o = untether()
        .args(["track", "--seconds", "2s", "--rate", "10"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let samples = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .count();
    assert!(
        (20..=21).contains(&samples),
        "{samples} samples for 2 s at 10 Hz"
    );
    let o = untether()
        .args(["pair", "--pin", "--pin-ttl", "5m"])
        .output()
        .unwrap();
    assert!(
        o.status.success() && text(&o).contains("valid 300 s"),
        "{}",
        text(&o)
    );
    // A bad one is refused with the accepted forms.
    let o = untether()
        .args(["pair", "--pin", "--pin-ttl", "5 parsecs"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("500ms"), "{}", text(&o));
}

/// Without --config, $XDG_CONFIG_HOME/untether/untether.toml is read (here: the host's state
/// directory, which `untether pair` lists).
#[test]
fn the_default_config_file_is_read() {
    let home = scratch("config-home");
    let state = scratch("config-state");
    std::fs::create_dir_all(home.join("untether")).unwrap();
    std::fs::write(
        home.join("untether/untether.toml"),
        format!("[host]\nstate_dir = {:?}\n", state.display().to_string()),
    )
    .unwrap();
    let o = untether()
        .env("XDG_CONFIG_HOME", &home)
        .env_remove("UNTETHER_STATE_DIR")
        .arg("pair")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("State: {}", state.display())),
        "{}",
        text(&o)
    );
    // A broken default file is an error that names it.
    std::fs::write(
        home.join("untether/untether.toml"),
        "[host]\nmax_clientz = 3\n",
    )
    .unwrap();
    let o = untether()
        .env("XDG_CONFIG_HOME", &home)
        .arg("pair")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains("untether.toml") && text(&o).contains("max_clientz"),
        "{}",
        text(&o)
    );
}

/// A host running as a service logs its status line at the default level.
#[test]
fn the_host_logs_a_status_line() {
    let o = untether()
        .args([
            "host",
            "--bind",
            "127.0.0.1:0",
            "--resolution",
            "360p",
            "--status-interval",
            "1s",
            "--duration",
            "2500ms",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    let line = t
        .lines()
        .find(|l| l.contains("status: 0 clients"))
        .unwrap_or_else(|| panic!("no status line in {t}"));
    assert!(line.contains("fps") && line.contains("Mbit/s"), "{line}");
}

/// The .deb `make deb` built (scripts/test.sh builds it and sets UNTETHER_REQUIRE_DEB).
fn built_deb() -> Option<PathBuf> {
    let target = Path::new(env!("CARGO_BIN_EXE_untether"))
        .parent()?
        .parent()?;
    let mut debs: Vec<PathBuf> = std::fs::read_dir(target)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("untether_") && n.ends_with(".deb"))
        })
        .collect();
    debs.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    debs.pop()
}

fn run_ok(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(o.status.success(), "{cmd:?}: {}", text(&o));
    text(&o)
}

#[test]
fn the_package_installs_into_a_clean_root() {
    let Some(deb) = built_deb() else {
        assert!(
            std::env::var_os("UNTETHER_REQUIRE_DEB").is_none(),
            "UNTETHER_REQUIRE_DEB is set but make deb left no target/untether_*.deb"
        );
        println!("skipped: no target/untether_*.deb (run make deb first)");
        return;
    };
    // A clean root: an empty dpkg database, nothing else.
    let root = scratch("root");
    for d in ["var/lib/dpkg/info", "var/lib/dpkg/updates"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
    run_ok(
        Command::new("dpkg")
            .arg(format!("--root={}", root.display()))
            // The root has no libraries: dependencies are the system's. No fsync per file.
            .args([
                "--log=/dev/null",
                "--force-depends",
                "--force-unsafe-io",
                "-i",
            ])
            .arg(&deb),
    );
    let listed = run_ok(
        Command::new("dpkg")
            .arg(format!("--root={}", root.display()))
            .args(["-L", "untether"]),
    );
    for path in [
        "/usr/bin/untether",
        "/usr/share/man/man1/untether.1.gz",
        "/usr/share/man/man1/untether-host.1.gz",
        "/usr/share/bash-completion/completions/untether",
        "/usr/share/zsh/vendor-completions/_untether",
        "/usr/share/fish/vendor_completions.d/untether.fish",
        "/usr/lib/systemd/user/untether-host.service",
        "/usr/lib/libuntether.so",
        "/usr/include/untether.h",
        "/usr/lib/untether/libuntether_capture_hook.so",
    ] {
        assert!(listed.lines().any(|l| l == path), "{path} not in {listed}");
    }
    // The binary runs from there (the system's shared libraries), stripped.
    let bin = root.join("usr/bin/untether");
    check_version(&bin);
    // `untether run` finds its capture hook where the package put it (issue 33: it did not
    // ship, so an installed `untether run` could not work).
    let o = Command::new(&bin)
        .env_remove("UNTETHER_HOOK_LIBRARY")
        .env("UNTETHER_STATE_DIR", scratch("run-state"))
        .args([
            "run",
            "--bind",
            "127.0.0.1:0",
            "--duration",
            "1",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert!(
        text(&o).contains("started true (pid") && text(&o).contains("with the capture hook"),
        "the installed untether run did not find its hook: {}",
        text(&o)
    );
    let file = std::fs::metadata(&bin).unwrap().len();
    assert!(file < 60_000_000, "untether is {file} bytes: not stripped?");
    // The unit file: systemd's own checks (which also want its ExecStart to exist: pointed at
    // the binary in the root; warnings such as an unknown Type= only go to stderr).
    let unit =
        std::fs::read_to_string(root.join("usr/lib/systemd/user/untether-host.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/untether host"), "{unit}");
    // Hardened as far as a user service and capture allow (issue 33).
    for line in ["NoNewPrivileges=yes", "UMask=0077", "RestrictSUIDSGID=yes"] {
        assert!(unit.lines().any(|l| l == line), "{line} missing: {unit}");
    }
    let units = scratch("unit");
    let checked = units.join("untether-host.service");
    std::fs::write(
        &checked,
        unit.replace(
            "ExecStart=/usr/bin/untether",
            &format!("ExecStart={}", bin.display()),
        ),
    )
    .unwrap();
    let verify = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&checked)
        .output()
        .unwrap();
    assert!(
        verify.status.success() && verify.stderr.is_empty(),
        "systemd-analyze verify: {}",
        text(&verify)
    );
    // The bash completions load and complete untether's commands.
    let out = run_ok(Command::new("bash").arg("-c").arg(format!(
        "source {} && complete -p untether && COMP_WORDS=(untether ho) COMP_CWORD=1 COMP_LINE='untether ho' COMP_POINT=11 && _untether untether ho untether && echo \"${{COMPREPLY[@]}}\"",
        root.join("usr/share/bash-completion/completions/untether").display()
    )));
    assert!(out.contains("-F _untether untether"), "{out}");
    assert!(out.lines().last().unwrap_or("").contains("host"), "{out}");
    // The man page renders.
    let page = run_ok(Command::new("sh").arg("-c").arg(format!(
        "zcat {} | man -l - 2>/dev/null | col -b",
        root.join("usr/share/man/man1/untether-host.1.gz").display()
    )));
    assert!(page.contains("--status-interval"), "{page}");
}

/// `untether generate completions` for zsh and fish (what `make install` and the package
/// install): each shell loads its script and knows untether's commands.
#[test]
fn zsh_and_fish_load_their_completions() {
    let dir = scratch("completions");
    for shell in ["zsh", "fish"] {
        let o = untether()
            .args(["generate", "completions", shell])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
    }
    let have = |shell: &str| {
        Command::new(shell)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if have("fish") {
        // fish's own completion engine, asked what `untether ho` completes to.
        let out = run_ok(
            Command::new("fish")
                .arg("--no-config")
                .arg("-c")
                .arg(format!(
                    "source {} && complete -C 'untether ho'",
                    dir.join("untether.fish").display()
                )),
        );
        assert!(
            out.lines().any(|l| l.starts_with("host\t")),
            "fish completes `untether ho` to: {out}"
        );
    } else {
        println!("skipped fish: not installed (scripts/setup.sh installs it)");
    }
    if have("zsh") {
        // compinit finds `_untether` on the fpath by its #compdef line and registers it for
        // untether; autoload +X parses it (a syntax error fails here). The fpath is the
        // scripts' directory and zsh's own Completion directory (compinit and its helpers):
        // scanning every completion zsh ships took seconds.
        let out = run_ok(Command::new("zsh").arg("-f").arg("-c").arg(format!(
            "fpath=({} ${{(M)fpath:#*/Completion}}); autoload -Uz compinit && compinit -u -D \
             && autoload +X _untether && print -r -- \"comp=${{_comps[untether]}}\" \
             && functions _untether",
            dir.display()
        )));
        assert!(out.contains("comp=_untether"), "{out}");
        assert!(out.contains("host:"), "the commands: {out}");
    } else {
        println!("skipped zsh: not installed (scripts/setup.sh installs it)");
    }
}

/// Issue 36, item 5: `make install` (and so `make deb`) finds the build where cargo put it,
/// `CARGO_TARGET_DIR` included (it looked in ./target only: "target/release/untether: No such
/// file"). Here the source tree has no ./target and the build is reached through a symbolic
/// link of another name, with nothing to build (`CARGO_BUILD=true`).
#[test]
fn make_install_takes_the_build_from_cargo_target_dir() {
    let bin = Path::new(env!("CARGO_BIN_EXE_untether"));
    let release = bin.parent().unwrap();
    if !release.join("libuntether_capture_hook.so").exists()
        || !release.join("libuntether.so").exists()
    {
        println!(
            "skipped: the libraries are not built (make test builds the whole workspace first)"
        );
        return;
    }
    let dir = scratch("target-dir");
    let elsewhere = dir.join("my-target");
    std::os::unix::fs::symlink(release.parent().unwrap(), &elsewhere).unwrap();
    let root = dir.join("root");
    // The source tree without a ./target of its own (as with CARGO_TARGET_DIR elsewhere): a
    // tree of links to the repository's entries but its target directory.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let tree = dir.join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    for e in std::fs::read_dir(&repo).unwrap().map_while(Result::ok) {
        if e.file_name() != "target" {
            std::os::unix::fs::symlink(e.path(), tree.join(e.file_name())).unwrap();
        }
    }
    let o = Command::new("make")
        .current_dir(&tree)
        .args([
            "--no-print-directory",
            "install",
            "PREFIX=/usr",
            "CARGO_BUILD=true",
        ])
        .arg(format!("DESTDIR={}", root.display()))
        .env("CARGO_TARGET_DIR", &elsewhere)
        .output()
        .expect("make runs");
    assert!(o.status.success(), "make install failed: {}", text(&o));
    for f in [
        "usr/bin/untether",
        "usr/lib/libuntether.so",
        "usr/lib/untether/libuntether_capture_hook.so",
        "usr/share/man/man1/untether.1",
    ] {
        assert!(root.join(f).exists(), "{f} not installed: {}", text(&o));
    }
    // The generated pages went to that target directory, not to ./target.
    assert!(elsewhere.join("generated/man/untether.1").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

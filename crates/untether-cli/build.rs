//! Embeds the commit this binary was built from in `untether --version`:
//! `0.1.0 (commit 67c81ba1c2d3, 2026-11-27)`. Outside a git checkout (a source tarball, a
//! packaging build without `.git`) `$UNTETHER_COMMIT` names it, else the version says so.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    println!("cargo:rerun-if-env-changed=UNTETHER_COMMIT");
    // Rebuild when HEAD moves: HEAD itself, the branch it names, and packed refs.
    for path in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", &branch]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    let commit = std::env::var("UNTETHER_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .map(|c| format!("commit {}", c.trim()))
        .or_else(|| {
            let describe = git(&["describe", "--tags", "--always", "--abbrev=12"])?;
            let date = git(&["log", "-1", "--format=%cs"]).unwrap_or_default();
            Some(if date.is_empty() {
                format!("commit {describe}")
            } else {
                format!("commit {describe}, {date}")
            })
        })
        .unwrap_or_else(|| "commit unknown: not built from a git checkout".to_string());
    println!("cargo:rustc-env=UNTETHER_VERSION={version} ({commit})");
}

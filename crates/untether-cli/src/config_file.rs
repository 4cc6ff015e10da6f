//! Where the configuration file is found without `--config`: `$XDG_CONFIG_HOME/untether/untether.toml`
//! (`~/.config/untether/untether.toml` when XDG_CONFIG_HOME is unset), then
//! `/etc/untether/untether.toml` (the system-wide one, e.g. for the host's service). The first
//! that exists is read; none is fine (the defaults apply).

use std::path::{Path, PathBuf};

/// The system-wide configuration file.
pub const SYSTEM: &str = "/etc/untether/untether.toml";

/// The per-user configuration file, from `$XDG_CONFIG_HOME` or `$HOME` (None: neither is set).
pub fn user() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    // The XDG base directory spec: a relative XDG_CONFIG_HOME is invalid and ignored.
    let base = env("XDG_CONFIG_HOME")
        .filter(|p| p.is_absolute())
        .or_else(|| env("HOME").map(|h| h.join(".config")))?;
    Some(base.join("untether").join("untether.toml"))
}

/// The places looked at without `--config`, in order.
pub fn candidates() -> Vec<PathBuf> {
    user().into_iter().chain([PathBuf::from(SYSTEM)]).collect()
}

/// Where the configuration comes from: `--config FILE` when given, else the first default file
/// that exists, else none.
pub fn resolve(explicit: Option<&Path>) -> Option<PathBuf> {
    match explicit {
        Some(p) => Some(p.to_path_buf()),
        None => candidates().into_iter().find(|p| p.is_file()),
    }
}

/// One line for `untether doctor`: which file is read, or where one would be.
pub fn describe(explicit: Option<&Path>) -> String {
    match (explicit, resolve(explicit)) {
        (Some(p), _) => format!("{} (--config)", p.display()),
        (None, Some(p)) => format!("{} (default location)", p.display()),
        (None, None) => format!(
            "none: the defaults apply (looked for {})",
            candidates()
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", then ")
        ),
    }
}

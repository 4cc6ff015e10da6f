//! `untether doctor`: is untether the OpenXR runtime OpenXR applications load here?
//! (crates/untether-openxr, docs/OPENXR.md)

use std::path::{Path, PathBuf};

use super::{check, Check, Findings, Status};

/// The manifest the OpenXR loader would use: `XR_RUNTIME_JSON`, else the first
/// `openxr/1/active_runtime.json` under `$XDG_CONFIG_HOME` (or `~/.config`), then
/// `$XDG_CONFIG_DIRS` (or `/etc/xdg`), then `/etc` — the loader's search order on Linux.
fn active_manifest() -> Option<(PathBuf, &'static str)> {
    if let Some(p) = std::env::var_os("XR_RUNTIME_JSON").filter(|p| !p.is_empty()) {
        return Some((PathBuf::from(p), "XR_RUNTIME_JSON"));
    }
    let home_config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
    let dirs = std::env::var("XDG_CONFIG_DIRS")
        .ok()
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "/etc/xdg".into());
    home_config
        .into_iter()
        .chain(dirs.split(':').map(PathBuf::from))
        .chain([PathBuf::from("/etc")])
        .map(|d| d.join("openxr/1/active_runtime.json"))
        .find(|p| p.is_file())
        .map(|p| (p, "active_runtime.json"))
}

/// Why a runtime manifest names no runtime: the manifest's path, and what is wrong.
#[derive(Debug, thiserror::Error)]
enum ManifestError {
    #[error("{}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not JSON: {source}", .path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{}: no runtime.library_path", .0.display())]
    NoLibrary(PathBuf),
}

/// What a runtime manifest says: its name and its library, resolved against the manifest.
fn read_manifest(path: &Path) -> Result<(String, PathBuf), ManifestError> {
    let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|source| ManifestError::Json {
            path: path.to_path_buf(),
            source,
        })?;
    let lib = v["runtime"]["library_path"]
        .as_str()
        .ok_or_else(|| ManifestError::NoLibrary(path.to_path_buf()))?;
    let name = v["runtime"]["name"].as_str().unwrap_or("").to_string();
    let lib = PathBuf::from(lib);
    let lib = if lib.is_relative() && lib.components().count() > 1 {
        path.parent().unwrap_or(Path::new(".")).join(lib)
    } else {
        lib
    };
    Ok((name, lib))
}

pub(super) fn openxr(f: &mut Findings) {
    const FIX: &str = "XR_RUNTIME_JSON=…/crates/untether-openxr/untether_openxr.json (or link it \
                       as ~/.config/openxr/1/active_runtime.json) after cargo build --release -p \
                       untether-openxr; docs/OPENXR.md";
    let c = match active_manifest() {
        None => Check {
            fix: FIX.into(),
            ..check(
                "openxr",
                "runtime",
                Status::Absent,
                "no active OpenXR runtime (XR_RUNTIME_JSON unset, no active_runtime.json)".into(),
            )
        },
        Some((path, how)) => match read_manifest(&path) {
            Err(e) => Check {
                fix: FIX.into(),
                ..check("openxr", "runtime", Status::Warn, format!("{how}: {e}"))
            },
            Ok((name, lib)) => {
                let ours = name == "untether"
                    || lib
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().contains("untether_openxr"));
                let where_ = format!("{} ({how}: {})", lib.display(), path.display());
                match (ours, lib.exists() || lib.components().count() == 1) {
                    (true, true) => check(
                        "openxr",
                        "runtime",
                        Status::Ok,
                        format!("untether is the active OpenXR runtime: {where_}"),
                    ),
                    (true, false) => Check {
                        fix: "cargo build --release -p untether-openxr".into(),
                        ..check(
                            "openxr",
                            "runtime",
                            Status::Warn,
                            format!("untether is the active OpenXR runtime but its library is missing: {where_}"),
                        )
                    },
                    (false, _) => Check {
                        fix: FIX.into(),
                        ..check(
                            "openxr",
                            "runtime",
                            Status::Absent,
                            format!("the active OpenXR runtime is {name:?}, not untether: {where_}"),
                        )
                    },
                }
            }
        },
    };
    f.checks.push(c);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checked_in_manifest_resolves_its_library_next_to_the_build() {
        let m =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../untether-openxr/untether_openxr.json");
        let (name, lib) = read_manifest(&m).unwrap();
        assert_eq!(name, "untether");
        assert!(
            lib.ends_with("target/release/libuntether_openxr.so"),
            "{}",
            lib.display()
        );
        let e = read_manifest(Path::new("/nonexistent/x.json")).unwrap_err();
        assert!(matches!(e, ManifestError::Read { .. }), "{e:?}");
        assert!(e.to_string().starts_with("/nonexistent/x.json: "), "{e}");
        let dir = std::env::temp_dir().join(format!("untether-manifest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let m = dir.join("m.json");
        std::fs::write(&m, "{").unwrap();
        let e = read_manifest(&m).unwrap_err();
        assert!(matches!(e, ManifestError::Json { .. }), "{e:?}");
        assert!(
            e.to_string()
                .starts_with(&format!("{}: not JSON: ", m.display())),
            "{e}"
        );
        std::fs::write(&m, r#"{"runtime": {"name": "x"}}"#).unwrap();
        let e = read_manifest(&m).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{}: no runtime.library_path", m.display())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

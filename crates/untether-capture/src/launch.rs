//! Starting an application with the capture hook: a new frame ring whose fd it inherits, the
//! hook library in `LD_PRELOAD` (the GL hook) and the Vulkan layer's manifest in a private
//! `vulkan/implicit_layer.d` put first in `XDG_DATA_DIRS`, enabled by `UNTETHER_CAPTURE=1`.
//!
//! Nothing the application loads comes from a place another user can write: the manifest is in
//! a fresh [`PrivateDir`] (random name, exclusive `mkdir`, mode 0700, checked), and the hook
//! library is refused when it or its directory is writable by anyone but this user and root.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::private_dir::{writable_by_others, PrivateDir, PrivateDirError};
use crate::ring::{FrameRing, RingError};
use crate::{HOOK_LIBRARY, LAYER_ENABLE_ENV, LAYER_NAME, RING_FD_ENV};

/// Overrides where the hook library is looked for.
pub const HOOK_LIBRARY_ENV: &str = "UNTETHER_HOOK_LIBRARY";
/// The file name of the layer's manifest.
pub const MANIFEST_NAME: &str = "VkLayer_untether_capture.json";
/// Ring slots: one the host encodes from, the newest, one the application writes.
const SLOTS: usize = 3;
/// The largest frame carried: 3840×2160 BGRA (slot pages are only allocated when written).
pub const MAX_FRAME_BYTES: usize = 3840 * 2160 * 4;

/// Why an application could not be started with capture.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Ring(#[from] RingError),
    #[error(
        "the capture hook {HOOK_LIBRARY} is not in {tried} (build it: cargo build --release \
         -p untether-capture-hook; or set {HOOK_LIBRARY_ENV})"
    )]
    NoHook { tried: String },
    #[error(
        "the capture hook {path} is not safe to load into the application: {why} (another \
         user could replace it; install it where only you or root can write)"
    )]
    UnsafeHook { path: PathBuf, why: String },
    #[error("cannot write the Vulkan layer manifest: {0}")]
    Manifest(#[from] PrivateDirError),
    #[error("cannot start {program:?}: {source}")]
    Spawn {
        program: OsString,
        source: std::io::Error,
    },
}

/// Where the hook library is: `$UNTETHER_HOOK_LIBRARY`, else next to this executable, one
/// directory up (a test binary in `target/release/deps`), or where `make install` and the
/// package put it, `../lib/untether/` from the executable (`/usr/bin/untether` →
/// `/usr/lib/untether/`).
pub fn find_hook_library() -> Result<PathBuf, LaunchError> {
    if let Some(p) = std::env::var_os(HOOK_LIBRARY_ENV) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            safe_to_load(p)
        } else {
            Err(LaunchError::NoHook {
                tried: p.display().to_string(),
            })
        };
    }
    let exe = std::env::current_exe().ok();
    let dir = exe.as_deref().and_then(Path::parent);
    let candidates: Vec<PathBuf> = dir
        .into_iter()
        .flat_map(|d| {
            [
                Some(d.to_path_buf()),
                d.parent().map(Path::to_path_buf),
                d.parent().map(|p| p.join("lib").join("untether")),
            ]
        })
        .flatten()
        .map(|d| d.join(HOOK_LIBRARY))
        .collect();
    for c in &candidates {
        if c.is_file() {
            return safe_to_load(c.canonicalize().unwrap_or_else(|_| c.clone()));
        }
    }
    Err(LaunchError::NoHook {
        tried: candidates
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// `library`, when no other user could have written it or its directory.
fn safe_to_load(library: PathBuf) -> Result<PathBuf, LaunchError> {
    match writable_by_others(&library) {
        None => Ok(library),
        Some(why) => Err(LaunchError::UnsafeHook { path: library, why }),
    }
}

/// The implicit layer's manifest for the hook library at `library`.
pub fn layer_manifest(library: &Path) -> String {
    let lib = library
        .display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    format!(
        r#"{{
  "file_format_version": "1.1.2",
  "layer": {{
    "name": "{LAYER_NAME}",
    "type": "GLOBAL",
    "library_path": "{lib}",
    "api_version": "1.3.0",
    "implementation_version": "1",
    "description": "untether: copies each presented swapchain image into the host's frame ring",
    "functions": {{
      "vkGetInstanceProcAddr": "untether_vkGetInstanceProcAddr",
      "vkGetDeviceProcAddr": "untether_vkGetDeviceProcAddr"
    }},
    "enable_environment": {{ "{LAYER_ENABLE_ENV}": "1" }},
    "disable_environment": {{ "UNTETHER_CAPTURE_DISABLE": "1" }}
  }}
}}
"#
    )
}

/// Writes the manifest into `data_dir/vulkan/implicit_layer.d/` (a directory for
/// `XDG_DATA_DIRS`) and returns its path.
pub fn write_layer_manifest(data_dir: &PrivateDir, library: &Path) -> Result<PathBuf, LaunchError> {
    let relative = Path::new("vulkan")
        .join("implicit_layer.d")
        .join(MANIFEST_NAME);
    Ok(data_dir.write_new(&relative, layer_manifest(library).as_bytes())?)
}

/// `value` first, then the rest of a colon-separated list (`default` when it is unset).
fn prepend(var: &str, value: &OsStr, default: &str) -> OsString {
    let mut v = value.to_os_string();
    let rest = std::env::var_os(var)
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| default.into());
    if !rest.is_empty() {
        v.push(":");
        v.push(rest);
    }
    v
}

/// An application started with capture, and its ring.
pub struct AppLaunch {
    pub ring: Arc<FrameRing>,
    child: Child,
    /// The manifest's directory, removed when the launch is dropped (after the application).
    data_dir: PrivateDir,
    exited: Option<ExitStatus>,
}

impl AppLaunch {
    /// Starts `program args…` with the hook; its stdio are this process's.
    pub fn spawn(program: &OsStr, args: &[OsString]) -> Result<AppLaunch, LaunchError> {
        let library = find_hook_library()?;
        let ring = Arc::new(FrameRing::create(SLOTS, MAX_FRAME_BYTES)?);
        // Until the host says its frame rate: at most 60 copies a second.
        ring.set_interval(Duration::from_micros(16_667));
        let data_dir = PrivateDir::create("untether-run")?;
        write_layer_manifest(&data_dir, &library)?;
        let fd = ring.raw_fd();
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env(RING_FD_ENV, fd.to_string())
            .env(LAYER_ENABLE_ENV, "1")
            .env("LD_PRELOAD", prepend("LD_PRELOAD", library.as_os_str(), ""))
            .env(
                "XDG_DATA_DIRS",
                prepend(
                    "XDG_DATA_DIRS",
                    data_dir.as_os_str(),
                    "/usr/local/share:/usr/share",
                ),
            );
        // SAFETY: the closure only calls fcntl, which is async-signal-safe, on an fd that
        // stays open in the parent for the child's whole life.
        unsafe {
            cmd.pre_exec(move || {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|source| LaunchError::Spawn {
            program: program.to_os_string(),
            source,
        })?;
        Ok(AppLaunch {
            ring,
            child,
            data_dir,
            exited: None,
        })
    }

    /// The directory first in the application's `XDG_DATA_DIRS` (the layer's manifest is in
    /// its `vulkan/implicit_layer.d`): private to this user, removed with the launch.
    pub fn data_dir(&self) -> &Path {
        self.data_dir.path()
    }

    /// The application's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status once it has exited (None while it runs).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// Ends the application: SIGTERM, then SIGKILL after `grace`; returns its status.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if self.exited().is_some() {
            return self.exited;
        }
        // SAFETY: kill on our own child's pid (not yet reaped, so not reused).
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return self.exited;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        self.exited = self.child.wait().ok();
        self.exited
    }
}

impl Drop for AppLaunch {
    fn drop(&mut self) {
        // The application first: the directory (dropped after this) goes once it has exited.
        self.stop(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests set process-wide variables: one at a time.
    static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn the_manifest_names_the_layer_its_library_and_the_enabling_variable() {
        let m = layer_manifest(Path::new("/opt/u/libuntether_capture_hook.so"));
        assert!(m.contains(r#""name": "VK_LAYER_UNTETHER_capture""#));
        assert!(m.contains(r#""library_path": "/opt/u/libuntether_capture_hook.so""#));
        assert!(m.contains(r#""enable_environment": { "UNTETHER_CAPTURE": "1" }"#));
    }

    #[test]
    fn a_missing_hook_library_is_a_clear_error_naming_the_build_command() {
        let _env = ENV.lock();
        std::env::set_var(HOOK_LIBRARY_ENV, "/nonexistent/libuntether_capture_hook.so");
        let e = find_hook_library().err().unwrap().to_string();
        std::env::remove_var(HOOK_LIBRARY_ENV);
        assert!(e.contains("/nonexistent/"), "{e}");
        assert!(
            e.contains("cargo build --release -p untether-capture-hook"),
            "{e}"
        );
    }

    #[test]
    fn the_application_inherits_the_ring_and_its_writes_reach_the_host() {
        // A shell as the "application": it sees the fd and the variables.
        let _env = ENV.lock();
        std::env::set_var(HOOK_LIBRARY_ENV, "/bin/sh"); // any file: the shell ignores it
        let out = std::env::temp_dir().join(format!("untether-launch-{}", std::process::id()));
        let script = format!(
            "test -e /proc/self/fd/${RING_FD_ENV} && echo \"$UNTETHER_CAPTURE $XDG_DATA_DIRS\" > {}",
            out.display()
        );
        let mut app =
            AppLaunch::spawn(OsStr::new("/bin/sh"), &["-c".into(), script.into()]).unwrap();
        std::env::remove_var(HOOK_LIBRARY_ENV);
        let deadline = Instant::now() + Duration::from_secs(10);
        while app.exited().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(app.exited().is_some_and(|s| s.success()));
        let text = std::fs::read_to_string(&out).unwrap();
        let _ = std::fs::remove_file(&out);
        assert!(text.starts_with("1 "), "{text}");
        assert!(text.contains("untether-run-"), "{text}");
        assert!(app
            .data_dir
            .path()
            .join("vulkan/implicit_layer.d")
            .join(MANIFEST_NAME)
            .is_file());
    }

    /// The attack of issue 33: a second local user plants, under the temporary directory, the
    /// names the launcher once used (`untether-run-PID-N`), each with the manifest's name as a
    /// symlink to a file of the victim's. The application must get a directory of its own user
    /// (mode 0700) and the victim's file must be untouched.
    #[test]
    fn another_users_planted_directories_and_links_are_never_used() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root to act as a second local user (setpriv)");
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        let _env = ENV.lock();
        let pid = std::process::id();
        let shared = std::env::temp_dir().join(format!("untether-shared-{pid}"));
        let _ = std::fs::remove_dir_all(&shared);
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let victim = shared.join("victim.txt");
        std::fs::write(&victim, "precious").unwrap();
        let plant = format!(
            "for n in 0 1 2 3 4 5 6 7; do d={s}/untether-run-{pid}-$n/vulkan/implicit_layer.d; \
             mkdir -p $d && ln -s {v} $d/{MANIFEST_NAME} || exit 1; done",
            s = shared.display(),
            v = victim.display()
        );
        let planted = Command::new("setpriv")
            .args([
                "--reuid=61234",
                "--regid=61234",
                "--clear-groups",
                "sh",
                "-c",
            ])
            .arg(&plant)
            .status()
            .unwrap();
        assert!(planted.success(), "the second user planted its names");
        let out = shared.join("seen");
        let saved = (
            std::env::var_os("TMPDIR"),
            std::env::var_os("XDG_RUNTIME_DIR"),
        );
        std::env::set_var("TMPDIR", &shared);
        std::env::remove_var("XDG_RUNTIME_DIR");
        std::env::set_var(HOOK_LIBRARY_ENV, "/bin/sh");
        let script = format!(
            "d=${{XDG_DATA_DIRS%%:*}}; stat -c '%u %a' \"$d\" > {o}; \
             cat \"$d/vulkan/implicit_layer.d/{MANIFEST_NAME}\" >> {o}",
            o = out.display()
        );
        let launched = AppLaunch::spawn(OsStr::new("/bin/sh"), &["-c".into(), script.into()]);
        std::env::remove_var(HOOK_LIBRARY_ENV);
        match saved.0 {
            Some(v) => std::env::set_var("TMPDIR", v),
            None => std::env::remove_var("TMPDIR"),
        }
        if let Some(v) = saved.1 {
            std::env::set_var("XDG_RUNTIME_DIR", v);
        }
        let mut app = launched.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while app.exited().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let seen = std::fs::read_to_string(&out).unwrap_or_default();
        let untouched = std::fs::read_to_string(&victim).unwrap();
        drop(app);
        let _ = std::fs::remove_dir_all(&shared);
        assert_eq!(
            untouched, "precious",
            "the victim's file was written through"
        );
        assert!(
            seen.starts_with("0 700\n"),
            "the application's layer directory is root's and private: {seen}"
        );
        assert!(seen.contains(r#""library_path": "/bin/sh""#), "{seen}");
    }
}

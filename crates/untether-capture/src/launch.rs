//! Starting an application with the capture hook: a new frame ring whose fd it inherits, the
//! hook library in `LD_PRELOAD` (the GL hook) and the Vulkan layer's manifest in a private
//! `vulkan/implicit_layer.d` put first in `XDG_DATA_DIRS`, enabled by `UNTETHER_CAPTURE=1`.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    #[error("cannot write the Vulkan layer manifest {path}: {source}")]
    Manifest {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start {program:?}: {source}")]
    Spawn {
        program: OsString,
        source: std::io::Error,
    },
}

/// Where the hook library is: `$UNTETHER_HOOK_LIBRARY`, else next to this executable or one
/// directory up (a test binary in `target/release/deps`).
pub fn find_hook_library() -> Result<PathBuf, LaunchError> {
    if let Some(p) = std::env::var_os(HOOK_LIBRARY_ENV) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
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
        .flat_map(|d| [Some(d.to_path_buf()), d.parent().map(Path::to_path_buf)])
        .flatten()
        .map(|d| d.join(HOOK_LIBRARY))
        .collect();
    for c in &candidates {
        if c.is_file() {
            return Ok(c.canonicalize().unwrap_or_else(|_| c.clone()));
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
pub fn write_layer_manifest(data_dir: &Path, library: &Path) -> Result<PathBuf, LaunchError> {
    let dir = data_dir.join("vulkan").join("implicit_layer.d");
    let path = dir.join(MANIFEST_NAME);
    std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::write(&path, layer_manifest(library)))
        .map_err(|source| LaunchError::Manifest {
            path: path.clone(),
            source,
        })?;
    Ok(path)
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
    data_dir: PathBuf,
    exited: Option<ExitStatus>,
}

impl AppLaunch {
    /// Starts `program args…` with the hook; its stdio are this process's.
    pub fn spawn(program: &OsStr, args: &[OsString]) -> Result<AppLaunch, LaunchError> {
        let library = find_hook_library()?;
        let ring = Arc::new(FrameRing::create(SLOTS, MAX_FRAME_BYTES)?);
        // Until the host says its frame rate: at most 60 copies a second.
        ring.set_interval(Duration::from_micros(16_667));
        static LAUNCHES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let data_dir =
            std::env::temp_dir().join(format!("untether-run-{}-{n}", std::process::id()));
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
        self.stop(Duration::from_secs(2));
        let _ = std::fs::remove_dir_all(&self.data_dir);
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
            .join("vulkan/implicit_layer.d")
            .join(MANIFEST_NAME)
            .is_file());
    }
}

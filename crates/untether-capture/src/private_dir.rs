//! A directory only this user can write, for what `untether run` hands the application (the
//! Vulkan layer's manifest): made fresh under `$XDG_RUNTIME_DIR` (when it is this user's and
//! private) or the temporary directory, with a random name, by one `mkdir` that fails on any
//! existing name (a planted directory or symlink is never reused), then checked on the opened
//! directory itself: owned by this user, mode 0700.

use std::ffi::OsStr;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why a private directory could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PrivateDirError {
    #[error("cannot make a private directory under {base}: {source}")]
    Create {
        base: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not private: {why} (made by this process, so another user raced it)")]
    NotPrivate { path: PathBuf, why: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no random bytes for a directory name: {0}")]
    Random(std::io::Error),
}

/// A fresh directory of this user's, mode 0700; removed with everything in it when dropped.
#[derive(Debug)]
pub struct PrivateDir {
    path: PathBuf,
}

/// How many names are tried before giving up (a collision of 64 random bits is a planted
/// name, not chance).
const TRIES: usize = 8;

impl PrivateDir {
    /// A new directory named `PREFIX-` and 16 random hex digits, in [`base_dir`].
    pub fn create(prefix: &str) -> Result<PrivateDir, PrivateDirError> {
        Self::create_in(
            &base_dir(std::env::var_os("XDG_RUNTIME_DIR").as_deref()),
            prefix,
        )
    }

    /// A new directory named `PREFIX-` and 16 random hex digits in `base`.
    pub fn create_in(base: &Path, prefix: &str) -> Result<PrivateDir, PrivateDirError> {
        let mut last = None;
        for _ in 0..TRIES {
            let path = base.join(format!("{prefix}-{:016x}", random_u64()?));
            // mkdir(2) makes a new directory or fails: an existing name (a directory, a file,
            // a symlink, whoever made it) is never taken over.
            match DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    let dir = PrivateDir { path };
                    dir.check()?;
                    return Ok(dir);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(source) => {
                    return Err(PrivateDirError::Create {
                        base: base.to_path_buf(),
                        source,
                    })
                }
            }
        }
        Err(PrivateDirError::Create {
            base: base.to_path_buf(),
            source: last.unwrap_or_else(|| std::io::ErrorKind::AlreadyExists.into()),
        })
    }

    /// Checks the directory as opened (no symlink followed): this user's, no access for others.
    fn check(&self) -> Result<(), PrivateDirError> {
        let not_private = |why: String| PrivateDirError::NotPrivate {
            path: self.path.clone(),
            why,
        };
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(&self.path)
            .map_err(|e| not_private(format!("cannot open it as a directory: {e}")))?;
        let meta = dir
            .metadata()
            .map_err(|e| not_private(format!("cannot stat it: {e}")))?;
        if let Some(why) = foreign(&meta) {
            return Err(not_private(why));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(not_private(format!("mode {:o}", meta.mode() & 0o777)));
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes a new file at `relative` (its missing directories made 0700), refusing an
    /// existing name and any symlink on the way: only this user can write in the directory,
    /// so what is read back is what was written here.
    pub fn write_new(&self, relative: &Path, bytes: &[u8]) -> Result<PathBuf, PrivateDirError> {
        let path = self.path.join(relative);
        let err = |source| PrivateDirError::Write {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(parent)
                .map_err(err)?;
        }
        let mut f: File = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(err)?;
        f.write_all(bytes).map_err(err)?;
        Ok(path)
    }

    /// The path as an `OsStr` (for environment variables).
    pub fn as_os_str(&self) -> &OsStr {
        self.path.as_os_str()
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Where private directories go: `runtime_dir` (`$XDG_RUNTIME_DIR`) when it is an absolute
/// directory of this user's that no one else can enter, else the temporary directory (where the
/// random name and the exclusive `mkdir` keep others out).
pub fn base_dir(runtime_dir: Option<&OsStr>) -> PathBuf {
    let usable = |p: &Path| {
        p.is_absolute()
            && std::fs::symlink_metadata(p)
                .is_ok_and(|m| m.is_dir() && foreign(&m).is_none() && m.mode() & 0o077 == 0)
    };
    match runtime_dir.map(Path::new) {
        Some(p) if usable(p) => p.to_path_buf(),
        _ => std::env::temp_dir(),
    }
}

/// Why a file or directory is not this user's (None: it is).
fn foreign(meta: &std::fs::Metadata) -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    (meta.uid() != me).then(|| format!("owned by uid {}, not {me}", meta.uid()))
}

/// Whether a file this user's process will load could have been written by another user: the
/// file or its directory owned by someone other than this user or root, or writable by group
/// or others. None: it could not.
pub fn writable_by_others(path: &Path) -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let dir = path.parent().unwrap_or(Path::new("/"));
    for (p, what) in [(path, "it"), (dir, "its directory")] {
        let m = match std::fs::metadata(p) {
            Ok(m) => m,
            Err(e) => return Some(format!("cannot stat {what} ({}): {e}", p.display())),
        };
        if m.uid() != me && m.uid() != 0 {
            return Some(format!(
                "{what} ({}) is owned by uid {}",
                p.display(),
                m.uid()
            ));
        }
        // A sticky directory (/tmp) lets others add names but not replace this one.
        let sticky_dir = m.is_dir() && m.mode() & 0o1000 != 0;
        if m.mode() & 0o022 != 0 && !sticky_dir {
            return Some(format!(
                "{what} ({}) is writable by others (mode {:o})",
                p.display(),
                m.mode() & 0o7777
            ));
        }
    }
    None
}

fn random_u64() -> Result<u64, PrivateDirError> {
    let mut b = [0u8; 8];
    let mut got = 0;
    while got < b.len() {
        // SAFETY: the buffer is valid for the remaining length.
        let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), b.len() - got, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(PrivateDirError::Random(e));
        }
        got += n as usize;
    }
    Ok(u64::from_ne_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("untether-pd-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn each_directory_is_new_private_and_gone_when_dropped() {
        let base = scratch("new");
        let a = PrivateDir::create_in(&base, "x").unwrap();
        let b = PrivateDir::create_in(&base, "x").unwrap();
        assert_ne!(a.path(), b.path());
        let m = std::fs::metadata(a.path()).unwrap();
        assert_eq!(m.mode() & 0o777, 0o700);
        let f = a.write_new(Path::new("v/d/f.json"), b"{}").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"{}");
        assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o600);
        // A second write of the same name is refused, not a replacement.
        assert!(a.write_new(Path::new("v/d/f.json"), b"other").is_err());
        let p = a.path().to_path_buf();
        drop(a);
        assert!(!p.exists());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_symlink_where_a_file_goes_is_refused_and_not_followed() {
        let base = scratch("link");
        let d = PrivateDir::create_in(&base, "x").unwrap();
        let victim = base.join("victim");
        std::fs::write(&victim, b"mine").unwrap();
        std::os::unix::fs::symlink(&victim, d.path().join("m.json")).unwrap();
        assert!(d.write_new(Path::new("m.json"), b"evil").is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"mine");
        drop(d);
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_runtime_dir_that_is_not_private_or_not_absolute_is_not_used() {
        let base = scratch("rt");
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(base_dir(Some(base.as_os_str())), base);
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(base_dir(Some(base.as_os_str())), std::env::temp_dir());
        assert_eq!(base_dir(Some(OsStr::new("run/user"))), std::env::temp_dir());
        assert_eq!(base_dir(None), std::env::temp_dir());
        let link = base.with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&base, &link).unwrap();
        assert_eq!(
            base_dir(Some(link.as_os_str())),
            std::env::temp_dir(),
            "a symlink is not the user's runtime directory"
        );
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_library_in_a_directory_others_can_write_is_named() {
        let base = scratch("lib");
        let lib = base.join("libx.so");
        std::fs::write(&lib, b"").unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(writable_by_others(&lib), None);
        std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(writable_by_others(&lib).is_some_and(|w| w.contains("writable by others")));
        std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(writable_by_others(&lib).is_some_and(|w| w.contains("its directory")));
        let _ = std::fs::remove_dir_all(&base);
    }
}

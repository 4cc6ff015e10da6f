//! Where a host (`untether host`, the OpenXR runtime's) puts the secrets it hands the operator:
//! the browsers' one-time link and the pairing PIN. On a terminal they are printed (the operator reads them there); when
//! the output is not a terminal (a service's journal, a log file, a pipe) they go to the state
//! directory, mode 0600, and the output says where, so they are never logged. Without a state
//! directory there is no private place: they are printed, as the only way to pair.

use std::path::{Path, PathBuf};

use super::{StateDir, BROWSER_LINK_FILE, PIN_FILE};

/// Where the host's secrets go.
#[derive(Debug, PartialEq, Eq)]
pub struct Secrets {
    /// The state directory to write them to instead of printing them; None: print.
    kept_in: Option<PathBuf>,
}

impl Secrets {
    /// For a host whose standard error is (or is not) a terminal, with this state directory.
    pub fn new(stderr_is_terminal: bool, state_dir: Option<&Path>) -> Secrets {
        Secrets {
            kept_in: state_dir
                .filter(|_| !stderr_is_terminal)
                .map(Path::to_path_buf),
        }
    }

    /// For this process's standard error.
    pub fn for_stderr(state_dir: Option<&Path>) -> Secrets {
        use std::io::IsTerminal;
        Secrets::new(std::io::stderr().is_terminal(), state_dir)
    }

    /// The line telling browsers where to go, with the one-time `link` (valid `ttl_s`) or the
    /// file it is written to; `url` is the page without a token (the PIN form).
    pub fn browser_access(&self, link: &str, url: &str, ttl_s: u64) -> String {
        match &self.kept_in {
            None => format!(
                "untether host: browsers: open {link} (one browser, valid {ttl_s} s; a new link \
                 is printed when it is used), or {url} and the pairing PIN"
            ),
            Some(dir) => {
                let file = dir.join(BROWSER_LINK_FILE);
                match StateDir::at(dir).write_browser_link(link) {
                    Ok(()) => format!(
                        "untether host: browsers: {url} with the one-time link in {} (readable \
                         by this user only; valid {ttl_s} s, replaced once used), or {url} and \
                         the pairing PIN",
                        file.display()
                    ),
                    Err(e) => format!(
                        "untether host: browsers: {url} and the pairing PIN (the one-time link \
                         is not printed where it could be logged, and {} cannot be written: {e})",
                        file.display()
                    ),
                }
            }
        }
    }

    /// The line for a new one-time link (the last one was used or expired), if one is said.
    pub fn browser_link_renewed(&self, link: &str) -> Option<String> {
        match &self.kept_in {
            None => Some(format!(
                "untether host: browser link (the last one was used or expired): {link}"
            )),
            Some(dir) => match StateDir::at(dir).write_browser_link(link) {
                Ok(()) => None,
                Err(e) => Some(format!(
                    "untether host: the new browser link cannot be written to {}: {e}",
                    dir.join(BROWSER_LINK_FILE).display()
                )),
            },
        }
    }

    /// The line saying a pairing PIN is active (valid `ttl_s`): the PIN itself, or where it is.
    pub fn pairing_pin(&self, pin: &str, ttl_s: u64) -> String {
        match &self.kept_in {
            None => format!(
                "untether host: pairing PIN {pin} — on the client: untether client THIS-HOST \
                 --pin {pin} (valid {ttl_s} s, one client)"
            ),
            Some(dir) => format!(
                "untether host: a pairing PIN is active (valid {ttl_s} s, one client): it is in \
                 {} (readable by this user only) and on the dashboard; on the client: untether \
                 client THIS-HOST --pin PIN",
                dir.join(PIN_FILE).display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("untether-secrets-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn on_a_terminal_or_without_a_state_directory_they_are_printed() {
        for s in [
            Secrets::new(true, Some(Path::new("/x"))),
            Secrets::new(false, None),
        ] {
            let t = s.browser_access("http://h/?token=SECRET", "http://h/", 60);
            assert!(t.contains("token=SECRET"), "{t}");
            assert!(s
                .browser_link_renewed("L2")
                .is_some_and(|t| t.contains("L2")));
            assert!(s.pairing_pin("123456", 300).contains("--pin 123456"));
        }
    }

    #[test]
    fn elsewhere_they_go_to_the_state_directory_and_the_output_says_where() {
        let d = dir("kept");
        let s = Secrets::new(false, Some(&d));
        let t = s.browser_access("http://h/?token=SECRET", "http://h/", 60);
        assert!(!t.contains("SECRET"), "{t}");
        assert!(
            t.contains(&d.join(BROWSER_LINK_FILE).display().to_string()),
            "{t}"
        );
        let file = d.join(BROWSER_LINK_FILE);
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "http://h/?token=SECRET\n"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // A renewed link replaces it, and nothing is said.
        assert_eq!(s.browser_link_renewed("http://h/?token=NEXT"), None);
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "http://h/?token=NEXT\n"
        );
        let t = s.pairing_pin("123456", 300);
        assert!(!t.contains("123456") && t.contains(PIN_FILE), "{t}");
        let _ = std::fs::remove_dir_all(&d);
    }
}

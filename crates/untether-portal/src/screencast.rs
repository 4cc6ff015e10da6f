//! The desktop portal's ScreenCast on the session bus: CreateSession → SelectSources (a monitor
//! or a window, the cursor embedded, `persist_mode` 2 with the stored restore token) → Start
//! (the user's dialog; the streams' PipeWire node ids and a new restore token) →
//! OpenPipeWireRemote (the PipeWire socket the stream is read from).
//!
//! Each request answers with an `org.freedesktop.portal.Request` `Response` signal on a path
//! made of our unique bus name and a handle token; we subscribe before calling, then run a
//! private main context until it arrives.

use std::cell::RefCell;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gio::prelude::*;
use gio::{DBusCallFlags, DBusConnection, DBusSignalFlags};
use gst::glib::{self, Variant, VariantDict};

use crate::PortalError;

const PORTAL: &str = "org.freedesktop.portal.Desktop";
const PORTAL_PATH: &str = "/org/freedesktop/portal/desktop";
const SCREENCAST: &str = "org.freedesktop.portal.ScreenCast";
const REQUEST: &str = "org.freedesktop.portal.Request";
/// Source types: monitor (1) and window (2); the user (or the backend's chooser) picks.
const MONITOR_OR_WINDOW: u32 = 1 | 2;
/// Cursor modes: hidden (1), embedded (2), metadata (4).
const CURSOR_EMBEDDED: u32 = 2;
/// Persist the permission until it is revoked (needs ScreenCast version 4).
const PERSIST_UNTIL_REVOKED: u32 = 2;
/// How long the user may take in the portal's dialog.
const DIALOG_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a request without a dialog may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// A started screen cast: the PipeWire remote and the node to read.
pub struct Cast {
    /// The PipeWire socket the portal opened for us.
    pub remote: OwnedFd,
    /// The stream's PipeWire node id.
    pub node: u32,
    /// The stream's size where the portal said it.
    pub size: Option<(u32, u32)>,
    /// Whether a stored restore token was offered.
    pub restored: bool,
    /// Whether the portal gave a restore token for next time (stored in the token file).
    pub persisted: bool,
    /// The portal's ScreenCast interface version.
    pub version: u32,
    /// The session (closed when the capture ends).
    session: String,
    conn: DBusConnection,
}

impl Drop for Cast {
    fn drop(&mut self) {
        close_session(&self.conn, &self.session);
    }
}

fn close_session(conn: &DBusConnection, session: &str) {
    let _ = conn.call_sync(
        Some(PORTAL),
        session,
        "org.freedesktop.portal.Session",
        "Close",
        None,
        None,
        DBusCallFlags::NONE,
        2000,
        None::<&gio::Cancellable>,
    );
}

/// What the portal offers (its ScreenCast properties).
#[derive(Debug, Clone, Copy)]
pub struct Offer {
    pub version: u32,
    pub source_types: u32,
    pub cursor_modes: u32,
}

/// Connects to the session bus (a clear error when there is none).
pub fn session_bus() -> Result<DBusConnection, PortalError> {
    gio::bus_get_sync(gio::BusType::Session, None::<&gio::Cancellable>).map_err(|e| {
        PortalError::NoSessionBus(format!(
            "{e}{}",
            if std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_none() {
                " (DBUS_SESSION_BUS_ADDRESS is unset)"
            } else {
                ""
            }
        ))
    })
}

fn property(conn: &DBusConnection, name: &str) -> Result<u32, PortalError> {
    let reply = conn
        .call_sync(
            Some(PORTAL),
            PORTAL_PATH,
            "org.freedesktop.DBus.Properties",
            "Get",
            Some(&(SCREENCAST, name).to_variant()),
            Some(glib::VariantTy::new("(v)").expect("a valid type string")),
            DBusCallFlags::NONE,
            REQUEST_TIMEOUT.as_millis() as i32,
            None::<&gio::Cancellable>,
        )
        .map_err(|e| {
            let text = e.to_string();
            if text.contains("ServiceUnknown") || text.contains("was not provided") {
                PortalError::NoPortal(text)
            } else {
                PortalError::NoScreenCast(text)
            }
        })?;
    reply
        .child_value(0)
        .as_variant()
        .and_then(|v| v.get::<u32>())
        .ok_or_else(|| PortalError::Protocol(format!("ScreenCast {name} is not a u32")))
}

/// The portal's ScreenCast version, source types and cursor modes.
pub fn offer(conn: &DBusConnection) -> Result<Offer, PortalError> {
    Ok(Offer {
        version: property(conn, "version")?,
        source_types: property(conn, "AvailableSourceTypes")?,
        cursor_modes: property(conn, "AvailableCursorModes")?,
    })
}

/// Issues one request and waits for its Response: Ok(results) for 0, the cancel (1) and
/// other (2) answers as errors naming the step.
struct Requests {
    conn: DBusConnection,
    sender: String,
    ctx: glib::MainContext,
}

impl Requests {
    fn call(
        &mut self,
        method: &str,
        args: impl FnOnce(&str) -> Variant,
        timeout: Duration,
    ) -> Result<VariantDict, PortalError> {
        // Unique in this process: the portal refuses a request or session path used before.
        static NEXT: AtomicU32 = AtomicU32::new(1);
        let token = format!(
            "untether{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = format!("{PORTAL_PATH}/request/{}/{token}", self.sender);
        let answer: Rc<RefCell<Option<(u32, Variant)>>> = Rc::default();
        let ctx = self.ctx.clone();
        ctx.with_thread_default(|| {
            let slot = answer.clone();
            let _sub = self.conn.subscribe_to_signal(
                Some(PORTAL),
                Some(REQUEST),
                Some("Response"),
                Some(&path),
                None,
                DBusSignalFlags::NONE,
                move |sig| {
                    if let Some((code, results)) = sig.parameters.get::<(u32, VariantDict)>() {
                        *slot.borrow_mut() = Some((code, results.end()));
                    }
                },
            );
            self.conn
                .call_sync(
                    Some(PORTAL),
                    PORTAL_PATH,
                    SCREENCAST,
                    method,
                    Some(&args(&token)),
                    None,
                    DBusCallFlags::NONE,
                    REQUEST_TIMEOUT.as_millis() as i32,
                    None::<&gio::Cancellable>,
                )
                .map_err(|e| PortalError::Request(method.into(), e.to_string()))?;
            let expired = Arc::new(AtomicBool::new(false));
            let flag = expired.clone();
            let timer =
                glib::timeout_source_new(timeout, None, glib::Priority::DEFAULT, move || {
                    flag.store(true, Ordering::Relaxed);
                    glib::ControlFlow::Break
                });
            timer.attach(Some(&ctx));
            while answer.borrow().is_none() && !expired.load(Ordering::Relaxed) {
                ctx.iteration(true);
            }
            timer.destroy();
            Ok::<(), PortalError>(())
        })
        .map_err(|e| PortalError::Protocol(format!("main context: {e}")))??;
        let Some((code, results)) = answer.take() else {
            return Err(PortalError::Request(
                method.into(),
                format!("no answer in {} s", timeout.as_secs()),
            ));
        };
        match code {
            0 => Ok(VariantDict::new(Some(&results))),
            1 => Err(PortalError::Cancelled(method.into())),
            c => Err(PortalError::Request(
                method.into(),
                format!(
                    "the portal ended the request (response {c}: its backend failed or refused{})",
                    if method == "Start" {
                        "; its log says why, e.g. xdg-desktop-portal-wlr 0.7 needs a compositor \
                         with DMA-BUF, i.e. a GPU"
                    } else {
                        ""
                    }
                ),
            )),
        }
    }
}

fn options(token: &str) -> VariantDict {
    let d = VariantDict::new(None);
    d.insert("handle_token", token);
    d
}

/// Opens a screen cast: one session, the user's choice (or the stored permission), the first
/// stream's node and the PipeWire remote. A stored token the portal refuses is dropped and the
/// user is asked again (one log line).
pub fn open(token_file: Option<&Path>) -> Result<Cast, PortalError> {
    let conn = session_bus()?;
    let offer = offer(&conn)?;
    let stored = token_file.and_then(read_token);
    match open_with(&conn, &offer, token_file, stored.as_deref()) {
        Err(e @ PortalError::Cancelled(_)) => Err(e),
        Err(e) if stored.is_some() => {
            log::warn!("portal: the stored restore token was refused ({e}); asking again");
            if let Some(f) = token_file {
                let _ = std::fs::remove_file(f);
            }
            open_with(&conn, &offer, token_file, None)
        }
        r => r,
    }
}

fn open_with(
    conn: &DBusConnection,
    offer: &Offer,
    token_file: Option<&Path>,
    restore: Option<&str>,
) -> Result<Cast, PortalError> {
    let sender = conn
        .unique_name()
        .ok_or_else(|| PortalError::Protocol("no unique name on the session bus".into()))?
        .trim_start_matches(':')
        .replace('.', "_");
    let mut req = Requests {
        conn: conn.clone(),
        sender,
        ctx: glib::MainContext::new(),
    };
    let created = req.call(
        "CreateSession",
        |t| {
            let d = options(t);
            d.insert("session_handle_token", t);
            Variant::tuple_from_iter([d.end()])
        },
        REQUEST_TIMEOUT,
    )?;
    let session: String = created
        .lookup::<String>("session_handle")
        .ok()
        .flatten()
        .ok_or_else(|| PortalError::Protocol("CreateSession gave no session_handle".into()))?;
    let session_path = glib::variant::ObjectPath::try_from(session.clone())
        .map_err(|_| PortalError::Protocol(format!("bad session handle {session:?}")))?;
    start_session(conn, &mut req, offer, &session_path, token_file, restore).inspect_err(|_| {
        close_session(conn, &session);
    })
}

/// SelectSources, Start and OpenPipeWireRemote on a created session.
fn start_session(
    conn: &DBusConnection,
    req: &mut Requests,
    offer: &Offer,
    session_path: &glib::variant::ObjectPath,
    token_file: Option<&Path>,
    restore: Option<&str>,
) -> Result<Cast, PortalError> {
    let session = session_path.as_str().to_string();
    let persist = offer.version >= 4;
    req.call(
        "SelectSources",
        |t| {
            let d = options(t);
            d.insert("types", offer.source_types & MONITOR_OR_WINDOW);
            d.insert("multiple", false);
            if offer.cursor_modes & CURSOR_EMBEDDED != 0 {
                d.insert("cursor_mode", CURSOR_EMBEDDED);
            }
            if persist {
                d.insert("persist_mode", PERSIST_UNTIL_REVOKED);
                if let Some(tok) = restore {
                    d.insert("restore_token", tok);
                }
            }
            Variant::tuple_from_iter([session_path.to_variant(), d.end()])
        },
        REQUEST_TIMEOUT,
    )?;
    let started = req.call(
        "Start",
        |t| {
            Variant::tuple_from_iter([session_path.to_variant(), "".to_variant(), options(t).end()])
        },
        DIALOG_TIMEOUT,
    )?;
    let streams = started
        .lookup_value(
            "streams",
            Some(glib::VariantTy::new("a(ua{sv})").expect("type")),
        )
        .ok_or_else(|| PortalError::Protocol("Start gave no streams".into()))?;
    if streams.n_children() == 0 {
        return Err(PortalError::Protocol("Start gave no stream".into()));
    }
    let first = streams.child_value(0);
    let node = first.child_value(0).get::<u32>().unwrap_or_default();
    let props = VariantDict::new(Some(&first.child_value(1)));
    let size = props
        .lookup::<(i32, i32)>("size")
        .ok()
        .flatten()
        .and_then(|(w, h)| Some((u32::try_from(w).ok()?, u32::try_from(h).ok()?)));
    let new_token = started.lookup::<String>("restore_token").ok().flatten();
    if let (Some(f), Some(tok)) = (token_file, &new_token) {
        if let Err(e) = write_token(f, tok) {
            log::warn!(
                "portal: cannot store the restore token in {}: {e}",
                f.display()
            );
        }
    }
    let (reply, fds) = conn
        .call_with_unix_fd_list_sync(
            Some(PORTAL),
            PORTAL_PATH,
            SCREENCAST,
            "OpenPipeWireRemote",
            Some(&Variant::tuple_from_iter([
                session_path.to_variant(),
                VariantDict::new(None).end(),
            ])),
            Some(glib::VariantTy::new("(h)").expect("type")),
            DBusCallFlags::NONE,
            REQUEST_TIMEOUT.as_millis() as i32,
            None::<&gio::UnixFDList>,
            None::<&gio::Cancellable>,
        )
        .map_err(|e| PortalError::Request("OpenPipeWireRemote".into(), e.to_string()))?;
    let index = reply
        .child_value(0)
        .get::<glib::variant::Handle>()
        .map(|h| h.0);
    let remote = match (fds, index) {
        (Some(list), Some(i)) => list
            .get(i)
            .map_err(|e| PortalError::Request("OpenPipeWireRemote".into(), e.to_string()))?,
        _ => {
            return Err(PortalError::Protocol(
                "OpenPipeWireRemote gave no file descriptor".into(),
            ))
        }
    };
    Ok(Cast {
        remote,
        node,
        size,
        restored: restore.is_some(),
        persisted: new_token.is_some(),
        version: offer.version,
        session,
        conn: conn.clone(),
    })
}

/// The stored restore token (None: no file, or an empty one).
pub fn read_token(path: &Path) -> Option<String> {
    let t = std::fs::read_to_string(path).ok()?;
    let t = t.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// Stores the restore token, readable by the owner only.
pub fn write_token(path: &Path, token: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = PathBuf::from(format!("{}.tmp", path.display()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(token.as_bytes())?;
    f.write_all(b"\n")?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_restore_token_is_stored_private_and_read_back_trimmed() {
        let dir = std::env::temp_dir().join(format!("untether-token-{}", std::process::id()));
        let path = dir.join("state").join("portal-restore-token");
        assert_eq!(read_token(&path), None);
        write_token(&path, "6c0b6d3e-token").unwrap();
        assert_eq!(read_token(&path).as_deref(), Some("6c0b6d3e-token"));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(&path, "  \n").unwrap();
        assert_eq!(read_token(&path), None, "an empty file is no token");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn without_a_session_bus_the_error_says_so() {
        // A bus address that cannot exist: gio fails to connect, naming the address.
        std::env::set_var(
            "DBUS_SESSION_BUS_ADDRESS",
            "unix:path=/nonexistent/untether-bus",
        );
        let e = open(None).err().expect("no bus").to_string();
        assert!(e.starts_with("no D-Bus session bus"), "{e}");
    }
}

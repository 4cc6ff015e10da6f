//! The runtime's objects and their locks: the instance in one slot, sessions, spaces and
//! swapchains each in their own [`Table`] (action sets and actions have theirs in
//! [`crate::actions`]). Handles are numbers from one counter ([`crate::table::new_handle`],
//! never reused), so a stale or foreign handle is `XR_ERROR_HANDLE_INVALID`, not a crash.
//!
//! Locks, outermost first (a thread holding one only ever takes those below it):
//!
//! 1. a session's own lock ([`with_session`]): one at a time, never two sessions' (only
//!    [`crate::session::follow_clients`] takes several, one after the other);
//! 2. an action set's state lock ([`crate::actions::ActionSet::state`]; several only in
//!    handle order) and a swapchain's state lock ([`crate::swapchain::Swapchain::state`]);
//! 3. the instance slot ([`INSTANCE`]): held only to clone its `Arc` out, or to put one in
//!    or take it out (`xrCreateInstance`, `xrDestroyInstance`, which hold no other lock
//!    then), or while adding an action set; under it only (4) and (5) are taken;
//! 4. the instance's own state lock ([`Instance::state`]: paths, events, bindings, what the
//!    graphics extensions' calls left);
//! 5. a table's map (held only inside [`Table`]'s methods, which take nothing else).
//!
//! So a session's lock is never held by a thread waiting for the instance slot's write lock
//! to be free with the writer waiting for that session: the writer takes nothing under it.
//! Destroying an object removes it from its table first; a session is marked destroyed under
//! its lock, so a call that found it just before waits and then sees it gone, and its spaces
//! and swapchains go from their tables before its lock is let go.

#![forbid(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use openxr_sys as xr;
use openxr_sys::Handle;

use crate::actions::Bindings;
use crate::session::Session;
use crate::space::Space;
use crate::stream::Settings;
use crate::swapchain::Swapchain;
use crate::table::Table;
use crate::vulkan::VkLoader;

/// The system (the streamed headset) has this id.
pub const SYSTEM_RAW: u64 = 1;

/// An event waiting for `xrPollEvent`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Event {
    SessionState {
        session: u64,
        state: xr::SessionState,
        time: xr::Time,
    },
    InteractionProfileChanged {
        session: u64,
    },
}

/// An instance: what the application enabled (fixed), and behind its own lock what changes.
pub struct Instance {
    pub id: u64,
    pub application: String,
    pub opengl: bool,
    /// XR_KHR_vulkan_enable2 or XR_KHR_vulkan_enable is enabled.
    pub vulkan: bool,
    pub settings: Settings,
    state: Mutex<InstanceState>,
}

/// What changes in an instance: its paths, events and bindings, what the graphics
/// extensions' calls left.
#[derive(Default)]
pub struct InstanceState {
    pub gl_requirements_asked: bool,
    /// What the Vulkan extensions' calls left.
    pub vk: VkLoader,
    pub system_asked: bool,
    /// Path strings; a path's value is its index + 1.
    pub paths: Vec<String>,
    pub path_ids: HashMap<String, u64>,
    pub events: VecDeque<Event>,
    pub bindings: Bindings,
}

impl InstanceState {
    /// The path for `s`, interned: the same string always has the same path (checked as a
    /// path by the caller).
    pub fn path(&mut self, s: &str) -> xr::Path {
        if let Some(&id) = self.path_ids.get(s) {
            return xr::Path::from_raw(id);
        }
        self.paths.push(s.to_string());
        let id = self.paths.len() as u64;
        self.path_ids.insert(s.to_string(), id);
        xr::Path::from_raw(id)
    }

    /// A path's string (None: NULL or a path this instance never made).
    pub fn path_str(&self, p: xr::Path) -> Option<&str> {
        let i = p.into_raw().checked_sub(1)? as usize;
        self.paths.get(i).map(String::as_str)
    }

    /// Queues an event for `xrPollEvent`.
    pub fn push(&mut self, e: Event) {
        // The spec's queue bound: drop the oldest rather than grow without limit.
        if self.events.len() >= 64 {
            self.events.pop_front();
        }
        self.events.push_back(e);
    }
}

impl Instance {
    /// A fresh instance: no paths, events or bindings yet.
    pub fn new(
        id: u64,
        application: String,
        opengl: bool,
        vulkan: bool,
        settings: Settings,
    ) -> Self {
        Instance {
            id,
            application,
            opengl,
            vulkan,
            settings,
            state: Mutex::default(),
        }
    }

    /// What changes, locked (lock order: see the module's doc).
    pub fn state(&self) -> MutexGuard<'_, InstanceState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`InstanceState::path`].
    pub fn path(&self, s: &str) -> xr::Path {
        self.state().path(s)
    }

    /// [`InstanceState::path_str`], copied out.
    pub fn path_str(&self, p: xr::Path) -> Option<String> {
        self.state().path_str(p).map(str::to_string)
    }

    /// [`InstanceState::push`].
    pub fn push(&self, e: Event) {
        self.state().push(e);
    }
}

/// The instance (one at a time).
pub static INSTANCE: RwLock<Option<Arc<Instance>>> = RwLock::new(None);
/// The sessions (one at a time), each behind its own lock.
pub static SESSIONS: Table<Mutex<Session>> = Table::new();
/// The spaces (fixed once made).
pub static SPACES: Table<Space> = Table::new();
/// The swapchains, each with its own lock for what acquire, wait and release change.
pub static SWAPCHAINS: Table<Swapchain> = Table::new();

/// The instance slot to read (a panic in another call does not poison it for good).
pub fn slot() -> RwLockReadGuard<'static, Option<Arc<Instance>>> {
    INSTANCE.read().unwrap_or_else(|p| p.into_inner())
}

/// The instance slot to change: never with a session's lock held (see the module's doc).
pub fn slot_mut() -> RwLockWriteGuard<'static, Option<Arc<Instance>>> {
    INSTANCE.write().unwrap_or_else(|p| p.into_inner())
}

/// The instance, if there is one.
pub fn current() -> Option<Arc<Instance>> {
    slot().clone()
}

/// The instance if `handle` names it.
pub fn instance(handle: xr::Instance) -> Result<Arc<Instance>, xr::Result> {
    match current() {
        Some(i) if i.id == handle.into_raw() => Ok(i),
        _ => Err(xr::Result::ERROR_HANDLE_INVALID),
    }
}

/// The instance if `instance` names it and `system` is its system.
pub fn system(instance: xr::Instance, system: xr::SystemId) -> Result<Arc<Instance>, xr::Result> {
    let i = self::instance(instance)?;
    if system.into_raw() != SYSTEM_RAW {
        return Err(xr::Result::ERROR_SYSTEM_INVALID);
    }
    Ok(i)
}

/// Pushes an event on the instance's queue (none: dropped).
pub fn push(e: Event) {
    if let Some(i) = current() {
        i.push(e);
    }
}

/// A session's object locked (a panic in another call does not poison it for good).
pub fn lock_session(s: &Mutex<Session>) -> MutexGuard<'_, Session> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on the session `handle` names, under its lock: HANDLE_INVALID when there is
/// none, or it was destroyed while this call waited for it.
pub fn with_session<R>(
    handle: xr::Session,
    f: impl FnOnce(&mut Session) -> Result<R, xr::Result>,
) -> Result<R, xr::Result> {
    let s = SESSIONS.get(handle.into_raw())?;
    let mut s = lock_session(&s);
    if s.destroyed {
        return Err(xr::Result::ERROR_HANDLE_INVALID);
    }
    f(&mut s)
}

/// Turns `Result<(), XrResult>` into the XrResult an entry point returns.
pub fn done(r: Result<xr::Result, xr::Result>) -> xr::Result {
    r.unwrap_or_else(|e| e)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Held by the tests that put an instance in the process's runtime (there is one slot).
    pub(crate) static INSTANCE_SLOT: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Puts an instance in the process's runtime (hold [`INSTANCE_SLOT`]): its handle.
    pub(crate) fn install_instance() -> xr::Instance {
        let id = crate::table::new_handle();
        *slot_mut() = Some(Arc::new(instance(id)));
        xr::Instance::from_raw(id)
    }

    /// An instance with the default settings (for the core's tests).
    pub(crate) fn instance(id: u64) -> Instance {
        let settings =
            Settings::from_config(&untether::config::ConfigToml::default(), "tests".into())
                .expect("the default configuration is valid");
        Instance::new(id, "tests".into(), true, false, settings)
    }

    #[test]
    fn paths_are_interned_and_unknown_ones_have_no_string() {
        let i = instance(1);
        let a = i.path("/user/hand/left");
        let b = i.path("/user/hand/right");
        assert_ne!(a, b);
        assert_ne!(a, xr::Path::NULL);
        assert_eq!(i.path("/user/hand/left"), a);
        assert_eq!(i.path_str(a).as_deref(), Some("/user/hand/left"));
        assert_eq!(i.path_str(b).as_deref(), Some("/user/hand/right"));
        assert_eq!(i.path_str(xr::Path::NULL), None);
        assert_eq!(i.path_str(xr::Path::from_raw(3)), None);
        assert_eq!(i.path_str(xr::Path::from_raw(u64::MAX)), None);
    }

    #[test]
    fn the_event_queue_drops_its_oldest_past_64() {
        let i = instance(1);
        for n in 0..70 {
            i.push(Event::InteractionProfileChanged { session: n });
        }
        assert_eq!(i.state().events.len(), 64);
        assert_eq!(
            i.state().events.front(),
            Some(&Event::InteractionProfileChanged { session: 6 })
        );
    }

    #[test]
    fn a_foreign_handle_is_invalid() {
        let _slot = INSTANCE_SLOT.lock().unwrap_or_else(|p| p.into_inner());
        *slot_mut() = None;
        assert_eq!(
            super::instance(xr::Instance::from_raw(1)).err(),
            Some(xr::Result::ERROR_HANDLE_INVALID)
        );
        let handle = install_instance();
        let id = handle.into_raw();
        assert!(super::instance(handle).is_ok());
        assert_eq!(
            super::instance(xr::Instance::from_raw(id + 1)).err(),
            Some(xr::Result::ERROR_HANDLE_INVALID)
        );
        assert_eq!(
            system(handle, xr::SystemId::from_raw(2)).err(),
            Some(xr::Result::ERROR_SYSTEM_INVALID)
        );
        assert_eq!(
            with_session(xr::Session::from_raw(id), |_| Ok(())),
            Err(xr::Result::ERROR_HANDLE_INVALID)
        );
        *slot_mut() = None;
    }
}

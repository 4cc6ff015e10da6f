//! The runtime's objects that still share one lock: the instance, sessions, spaces and
//! swapchains (action sets and actions have their own tables: [`crate::table`]). Handles are
//! numbers from one counter ([`crate::table::new_handle`], never reused), so a stale or
//! foreign handle is `XR_ERROR_HANDLE_INVALID`, not a crash.

#![forbid(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::{LazyLock, Mutex, MutexGuard};

use openxr_sys as xr;
use openxr_sys::Handle;

use crate::actions::Bindings;
use crate::session::Session;
use crate::space::Space;
use crate::stream::Settings;
use crate::swapchain::Swapchain;

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

/// An instance: what the application enabled, its paths, its events.
pub struct Instance {
    pub id: u64,
    pub application: String,
    pub opengl: bool,
    pub gl_requirements_asked: bool,
    /// XR_KHR_vulkan_enable2 is enabled, and what its calls left.
    pub vulkan: bool,
    pub vk: crate::vulkan::VkLoader,
    pub system_asked: bool,
    /// Path strings; a path's value is its index + 1.
    pub paths: Vec<String>,
    pub path_ids: HashMap<String, u64>,
    pub events: VecDeque<Event>,
    pub settings: Settings,
    pub bindings: Bindings,
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
            gl_requirements_asked: false,
            vulkan,
            vk: Default::default(),
            system_asked: false,
            paths: Vec::new(),
            path_ids: HashMap::new(),
            events: VecDeque::new(),
            settings,
            bindings: Bindings::default(),
        }
    }

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

/// What the runtime holds behind its one lock.
#[derive(Default)]
pub struct Runtime {
    pub instance: Option<Instance>,
    pub sessions: HashMap<u64, Session>,
    pub spaces: HashMap<u64, Space>,
    pub swapchains: HashMap<u64, Swapchain>,
}

static RUNTIME: LazyLock<Mutex<Runtime>> = LazyLock::new(|| Mutex::new(Runtime::default()));

/// The runtime, locked (a panic in another call does not poison it for good).
pub fn lock() -> MutexGuard<'static, Runtime> {
    RUNTIME.lock().unwrap_or_else(|p| p.into_inner())
}

impl Runtime {
    /// A fresh handle (the one counter every kind of object shares).
    pub fn new_id(&mut self) -> u64 {
        crate::table::new_handle()
    }

    /// The instance if `handle` names it.
    pub fn instance(&mut self, handle: xr::Instance) -> Result<&mut Instance, xr::Result> {
        match self.instance.as_mut() {
            Some(i) if i.id == handle.into_raw() => Ok(i),
            _ => Err(xr::Result::ERROR_HANDLE_INVALID),
        }
    }

    pub fn session(&mut self, handle: xr::Session) -> Result<&mut Session, xr::Result> {
        self.sessions
            .get_mut(&handle.into_raw())
            .ok_or(xr::Result::ERROR_HANDLE_INVALID)
    }

    pub fn system(&self, instance: xr::Instance, system: xr::SystemId) -> Result<(), xr::Result> {
        match &self.instance {
            Some(i) if i.id == instance.into_raw() => {}
            _ => return Err(xr::Result::ERROR_HANDLE_INVALID),
        }
        if system.into_raw() != SYSTEM_RAW {
            return Err(xr::Result::ERROR_SYSTEM_INVALID);
        }
        Ok(())
    }

    /// Pushes an event on the instance's queue.
    pub fn push(&mut self, e: Event) {
        if let Some(i) = self.instance.as_mut() {
            i.push(e);
        }
    }
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
        let mut rt = lock();
        let id = rt.new_id();
        rt.instance = Some(instance(id));
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
        let mut i = instance(1);
        let a = i.path("/user/hand/left");
        let b = i.path("/user/hand/right");
        assert_ne!(a, b);
        assert_ne!(a, xr::Path::NULL);
        assert_eq!(i.path("/user/hand/left"), a);
        assert_eq!(i.path_str(a), Some("/user/hand/left"));
        assert_eq!(i.path_str(b), Some("/user/hand/right"));
        assert_eq!(i.path_str(xr::Path::NULL), None);
        assert_eq!(i.path_str(xr::Path::from_raw(3)), None);
        assert_eq!(i.path_str(xr::Path::from_raw(u64::MAX)), None);
    }

    #[test]
    fn the_event_queue_drops_its_oldest_past_64() {
        let mut i = instance(1);
        for n in 0..70 {
            i.push(Event::InteractionProfileChanged { session: n });
        }
        assert_eq!(i.events.len(), 64);
        assert_eq!(
            i.events.front(),
            Some(&Event::InteractionProfileChanged { session: 6 })
        );
    }

    #[test]
    fn a_foreign_handle_is_invalid() {
        let mut rt = Runtime::default();
        assert_eq!(
            rt.instance(xr::Instance::from_raw(1)).err(),
            Some(xr::Result::ERROR_HANDLE_INVALID)
        );
        let id = rt.new_id();
        rt.instance = Some(instance(id));
        assert!(rt.instance(xr::Instance::from_raw(id)).is_ok());
        assert_eq!(
            rt.instance(xr::Instance::from_raw(id + 1)).err(),
            Some(xr::Result::ERROR_HANDLE_INVALID)
        );
        assert_eq!(
            rt.system(xr::Instance::from_raw(id), xr::SystemId::from_raw(2)),
            Err(xr::Result::ERROR_SYSTEM_INVALID)
        );
        assert!(rt.session(xr::Session::from_raw(id)).is_err());
    }
}

//! Sessions: one at a time, with its untether host; the session state machine.
//!
//! IDLE on creation; READY once a client has connected (the application does not render for
//! nobody); SYNCHRONIZED → VISIBLE → FOCUSED when it begins; FOCUSED ⇄ VISIBLE as the client
//! leaves and comes back (the application keeps running and the host keeps waiting);
//! STOPPING on `xrRequestExitSession`; IDLE (and EXITING after an exit request) on
//! `xrEndSession`. Destroying the session stops the host, which tells its client goodbye.

#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::sync::Mutex;

use ash::vk::PFN_vkGetInstanceProcAddr;
use openxr_sys as xr;
use openxr_sys::Handle;
use untether_proto::PoseSample;

use crate::actions::ActionStates;
use crate::frame::FrameClock;
use crate::gl::{self, Compositor, Gl};
use crate::math::Rigid;
use crate::runtime::{self, lock_session, with_session, Event, SESSIONS, SPACES, SWAPCHAINS};
use crate::stream::{Settings, Stream};
use crate::swapchain::destroy_images;
use crate::util::now;
use crate::vk_compositor::{self, VkCompositor};
use crate::vulkan::{self, Vk};

pub struct Session {
    pub id: u64,
    pub state: xr::SessionState,
    pub running: bool,
    pub exit_requested: bool,
    pub settings: Settings,
    pub stream: Stream,
    pub gl: Option<Gl>,
    pub compositor: Option<Compositor>,
    /// A Vulkan session's binding (`XR_KHR_vulkan_enable2`); `gl` is unused then.
    pub vk: Option<Vk>,
    pub vk_compositor: Option<VkCompositor>,
    pub clock: FrameClock,
    pub attached: Vec<u64>,
    pub action_states: ActionStates,
    /// The client's newest pose sample when each recent frame was waited for, by display
    /// time: the sample a frame's render pose is predicted from.
    pub frame_samples: VecDeque<(xr::Time, Option<PoseSample>)>,
    /// The connected client's eye views are in `settings` (it sent them).
    pub view_from_client: bool,
    view_polls: u32,
    /// Destroyed (out of [`SESSIONS`]): a call that found it before waits for its lock and
    /// then sees this.
    pub destroyed: bool,
}

impl Session {
    /// A new session (state UNKNOWN: [`create_session`] moves it to IDLE).
    pub fn new(id: u64, settings: Settings, stream: Stream, vk: Option<Vk>) -> Session {
        let clock = FrameClock::new(settings.fps());
        Session {
            id,
            state: xr::SessionState::UNKNOWN,
            running: false,
            exit_requested: false,
            settings,
            stream,
            gl: None,
            compositor: None,
            vk,
            vk_compositor: None,
            clock,
            attached: Vec::new(),
            action_states: ActionStates::default(),
            frame_samples: VecDeque::new(),
            view_from_client: false,
            view_polls: 0,
            destroyed: false,
        }
    }

    /// The head pose predicted for `time` (see [`crate::math::Predictor`]).
    pub fn head_at(&self, time: xr::Time) -> Rigid {
        self.stream.predictor.predict(time.as_nanos() / 1000)
    }

    fn event(&self, state: xr::SessionState) -> Event {
        Event::SessionState {
            session: self.id,
            state,
            time: now(),
        }
    }

    /// Moves to `state`, queueing its event.
    pub fn go(&mut self, state: xr::SessionState, events: &mut Vec<Event>) {
        if self.state != state {
            log::info!("untether OpenXR runtime: session {state:?}");
            self.state = state;
            events.push(self.event(state));
        }
    }

    /// Takes the connected client's eye views once it sent them (asked for every 15th
    /// call while none are known for this client: the host's roster lags the connection).
    fn follow_client_view(&mut self, client: bool) {
        if !client {
            self.view_from_client = false;
            return;
        }
        self.view_polls = self.view_polls.wrapping_add(1);
        if self.view_from_client || self.view_polls % 15 != 1 {
            return;
        }
        if let Some((fov, ipd)) = self.stream.client_view() {
            self.view_from_client = true;
            if self.settings.use_client_view(fov, ipd) {
                log::info!(
                    "untether OpenXR runtime: views from the client: field of view {fov}°, eye separation {ipd} mm"
                );
            }
        }
    }

    /// Follows the client: READY when one is connected, FOCUSED only while one is.
    pub fn follow_client(&mut self, events: &mut Vec<Event>) {
        let client = self.stream.has_client();
        if !client {
            // The count "since the last client connected" starts again here too: an app that
            // publishes nothing while no client watches (hello_xr between a lost client and the
            // next) would otherwise carry the old client's frames over to the new one.
            self.stream.frames_to_current = 0;
        }
        self.follow_client_view(client);
        match self.state {
            xr::SessionState::IDLE if !self.running && !self.exit_requested && client => {
                self.go(xr::SessionState::READY, events)
            }
            xr::SessionState::FOCUSED if !client => self.go(xr::SessionState::VISIBLE, events),
            xr::SessionState::VISIBLE if client => self.go(xr::SessionState::FOCUSED, events),
            _ => {}
        }
    }

    /// Hands a finished Vulkan copy to the stream (polled: never waits).
    pub fn poll_vk(&mut self) {
        if let (Some(vk), Some(c)) = (self.vk.as_ref(), self.vk_compositor.as_mut()) {
            let (w, h) = (c.width, c.height);
            if let Some((ready, tag)) = vk_compositor::app::take_ready(c, vk) {
                self.stream.hand_over(ready, w, h, tag);
            }
        }
    }

    /// Hands the frame whose copy is in flight to the encoder as soon as the copy is done,
    /// waiting for it at most `within_ns` (`xrWaitFrame`, in the time it would sleep). GL only
    /// when the application's context is current here; otherwise the next `xrEndFrame` takes it.
    pub fn publish_when_copied(&mut self, within_ns: u64) {
        if let (Some(vk), Some(c)) = (self.vk.as_ref(), self.vk_compositor.as_mut()) {
            let (w, h) = (c.width, c.height);
            if let Some((ready, tag)) = vk_compositor::app::take_within(c, vk, within_ns) {
                self.stream.hand_over(ready, w, h, tag);
            }
        }
        if let (Some(gl), Some(c)) = (self.gl.as_ref(), self.compositor.as_mut()) {
            let (w, h) = (c.width, c.height);
            // Only where the application's context is current here (checked).
            if let Some(rb) = gl::app::collect(c, gl, within_ns) {
                self.stream.publish(rb.bgra, w, h, rb.tag);
            }
        }
    }

    /// Reads back the frame still in flight and hands it over (the session is ending).
    fn flush(&mut self) {
        let (w, h) = self.settings.frame_size();
        if let (Some(vk), Some(c)) = (self.vk.as_ref(), self.vk_compositor.as_mut()) {
            let (cw, ch) = (c.width, c.height);
            if let Some((ready, tag)) = vk_compositor::app::finish(c, vk) {
                self.stream.hand_over(ready, cw, ch, tag);
            }
        }
        if let (Some(gl), Some(c)) = (self.gl.as_ref(), self.compositor.as_mut()) {
            if let Some(rb) = gl::app::finish(c, gl) {
                self.stream.publish(rb.bgra, w, h, rb.tag);
            }
        }
    }

    fn release_graphics(&mut self) {
        log::info!(
            "untether OpenXR runtime: predicted display time = release + the application's \
             render time p50 {:.2} ms + xrEndFrame → shown on the client {}",
            self.clock.render_estimate_ns() as f64 / 1e6,
            self.clock
                .pipeline_ns()
                .map_or("(no client report: one period)".into(), |n| format!(
                    "{:.2} ms",
                    n as f64 / 1e6
                ))
        );
        if let (Some(gl), Some(c)) = (self.gl.as_ref(), self.compositor.take()) {
            gl::app::destroy(c, gl);
        }
        if let Some(vk) = self.vk.take() {
            if let Some(c) = self.vk_compositor.take() {
                if c.busy > 0 {
                    log::info!("untether OpenXR runtime: {} frames ended while the previous copy still ran (not streamed)", c.busy);
                }
                vk_compositor::app::destroy(c, &vk);
            }
            vulkan::app::destroy(vk);
        }
    }
}

/// Every session follows its client (each under its lock in turn); events go on the
/// instance's queue.
pub fn follow_clients() {
    let mut events = Vec::new();
    for (_, s) in SESSIONS.snapshot() {
        let mut s = lock_session(&s);
        if !s.destroyed {
            s.follow_client(&mut events);
        }
    }
    for e in events {
        runtime::push(e);
    }
}

/// The graphics binding in `xrCreateSession`'s chain.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Binding {
    /// `XrGraphicsBindingOpenGLXlibKHR`.
    OpenGl,
    /// `XrGraphicsBindingVulkanKHR`, with its `VkInstance`.
    Vulkan { instance: u64 },
    /// None, or more than one.
    Unsupported,
}

/// `xrCreateSession`: `make_vk` makes a Vulkan session's [`Vk`] from the binding in the
/// chain with the instance's `vkGetInstanceProcAddr` and what `xrCreateVulkanDeviceKHR` left
/// (the entry layer's part: the application's handles), called once the checks passed.
pub fn create_session(
    instance: xr::Instance,
    system: xr::SystemId,
    binding: Binding,
    make_vk: impl FnOnce(
        PFN_vkGetInstanceProcAddr,
        Option<Result<(), &'static str>>,
    ) -> Result<Vk, String>,
) -> Result<xr::Session, xr::Result> {
    let inst = runtime::system(instance, system)?;
    let vk = {
        let st = inst.state();
        match binding {
            Binding::OpenGl => {
                if !inst.opengl {
                    return Err(xr::Result::ERROR_VALIDATION_FAILURE);
                }
                if !st.gl_requirements_asked {
                    return Err(xr::Result::ERROR_GRAPHICS_REQUIREMENTS_CALL_MISSING);
                }
                None
            }
            Binding::Vulkan { instance } => {
                if !inst.vulkan {
                    return Err(xr::Result::ERROR_VALIDATION_FAILURE);
                }
                if !st.vk.requirements_asked {
                    return Err(xr::Result::ERROR_GRAPHICS_REQUIREMENTS_CALL_MISSING);
                }
                let Some(gipa) = st.vk.gipa else {
                    log::warn!("xrCreateSession: call xrCreateVulkanInstanceKHR (XR_KHR_vulkan_enable2) or xrGetVulkanGraphicsDeviceKHR (XR_KHR_vulkan_enable) first");
                    return Err(xr::Result::ERROR_GRAPHICS_DEVICE_INVALID);
                };
                if instance != st.vk.instance {
                    return Err(xr::Result::ERROR_GRAPHICS_DEVICE_INVALID);
                }
                Some((gipa, st.vk.dma_buf))
            }
            Binding::Unsupported => {
                log::warn!("xrCreateSession: no (or more than one) graphics binding in the chain; this runtime supports XR_KHR_opengl_enable (Xlib) and XR_KHR_vulkan_enable2");
                return Err(xr::Result::ERROR_GRAPHICS_DEVICE_INVALID);
            }
        }
    };
    if !SESSIONS.is_empty() {
        return Err(xr::Result::ERROR_LIMIT_REACHED);
    }
    let vk = match vk {
        Some((gipa, dma_buf)) => match make_vk(gipa, dma_buf) {
            Ok(v) => Some(v),
            Err(e) => {
                log::error!("xrCreateSession: {e}");
                return Err(xr::Result::ERROR_RUNTIME_FAILURE);
            }
        },
        None => None,
    };
    let settings = inst.settings.clone();
    let stream = match Stream::start(&settings) {
        Ok(s) => s,
        Err(e) => {
            log::error!("xrCreateSession: the untether host did not start: {e}");
            eprintln!("untether OpenXR runtime: the host did not start: {e}");
            if let Some(v) = vk {
                vulkan::app::destroy(v);
            }
            return Err(xr::Result::ERROR_RUNTIME_FAILURE);
        }
    };
    let id = crate::table::new_handle();
    let mut session = Session::new(id, settings, stream, vk);
    let mut events = Vec::new();
    session.go(xr::SessionState::IDLE, &mut events);
    // One session at a time: checked again as it is added (another thread may have been
    // quicker since the check above).
    if let Err(lost) = SESSIONS.insert_as(id, Mutex::new(session), |_| true) {
        let mut s = lost.into_inner().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = s.vk.take() {
            vulkan::app::destroy(v);
        }
        s.stream.stop();
        return Err(xr::Result::ERROR_LIMIT_REACHED);
    }
    for e in events {
        inst.push(e);
    }
    Ok(xr::Session::from_raw(id))
}

/// Removes a session and everything made for it: its swapchains (their images freed) and
/// spaces leave their tables, its events the instance's queue. False: no such session.
pub fn destroy_session_objects(id: u64) -> bool {
    let Ok(obj) = SESSIONS.remove(id) else {
        return false;
    };
    let mut s = lock_session(&obj);
    if s.destroyed {
        return false;
    }
    s.destroyed = true;
    if s.running {
        s.flush();
    }
    for (k, sc) in SWAPCHAINS.snapshot() {
        if sc.session == id && SWAPCHAINS.remove(k).is_ok() {
            destroy_images(&mut s, &sc);
        }
    }
    s.release_graphics();
    SPACES.retain(|sp| sp.session != id);
    s.stream.stop();
    if let Some(i) = runtime::current() {
        i.state().events.retain(|e| match e {
            Event::SessionState { session, .. } | Event::InteractionProfileChanged { session } => {
                *session != id
            }
        });
    }
    true
}

/// `xrDestroySession`.
pub fn destroy_session(session: xr::Session) -> Result<(), xr::Result> {
    if destroy_session_objects(session.into_raw()) {
        Ok(())
    } else {
        Err(xr::Result::ERROR_HANDLE_INVALID)
    }
}

/// `xrBeginSession`.
pub fn begin_session(session: xr::Session, info: &xr::SessionBeginInfo) -> Result<(), xr::Result> {
    let events = with_session(session, |s| {
        let mut events = Vec::new();
        if info.primary_view_configuration_type != xr::ViewConfigurationType::PRIMARY_STEREO {
            return Err(xr::Result::ERROR_VIEW_CONFIGURATION_TYPE_UNSUPPORTED);
        }
        if s.running {
            return Err(xr::Result::ERROR_SESSION_RUNNING);
        }
        if s.state != xr::SessionState::READY {
            return Err(xr::Result::ERROR_SESSION_NOT_READY);
        }
        s.running = true;
        s.clock = FrameClock::new(s.settings.fps());
        s.go(xr::SessionState::SYNCHRONIZED, &mut events);
        s.go(xr::SessionState::VISIBLE, &mut events);
        if s.stream.has_client() {
            s.go(xr::SessionState::FOCUSED, &mut events);
        }
        Ok(events)
    })?;
    for e in events {
        runtime::push(e);
    }
    Ok(())
}

/// Runs `f` on a running session and queues the state changes it makes: the lookup, the
/// running check and the event flush `xrEndSession` and `xrRequestExitSession` share.
fn with_running_session(
    session: xr::Session,
    f: impl FnOnce(&mut Session, &mut Vec<Event>) -> Result<(), xr::Result>,
) -> Result<(), xr::Result> {
    let mut events = Vec::new();
    let r = with_session(session, |s| {
        if !s.running {
            return Err(xr::Result::ERROR_SESSION_NOT_RUNNING);
        }
        Ok(f(s, &mut events))
    })?;
    for e in events {
        runtime::push(e);
    }
    r
}

/// `xrEndSession`.
pub fn end_session(session: xr::Session) -> Result<(), xr::Result> {
    with_running_session(session, |s, events| {
        if s.state != xr::SessionState::STOPPING {
            return Err(xr::Result::ERROR_SESSION_NOT_STOPPING);
        }
        s.flush();
        s.running = false;
        s.go(xr::SessionState::IDLE, events);
        if s.exit_requested {
            s.go(xr::SessionState::EXITING, events);
        }
        Ok(())
    })
}

/// `xrRequestExitSession`.
pub fn request_exit_session(session: xr::Session) -> Result<(), xr::Result> {
    with_running_session(session, |s, events| {
        s.exit_requested = true;
        if s.state == xr::SessionState::FOCUSED {
            s.go(xr::SessionState::VISIBLE, events);
        }
        s.go(xr::SessionState::SYNCHRONIZED, events);
        s.go(xr::SessionState::STOPPING, events);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::tests::{install_instance, INSTANCE_SLOT};
    use crate::space;
    use crate::swapchain;

    /// A session without a host or graphics, in the table (what `create_session` adds, less
    /// the host): its handle.
    fn add_session() -> xr::Session {
        let settings = crate::runtime::tests::instance(0).settings.clone();
        let id = crate::table::new_handle();
        let s = Session::new(id, settings, Stream::without_host(), None);
        assert!(SESSIONS.insert_as(id, Mutex::new(s), |_| true).is_ok());
        xr::Session::from_raw(id)
    }

    /// Destroying a session takes its spaces and swapchains out of their tables and its
    /// events off the queue; every handle of them is invalid after, and a call that found
    /// the session just before it went (waiting for its lock) sees it gone.
    #[test]
    fn a_destroyed_sessions_children_and_events_go_with_it() {
        let _slot = INSTANCE_SLOT.lock().unwrap_or_else(|p| p.into_inner());
        let inst = install_instance();
        let session = add_session();
        let sid = session.into_raw();
        // One at a time.
        assert!(SESSIONS
            .insert_as(
                crate::table::new_handle(),
                Mutex::new(Session::new(
                    0,
                    crate::runtime::tests::instance(0).settings.clone(),
                    Stream::without_host(),
                    None
                )),
                |_| true
            )
            .is_err());
        let info = xr::ReferenceSpaceCreateInfo {
            ty: xr::StructureType::REFERENCE_SPACE_CREATE_INFO,
            next: std::ptr::null(),
            reference_space_type: xr::ReferenceSpaceType::LOCAL,
            pose_in_reference_space: Rigid::IDENTITY.to_xr(),
        };
        let local = space::create_reference_space(session, &info).unwrap();
        assert!(SPACES.contains(local.into_raw()));
        // Its images are never made here (no GL).
        let sc = swapchain::tests::add(sid);
        assert_eq!(swapchain::acquire_image(sc), Ok(0));
        // Never ready (no client): not begun, not running.
        let begin = xr::SessionBeginInfo {
            ty: xr::StructureType::SESSION_BEGIN_INFO,
            next: std::ptr::null(),
            primary_view_configuration_type: xr::ViewConfigurationType::PRIMARY_STEREO,
        };
        assert_eq!(
            begin_session(session, &begin),
            Err(xr::Result::ERROR_SESSION_NOT_READY)
        );
        assert_eq!(
            end_session(session),
            Err(xr::Result::ERROR_SESSION_NOT_RUNNING)
        );
        runtime::push(Event::SessionState {
            session: sid,
            state: xr::SessionState::IDLE,
            time: now(),
        });
        runtime::push(Event::InteractionProfileChanged { session: sid + 1 });

        // A call that found the session waits for its lock while it is destroyed.
        let obj = SESSIONS.get(sid).unwrap();
        let guard = lock_session(&obj);
        let waiting = std::thread::spawn(move || with_session(session, |_| Ok(())));
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(guard);
        assert_eq!(destroy_session(session), Ok(()));
        let r = waiting.join().unwrap();
        // Before or after the destruction: never a crash, and HANDLE_INVALID once gone.
        assert!(r == Ok(()) || r == Err(xr::Result::ERROR_HANDLE_INVALID));
        assert!(lock_session(&obj).destroyed);

        let invalid = xr::Result::ERROR_HANDLE_INVALID;
        assert_eq!(destroy_session(session), Err(invalid));
        assert_eq!(with_session(session, |_| Ok(())), Err(invalid));
        assert!(!SPACES.contains(local.into_raw()));
        assert!(!SWAPCHAINS.contains(sc.into_raw()));
        assert_eq!(space::destroy_space(local), Err(invalid));
        assert_eq!(swapchain::acquire_image(sc), Err(invalid));
        assert_eq!(swapchain::destroy_swapchain(sc), Err(invalid));
        assert_eq!(space::create_reference_space(session, &info), Err(invalid));
        let events = runtime::instance(inst).unwrap().state().events.clone();
        assert_eq!(
            events,
            [Event::InteractionProfileChanged { session: sid + 1 }]
        );
        assert_eq!(crate::instance::destroy_instance(inst), Ok(()));
    }
}

//! Sessions: one at a time, with its untether host; the session state machine.
//!
//! IDLE on creation; READY once a client has connected (the application does not render for
//! nobody); SYNCHRONIZED → VISIBLE → FOCUSED when it begins; FOCUSED ⇄ VISIBLE as the client
//! leaves and comes back (the application keeps running and the host keeps waiting);
//! STOPPING on `xrRequestExitSession`; IDLE (and EXITING after an exit request) on
//! `xrEndSession`. Destroying the session stops the host, which tells its client goodbye.

use std::collections::VecDeque;

use openxr_sys as xr;
use openxr_sys::Handle;
use untether_proto::PoseSample;

use crate::actions::ActionStates;
use crate::frame::FrameClock;
use crate::gl::{Compositor, Gl};
use crate::guard;
use crate::math::Rigid;
use crate::runtime::{lock, Event, Runtime};
use crate::stream::{Settings, Stream};
use crate::swapchain::destroy_images;
use crate::util::{find_in_chain, now, ty_of};
use crate::vk_compositor::VkCompositor;
use crate::vulkan::Vk;

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
}

impl Session {
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
            // SAFETY: on the application's thread (xrWaitFrame/xrEndFrame).
            if let Some((ready, tag)) = unsafe { c.take_ready(vk) } {
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
            // SAFETY: on the application's thread (xrWaitFrame), its device alive.
            if let Some((ready, tag)) = unsafe { c.take_within(vk, within_ns) } {
                self.stream.hand_over(ready, w, h, tag);
            }
        }
        if let (Some(gl), Some(c)) = (self.gl.as_ref(), self.compositor.as_mut()) {
            if gl.is_current() {
                let (w, h) = (c.width, c.height);
                // SAFETY: the application's context is current on this thread.
                if let Some(rb) = unsafe { c.collect(gl, within_ns) } {
                    self.stream.publish(rb.bgra, w, h, rb.tag);
                }
            }
        }
    }

    /// Reads back the frame still in flight and hands it over (the session is ending).
    fn flush(&mut self) {
        let (w, h) = self.settings.frame_size();
        if let (Some(vk), Some(c)) = (self.vk.as_ref(), self.vk_compositor.as_mut()) {
            let (cw, ch) = (c.width, c.height);
            // SAFETY: called from xrEndSession/xrDestroySession on the application's thread.
            if let Some((ready, tag)) = unsafe { c.finish(vk) } {
                self.stream.hand_over(ready, cw, ch, tag);
            }
        }
        if let (Some(gl), Some(c)) = (self.gl.as_ref(), self.compositor.as_mut()) {
            // SAFETY: called from xrEndSession/xrDestroySession, where the application's
            // context is current.
            if let Some(rb) = unsafe { c.finish(gl) } {
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
            // SAFETY: as in flush.
            unsafe { c.destroy(gl) };
        }
        if let Some(vk) = self.vk.take() {
            if let Some(c) = self.vk_compositor.take() {
                if c.busy > 0 {
                    log::info!("untether OpenXR runtime: {} frames ended while the previous copy still ran (not streamed)", c.busy);
                }
                // SAFETY: as in flush.
                unsafe { c.destroy(&vk) };
            }
            // SAFETY: the pool's one command buffer was freed with the compositor.
            unsafe { vk.destroy() };
        }
    }
}

/// Every session follows its client; events go on the instance's queue.
pub fn follow_clients(rt: &mut Runtime) {
    let mut events = Vec::new();
    for s in rt.sessions.values_mut() {
        s.follow_client(&mut events);
    }
    for e in events {
        rt.push(e);
    }
}

pub(crate) unsafe extern "system" fn create_session(
    instance: xr::Instance,
    info: *const xr::SessionCreateInfo,
    out: *mut xr::Session,
) -> xr::Result {
    guard("xrCreateSession", || {
        // SAFETY: type read first.
        if unsafe { ty_of(info) } != Some(xr::StructureType::SESSION_CREATE_INFO) || out.is_null() {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: checked.
        let info = unsafe { &*info };
        let mut rt = lock();
        if let Err(e) = rt.system(instance, info.system_id) {
            return e;
        }
        let Ok(inst) = rt.instance(instance) else {
            return xr::Result::ERROR_HANDLE_INVALID;
        };
        // SAFETY: the application's next chain.
        let (gl, vk) = unsafe {
            (
                find_in_chain(
                    info.next,
                    xr::StructureType::GRAPHICS_BINDING_OPENGL_XLIB_KHR,
                ),
                find_in_chain(info.next, xr::StructureType::GRAPHICS_BINDING_VULKAN_KHR),
            )
        };
        let vk = match (gl, vk) {
            (Some(_), None) => {
                if !inst.opengl {
                    return xr::Result::ERROR_VALIDATION_FAILURE;
                }
                if !inst.gl_requirements_asked {
                    return xr::Result::ERROR_GRAPHICS_REQUIREMENTS_CALL_MISSING;
                }
                None
            }
            (None, Some(b)) => {
                if !inst.vulkan {
                    return xr::Result::ERROR_VALIDATION_FAILURE;
                }
                if !inst.vk.requirements_asked {
                    return xr::Result::ERROR_GRAPHICS_REQUIREMENTS_CALL_MISSING;
                }
                let Some(gipa) = inst.vk.gipa else {
                    log::warn!("xrCreateSession: call xrCreateVulkanInstanceKHR (XR_KHR_vulkan_enable2) or xrGetVulkanGraphicsDeviceKHR (XR_KHR_vulkan_enable) first");
                    return xr::Result::ERROR_GRAPHICS_DEVICE_INVALID;
                };
                // SAFETY: the chain's structure of this type; the application's handles.
                let b = unsafe { &*(b as *const xr::GraphicsBindingVulkanKHR) };
                if b.instance as u64 != inst.vk.instance {
                    return xr::Result::ERROR_GRAPHICS_DEVICE_INVALID;
                }
                Some((gipa, *b, inst.vk.dma_buf))
            }
            _ => {
                log::warn!("xrCreateSession: no (or more than one) graphics binding in the chain; this runtime supports XR_KHR_opengl_enable (Xlib) and XR_KHR_vulkan_enable2");
                return xr::Result::ERROR_GRAPHICS_DEVICE_INVALID;
            }
        };
        if !rt.sessions.is_empty() {
            return xr::Result::ERROR_LIMIT_REACHED;
        }
        let vk = match vk {
            // SAFETY: the application's live handles, made through `gipa`.
            Some((gipa, b, dma_buf)) => match unsafe { Vk::new(gipa, &b, dma_buf) } {
                Ok(v) => Some(v),
                Err(e) => {
                    log::error!("xrCreateSession: {e}");
                    return xr::Result::ERROR_RUNTIME_FAILURE;
                }
            },
            None => None,
        };
        let settings = match rt.instance.as_ref() {
            Some(i) => i.settings.clone(),
            None => return xr::Result::ERROR_HANDLE_INVALID,
        };
        let stream = match Stream::start(&settings) {
            Ok(s) => s,
            Err(e) => {
                log::error!("xrCreateSession: the untether host did not start: {e}");
                eprintln!("untether OpenXR runtime: the host did not start: {e}");
                return xr::Result::ERROR_RUNTIME_FAILURE;
            }
        };
        let id = rt.new_id();
        let clock = FrameClock::new(settings.fps());
        let session = Session {
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
        };
        let mut events = Vec::new();
        let mut session = session;
        session.go(xr::SessionState::IDLE, &mut events);
        rt.sessions.insert(id, session);
        for e in events {
            rt.push(e);
        }
        // SAFETY: checked non-null.
        unsafe { out.write(xr::Session::from_raw(id)) };
        xr::Result::SUCCESS
    })
}

/// Removes a session and everything made for it.
pub fn destroy_session_objects(rt: &mut Runtime, id: u64) -> bool {
    let Some(mut s) = rt.sessions.remove(&id) else {
        return false;
    };
    if s.running {
        s.flush();
    }
    let mine: Vec<u64> = rt
        .swapchains
        .iter()
        .filter(|(_, sc)| sc.session == id)
        .map(|(&k, _)| k)
        .collect();
    for k in mine {
        if let Some(sc) = rt.swapchains.remove(&k) {
            destroy_images(&mut s, sc);
        }
    }
    s.release_graphics();
    rt.spaces.retain(|_, sp| sp.session != id);
    s.stream.stop();
    if let Some(i) = rt.instance.as_mut() {
        i.events.retain(|e| match e {
            Event::SessionState { session, .. } | Event::InteractionProfileChanged { session } => {
                *session != id
            }
        });
    }
    true
}

pub(crate) unsafe extern "system" fn destroy_session(session: xr::Session) -> xr::Result {
    guard("xrDestroySession", || {
        let mut rt = lock();
        if destroy_session_objects(&mut rt, session.into_raw()) {
            xr::Result::SUCCESS
        } else {
            xr::Result::ERROR_HANDLE_INVALID
        }
    })
}

pub(crate) unsafe extern "system" fn begin_session(
    session: xr::Session,
    info: *const xr::SessionBeginInfo,
) -> xr::Result {
    guard("xrBeginSession", || {
        // SAFETY: type read first.
        if unsafe { ty_of(info) } != Some(xr::StructureType::SESSION_BEGIN_INFO) {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: checked.
        let info = unsafe { &*info };
        let mut rt = lock();
        let mut events = Vec::new();
        let s = match rt.session(session) {
            Ok(s) => s,
            Err(e) => return e,
        };
        if info.primary_view_configuration_type != xr::ViewConfigurationType::PRIMARY_STEREO {
            return xr::Result::ERROR_VIEW_CONFIGURATION_TYPE_UNSUPPORTED;
        }
        if s.running {
            return xr::Result::ERROR_SESSION_RUNNING;
        }
        if s.state != xr::SessionState::READY {
            return xr::Result::ERROR_SESSION_NOT_READY;
        }
        s.running = true;
        s.clock = FrameClock::new(s.settings.fps());
        s.go(xr::SessionState::SYNCHRONIZED, &mut events);
        s.go(xr::SessionState::VISIBLE, &mut events);
        if s.stream.has_client() {
            s.go(xr::SessionState::FOCUSED, &mut events);
        }
        for e in events {
            rt.push(e);
        }
        xr::Result::SUCCESS
    })
}

/// Runs `f` on a running session and queues the state changes it makes: the lookup, the
/// running check and the event flush `xrEndSession` and `xrRequestExitSession` share.
fn with_running_session(
    session: xr::Session,
    f: impl FnOnce(&mut Session, &mut Vec<Event>) -> Result<(), xr::Result>,
) -> xr::Result {
    let mut rt = lock();
    let mut events = Vec::new();
    let s = match rt.session(session) {
        Ok(s) => s,
        Err(e) => return e,
    };
    if !s.running {
        return xr::Result::ERROR_SESSION_NOT_RUNNING;
    }
    let r = f(s, &mut events);
    for e in events {
        rt.push(e);
    }
    match r {
        Ok(()) => xr::Result::SUCCESS,
        Err(e) => e,
    }
}

pub(crate) unsafe extern "system" fn end_session(session: xr::Session) -> xr::Result {
    guard("xrEndSession", || {
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
    })
}

pub(crate) unsafe extern "system" fn request_exit_session(session: xr::Session) -> xr::Result {
    guard("xrRequestExitSession", || {
        with_running_session(session, |s, events| {
            s.exit_requested = true;
            if s.state == xr::SessionState::FOCUSED {
                s.go(xr::SessionState::VISIBLE, events);
            }
            s.go(xr::SessionState::SYNCHRONIZED, events);
            s.go(xr::SessionState::STOPPING, events);
            Ok(())
        })
    })
}

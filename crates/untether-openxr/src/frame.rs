//! The frame loop: `xrWaitFrame` paces the application at the stream's frame rate,
//! `xrBeginFrame`/`xrEndFrame` bracket its rendering, and `xrEndFrame` turns the projection
//! layer into the stereo frame the host encodes, tagged with the pose it was rendered for.
//! The safe core of the entry points in [`crate::ffi::frame`].

#![forbid(unsafe_code)]

use openxr_sys as xr;
use openxr_sys::Handle;
use untether_proto::PoseSample;

use crate::gl::{self, EyeSource};
use crate::math::Rigid;
use crate::runtime::{with_session, SPACES, SWAPCHAINS};
use crate::session::{follow_clients, Session};
use crate::space::{eye_in_head, world_from};
use crate::stream::FrameTag;
use crate::util::now;
use crate::vk_compositor::{self, stereo_format, VkEye};

/// At most this many layers in one frame.
pub const MAX_LAYERS: u32 = 16;

/// Frame pacing and display-time prediction. The application is released once per period; a
/// late application is released at once and the schedule restarts from there (no frame is
/// skipped to realign). The display time predicted for the frame it then renders is measured,
/// not assumed: the release, plus how long the application takes from its release to
/// `xrEndFrame` (the median of its last [`RENDER_SAMPLES`] frames), plus how long a frame takes
/// from `xrEndFrame` to being shown on the client (its glass-to-glass, which the client reports
/// from exactly that instant; [`set_pipeline`](Self::set_pipeline)). Before any is measured,
/// one period stands for each.
#[derive(Clone, Debug)]
pub struct FrameClock {
    pub period_ns: i64,
    next_release_ns: i64,
    waited: u32,
    begun: bool,
    /// Releases not yet matched by an `xrEndFrame`, oldest first.
    releases: std::collections::VecDeque<i64>,
    /// The application's last release → `xrEndFrame` durations, ns.
    render_ns: std::collections::VecDeque<i64>,
    /// `xrEndFrame` → shown on the client, ns (None: no client report yet).
    pipeline_ns: Option<i64>,
}

/// Frames whose render time the display-time prediction takes the median of.
pub const RENDER_SAMPLES: usize = 15;

impl FrameClock {
    pub fn new(fps: u32) -> FrameClock {
        FrameClock {
            period_ns: 1_000_000_000 / fps.max(1) as i64,
            next_release_ns: 0,
            waited: 0,
            begun: false,
            releases: Default::default(),
            render_ns: Default::default(),
            pipeline_ns: None,
        }
    }

    /// The measured `xrEndFrame` → shown on the client (the client's glass-to-glass p50), or
    /// None while no client reports one. Held within 0..=10 periods.
    pub fn set_pipeline(&mut self, ns: Option<i64>) {
        self.pipeline_ns = ns.map(|n| n.clamp(0, 10 * self.period_ns));
    }

    /// The measured `xrEndFrame` → shown on the client the prediction uses, ns.
    pub fn pipeline_ns(&self) -> Option<i64> {
        self.pipeline_ns
    }

    /// The application's render time the prediction uses: the median of its last frames.
    pub fn render_estimate_ns(&self) -> i64 {
        let mut v: Vec<i64> = self.render_ns.iter().copied().collect();
        if v.is_empty() {
            return self.period_ns;
        }
        v.sort_unstable();
        v[v.len() / 2]
    }

    /// When to release the application (`now_ns` or later) and the display time predicted
    /// for the frame it then renders.
    pub fn schedule(&mut self, now_ns: i64) -> (i64, i64) {
        let release = self.next_release_ns.max(now_ns);
        self.next_release_ns = release + self.period_ns;
        self.waited += 1;
        if self.releases.len() >= 4 {
            self.releases.pop_front();
        }
        self.releases.push_back(release);
        let pipeline = self.pipeline_ns.unwrap_or(self.period_ns);
        (release, release + self.render_estimate_ns() + pipeline)
    }

    pub fn begin(&mut self) -> Result<xr::Result, xr::Result> {
        if self.waited == 0 {
            return Err(xr::Result::ERROR_CALL_ORDER_INVALID);
        }
        self.waited -= 1;
        if self.begun {
            // The previous frame was begun and never ended: it is discarded.
            return Ok(xr::Result::FRAME_DISCARDED);
        }
        self.begun = true;
        Ok(xr::Result::SUCCESS)
    }

    /// The frame begun last ends at `now_ns`: its render time (from its release) is measured.
    pub fn end(&mut self, now_ns: i64) -> Result<(), xr::Result> {
        if !self.begun {
            return Err(xr::Result::ERROR_CALL_ORDER_INVALID);
        }
        self.begun = false;
        if let Some(release) = self.releases.pop_front() {
            if self.render_ns.len() >= RENDER_SAMPLES {
                self.render_ns.pop_front();
            }
            self.render_ns
                .push_back((now_ns - release).clamp(0, 10 * self.period_ns));
        }
        Ok(())
    }
}

/// What `xrWaitFrame` answers (its XrFrameState's fields).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FrameTiming {
    pub predicted_display_time: xr::Time,
    pub predicted_display_period: xr::Duration,
    pub should_render: bool,
}

/// `xrWaitFrame`: paces the application, then freezes the pose its frame is rendered from.
pub fn wait_frame(session: xr::Session) -> Result<FrameTiming, xr::Result> {
    let (release, display, period) = with_session(session, |s| {
        if !s.running {
            return Err(xr::Result::ERROR_SESSION_NOT_RUNNING);
        }
        // The display time follows what the client measures (xrEndFrame → shown).
        let pipeline = s.stream.shown_after_end_ns(now().as_nanos() / 1000);
        s.clock.set_pipeline(pipeline);
        let (release, display) = s.clock.schedule(now().as_nanos());
        // The previous frame goes to the encoder as soon as its copy is done, in the time
        // this call sleeps anyway (not one frame later, at the next poll). The session's
        // lock is held meanwhile (GL needs this thread and its context; at most until the
        // release): another thread's call on this session waits that long, never past the
        // frame; calls on other objects do not wait.
        s.publish_when_copied((release - now().as_nanos()).max(0) as u64);
        Ok((release, display, s.clock.period_ns))
    })?;
    // Sleep without the lock.
    let wait = release - now().as_nanos();
    if wait > 0 {
        std::thread::sleep(std::time::Duration::from_nanos(wait as u64));
    }
    follow_clients();
    with_session(session, |s| {
        // The pose every locate of this frame is predicted from, frozen now.
        s.poll_vk();
        s.stream.observe_pose(now().as_nanos() / 1000);
        s.stream.poll_input();
        s.stream.tick(now().as_nanos());
        let display = xr::Time::from_nanos(display);
        if s.frame_samples.len() >= 8 {
            s.frame_samples.pop_front();
        }
        s.frame_samples
            .push_back((display, s.stream.predictor.newest()));
        let render = matches!(
            s.state,
            xr::SessionState::VISIBLE | xr::SessionState::FOCUSED
        );
        Ok(FrameTiming {
            predicted_display_time: display,
            predicted_display_period: xr::Duration::from_nanos(period),
            should_render: render,
        })
    })
}

/// `xrBeginFrame`: XR_SUCCESS, or XR_FRAME_DISCARDED when the previous frame never ended.
pub fn begin_frame(session: xr::Session) -> Result<xr::Result, xr::Result> {
    with_session(session, |s| {
        if !s.running {
            return Err(xr::Result::ERROR_SESSION_NOT_RUNNING);
        }
        s.clock.begin()
    })
}

/// The projection layer's two eyes, checked: their textures and rectangles, and the head
/// pose they were rendered for (world).
struct Projection {
    eyes: [EyeSource; 2],
    vk_eyes: [VkEye; 2],
    head: Option<Rigid>,
}

/// One of `xrEndFrame`'s layers, as the entry layer read it.
#[derive(Clone, Copy, Debug)]
pub enum Layer<'a> {
    /// An `XrCompositionLayerProjection` and its views (None: not two views, or null).
    Projection(
        &'a xr::CompositionLayerProjection,
        Option<&'a [xr::CompositionLayerProjectionView]>,
    ),
    /// A layer of another type.
    Other(xr::StructureType),
    /// A null layer pointer.
    Null,
}

/// Reads and checks one projection layer.
fn projection(
    s: &Session,
    layer: &xr::CompositionLayerProjection,
    views: Option<&[xr::CompositionLayerProjectionView]>,
    display: xr::Time,
) -> Result<Projection, xr::Result> {
    let views = match views {
        Some(v) if layer.view_count == 2 && v.len() == 2 => v,
        _ => return Err(xr::Result::ERROR_VALIDATION_FAILURE),
    };
    let mut eyes = [EyeSource {
        texture: 0,
        array: false,
        layer: 0,
        rect: [0; 4],
    }; 2];
    let mut vk_eyes = [VkEye {
        image: 0,
        format: 0,
        layer: 0,
        rect: [0; 4],
    }; 2];
    for (i, v) in views.iter().enumerate() {
        if v.ty != xr::StructureType::COMPOSITION_LAYER_PROJECTION_VIEW {
            return Err(xr::Result::ERROR_VALIDATION_FAILURE);
        }
        let sub = &v.sub_image;
        let sc = SWAPCHAINS.get(sub.swapchain.into_raw())?;
        if sc.session != s.id {
            return Err(xr::Result::ERROR_HANDLE_INVALID);
        }
        let Some(image) = sc.state().released else {
            return Err(xr::Result::ERROR_LAYER_INVALID);
        };
        let r = sub.image_rect;
        if r.offset.x < 0
            || r.offset.y < 0
            || r.extent.width <= 0
            || r.extent.height <= 0
            || (r.offset.x + r.extent.width) as u32 > sc.width
            || (r.offset.y + r.extent.height) as u32 > sc.height
        {
            return Err(xr::Result::ERROR_SWAPCHAIN_RECT_INVALID);
        }
        if sub.image_array_index >= sc.array_size {
            return Err(xr::Result::ERROR_VALIDATION_FAILURE);
        }
        if Rigid::from_xr(&v.pose).is_none() {
            return Err(xr::Result::ERROR_POSE_INVALID);
        }
        let rect = [r.offset.x, r.offset.y, r.extent.width, r.extent.height];
        let Some(&handle) = sc.images.get(image as usize) else {
            return Err(xr::Result::ERROR_LAYER_INVALID);
        };
        eyes[i] = EyeSource {
            texture: handle as u32,
            array: sc.array_size > 1,
            layer: sub.image_array_index,
            rect,
        };
        vk_eyes[i] = VkEye {
            image: handle,
            format: sc.format,
            layer: sub.image_array_index,
            rect,
        };
    }
    let space = SPACES.get(layer.space.into_raw())?;
    // The head the views were rendered from: the eyes' poses, taken back to the world.
    let head = world_from(&space, &s.head_at(display)).and_then(|w| {
        let e0 = w.mul(&Rigid::from_xr(&views[0].pose)?);
        let e1 = w.mul(&Rigid::from_xr(&views[1].pose)?);
        let mut h = e0.mul(&eye_in_head(0, 0.0));
        h.position = (e0.position + e1.position) / 2.0;
        Some(h)
    });
    Ok(Projection {
        eyes,
        vk_eyes,
        head,
    })
}

/// `xrEndFrame`: `layers` are the info's layers as the entry layer read them (None when
/// there are more than [`MAX_LAYERS`] or the array is null: the info's checks answer then).
pub fn end_frame(
    session: xr::Session,
    info: &xr::FrameEndInfo,
    layers: Option<&[Layer<'_>]>,
) -> Result<(), xr::Result> {
    with_session(session, |s| {
        if !s.running {
            return Err(xr::Result::ERROR_SESSION_NOT_RUNNING);
        }
        if info.display_time.as_nanos() <= 0 {
            return Err(xr::Result::ERROR_TIME_INVALID);
        }
        if info.environment_blend_mode != xr::EnvironmentBlendMode::OPAQUE {
            return Err(xr::Result::ERROR_ENVIRONMENT_BLEND_MODE_UNSUPPORTED);
        }
        if info.layer_count > MAX_LAYERS {
            return Err(xr::Result::ERROR_LAYER_LIMIT_EXCEEDED);
        }
        let layers = layers.ok_or(xr::Result::ERROR_VALIDATION_FAILURE)?;
        let mut shown = None;
        for l in layers {
            match *l {
                Layer::Projection(layer, views) => {
                    let p = projection(s, layer, views, info.display_time)?;
                    if shown.is_none() {
                        shown = Some(p);
                    }
                }
                Layer::Other(t) => {
                    log::warn!("xrEndFrame: composition layer {t:?} is not supported (projection layers only)");
                    return Err(xr::Result::ERROR_LAYER_INVALID);
                }
                Layer::Null => return Err(xr::Result::ERROR_LAYER_INVALID),
            }
        }
        s.clock.end(now().as_nanos())?;
        s.poll_vk();
        if let Some(p) = shown {
            composite(s, p, info.display_time);
        }
        Ok(())
    })
}

/// Blits the eyes into the stereo frame and streams the previous one (read back meanwhile).
fn composite(s: &mut Session, p: Projection, display: xr::Time) {
    // The frame is done now: glass-to-glass starts here, before the read-back.
    let ended_us = untether::clock::now_us();
    let (w, h) = s.settings.frame_size();
    let sample = s
        .frame_samples
        .iter()
        .rev()
        .find(|(t, _)| *t == display)
        .and_then(|(_, sample)| *sample)
        .or_else(|| s.stream.predictor.newest());
    let pose = match (sample, p.head) {
        (Some(base), Some(head)) => Some(PoseSample {
            sample_us: base.sample_us,
            pose: head.to_pose(),
        }),
        _ => None,
    };
    if s.vk.is_some() {
        composite_vk(s, &p.vk_eyes, FrameTag { pose, ended_us });
        return;
    }
    let Some(gl) = s.gl.as_ref() else {
        return;
    };
    if s.compositor.is_none() {
        match gl::app::new_compositor(gl, w, h) {
            Ok(c) => s.compositor = Some(c),
            Err(e) => {
                log::error!("xrEndFrame: {e}; frames are not streamed");
                return;
            }
        }
    }
    let Some(c) = s.compositor.as_mut() else {
        return;
    };
    // The eyes are this session's swapchain images (checked in `projection`).
    if let Some(rb) = gl::app::submit(c, gl, &p.eyes, FrameTag { pose, ended_us }) {
        s.stream.publish(rb.bgra, w, h, rb.tag);
    }
}

/// The Vulkan path: blit and copy on the application's queue, polled later.
fn composite_vk(s: &mut Session, eyes: &[VkEye; 2], tag: FrameTag) {
    let Some(vk) = s.vk.as_ref() else {
        return;
    };
    let (w, h) = s.settings.frame_size();
    let format = stereo_format(eyes[0].format);
    if s.vk_compositor.as_ref().is_some_and(|c| c.format != format) {
        if let Some(c) = s.vk_compositor.take() {
            vk_compositor::app::destroy(c, vk);
        }
    }
    if s.vk_compositor.is_none() {
        match vk_compositor::app::new_compositor(vk, w, h, format) {
            Ok(mut c) => {
                // Zero-copy where the host's encoder takes DMA-BUFs (else the host has said
                // why, once) and this device can export them (else the reason is the host's
                // one line); the read-back otherwise.
                if s.stream.dma_buf_input().is_ok() {
                    if let Err(why) = vk_compositor::app::enable_export(&mut c, vk) {
                        s.stream.refuse_dma_buf(&why);
                    }
                }
                s.vk_compositor = Some(c)
            }
            Err(e) => {
                log::error!("xrEndFrame: {e}; frames are not streamed");
                return;
            }
        }
    }
    // Asked every frame: the encoder may have turned zero-copy off since.
    let zero_copy =
        s.vk_compositor.as_ref().is_some_and(|c| c.exporting()) && s.stream.dma_buf_input().is_ok();
    if let Some(c) = s.vk_compositor.as_mut() {
        // The eyes are this session's swapchain images, released by the application
        // (COLOR_ATTACHMENT_OPTIMAL).
        vk_compositor::app::submit(c, vk, eyes, tag, zero_copy);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_paced_one_period_apart_and_a_late_app_is_released_at_once() {
        let mut c = FrameClock::new(100); // 10 ms
                                          // Nothing measured yet: a period for rendering and a period for the pipeline.
        let (r0, d0) = c.schedule(1_000);
        assert_eq!((r0, d0), (1_000, 20_001_000));
        let (r1, _) = c.schedule(2_000);
        assert_eq!(r1, 10_001_000);
        let (r2, d2) = c.schedule(50_000_000);
        assert_eq!((r2, d2), (50_000_000, 70_000_000));
    }

    #[test]
    fn the_display_time_is_the_release_plus_the_measured_render_and_pipeline() {
        let mut c = FrameClock::new(100); // 10 ms
                                          // The application takes 3 ms from its release to xrEndFrame (one frame took 9 ms: the
                                          // median holds), and the client shows a frame 7 ms after xrEndFrame.
        let mut t = 0;
        for k in 0..9 {
            let (release, _) = c.schedule(t);
            assert_eq!(c.begin(), Ok(xr::Result::SUCCESS));
            let took = if k == 4 { 9_000_000 } else { 3_000_000 };
            c.end(release + took).unwrap();
            t = release + took;
        }
        assert_eq!(c.render_estimate_ns(), 3_000_000);
        c.set_pipeline(Some(7_000_000));
        let (release, display) = c.schedule(t);
        assert_eq!(display - release, 10_000_000);
        // A pipeline report past ten periods is held there; none falls back to a period.
        c.set_pipeline(Some(1_000_000_000));
        let (release, display) = c.schedule(t);
        assert_eq!(display - release, 3_000_000 + 100_000_000);
        c.set_pipeline(None);
        let (release, display) = c.schedule(t);
        assert_eq!(display - release, 3_000_000 + 10_000_000);
    }

    #[test]
    fn begin_needs_a_wait_and_end_needs_a_begin() {
        let mut c = FrameClock::new(60);
        assert_eq!(c.begin(), Err(xr::Result::ERROR_CALL_ORDER_INVALID));
        assert_eq!(c.end(0), Err(xr::Result::ERROR_CALL_ORDER_INVALID));
        c.schedule(0);
        assert_eq!(c.begin(), Ok(xr::Result::SUCCESS));
        c.schedule(0);
        assert_eq!(c.begin(), Ok(xr::Result::FRAME_DISCARDED));
        assert_eq!(c.end(0), Ok(()));
    }
}

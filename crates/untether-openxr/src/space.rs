//! Spaces and where things are: reference spaces (view, local, stage), action spaces, and the
//! eye views, all from the client's head pose predicted for the asked time.
//!
//! World = the client's pose frame (docs/POSE.md): its origin is the resting head, so LOCAL
//! is the world itself and STAGE's origin lies on the floor [`EYE_HEIGHT_M`] below it.

use glam::{Quat, Vec3};
use openxr_sys as xr;
use openxr_sys::Handle;

use crate::guard;
use crate::math::Rigid;
use crate::runtime::{lock, Runtime};
use crate::util::{fill, fill_with, ty_of};

/// The resting eye height above STAGE's floor.
pub const EYE_HEIGHT_M: f32 = 1.6;

/// The reference spaces offered.
pub const REFERENCE_SPACES: [xr::ReferenceSpaceType; 3] = [
    xr::ReferenceSpaceType::VIEW,
    xr::ReferenceSpaceType::LOCAL,
    xr::ReferenceSpaceType::STAGE,
];

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SpaceKind {
    Reference(xr::ReferenceSpaceType),
    /// A pose action's space (controllers: not tracked, never located).
    Action,
}

pub struct Space {
    pub session: u64,
    pub kind: SpaceKind,
    pub offset: Rigid,
}

/// Where a space is in the world at a time, given the head there; None: not tracked.
pub fn world_from(space: &Space, head: &Rigid) -> Option<Rigid> {
    let base = match space.kind {
        SpaceKind::Reference(xr::ReferenceSpaceType::VIEW) => *head,
        SpaceKind::Reference(xr::ReferenceSpaceType::STAGE) => {
            Rigid::translation(0.0, -EYE_HEIGHT_M, 0.0)
        }
        SpaceKind::Reference(_) => Rigid::IDENTITY,
        SpaceKind::Action => return None,
    };
    Some(base.mul(&space.offset))
}

/// One eye's pose in the head: ±IPD/2 along the head's x axis.
pub fn eye_in_head(eye: usize, ipd_m: f32) -> Rigid {
    let x = if eye == 0 { -ipd_m / 2.0 } else { ipd_m / 2.0 };
    Rigid::new(Quat::IDENTITY, Vec3::new(x, 0.0, 0.0))
}

/// The head predicted for `time` in the space's session.
fn head_at(rt: &Runtime, session: u64, time: xr::Time) -> Rigid {
    rt.sessions
        .get(&session)
        .map(|s| s.head_at(time))
        .unwrap_or(Rigid::IDENTITY)
}

pub(crate) unsafe extern "system" fn enumerate_reference_spaces(
    session: xr::Session,
    capacity: u32,
    count: *mut u32,
    spaces: *mut xr::ReferenceSpaceType,
) -> xr::Result {
    guard("xrEnumerateReferenceSpaces", || {
        let mut rt = lock();
        if let Err(e) = rt.session(session) {
            return e;
        }
        // SAFETY: the application's two-call array.
        unsafe { fill(capacity, count, spaces, &REFERENCE_SPACES) }
    })
}

pub(crate) unsafe extern "system" fn create_reference_space(
    session: xr::Session,
    info: *const xr::ReferenceSpaceCreateInfo,
    out: *mut xr::Space,
) -> xr::Result {
    guard("xrCreateReferenceSpace", || {
        // SAFETY: type read first.
        if unsafe { ty_of(info) } != Some(xr::StructureType::REFERENCE_SPACE_CREATE_INFO)
            || out.is_null()
        {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: checked.
        let info = unsafe { &*info };
        if !REFERENCE_SPACES.contains(&info.reference_space_type) {
            return xr::Result::ERROR_REFERENCE_SPACE_UNSUPPORTED;
        }
        let Some(offset) = Rigid::from_xr(&info.pose_in_reference_space) else {
            return xr::Result::ERROR_POSE_INVALID;
        };
        let mut rt = lock();
        if let Err(e) = rt.session(session) {
            return e;
        }
        let id = rt.new_id();
        rt.spaces.insert(
            id,
            Space {
                session: session.into_raw(),
                kind: SpaceKind::Reference(info.reference_space_type),
                offset,
            },
        );
        // SAFETY: checked non-null.
        unsafe { out.write(xr::Space::from_raw(id)) };
        xr::Result::SUCCESS
    })
}

pub(crate) unsafe extern "system" fn get_reference_space_bounds_rect(
    session: xr::Session,
    ty: xr::ReferenceSpaceType,
    bounds: *mut xr::Extent2Df,
) -> xr::Result {
    guard("xrGetReferenceSpaceBoundsRect", || {
        let mut rt = lock();
        if let Err(e) = rt.session(session) {
            return e;
        }
        if bounds.is_null() {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        if !REFERENCE_SPACES.contains(&ty) {
            return xr::Result::ERROR_REFERENCE_SPACE_UNSUPPORTED;
        }
        // SAFETY: checked non-null.
        unsafe {
            bounds.write(xr::Extent2Df {
                width: 0.0,
                height: 0.0,
            })
        };
        // No play area is known.
        xr::Result::SPACE_BOUNDS_UNAVAILABLE
    })
}

pub(crate) unsafe extern "system" fn destroy_space(space: xr::Space) -> xr::Result {
    guard("xrDestroySpace", || {
        match lock().spaces.remove(&space.into_raw()) {
            Some(_) => xr::Result::SUCCESS,
            None => xr::Result::ERROR_HANDLE_INVALID,
        }
    })
}

pub(crate) unsafe extern "system" fn locate_space(
    space: xr::Space,
    base: xr::Space,
    time: xr::Time,
    location: *mut xr::SpaceLocation,
) -> xr::Result {
    guard("xrLocateSpace", || {
        // SAFETY: type read first.
        if unsafe { ty_of(location) } != Some(xr::StructureType::SPACE_LOCATION) {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        if time.as_nanos() <= 0 {
            return xr::Result::ERROR_TIME_INVALID;
        }
        let rt = lock();
        let (Some(s), Some(b)) = (
            rt.spaces.get(&space.into_raw()),
            rt.spaces.get(&base.into_raw()),
        ) else {
            return xr::Result::ERROR_HANDLE_INVALID;
        };
        let head = head_at(&rt, s.session, time);
        let found = match (world_from(s, &head), world_from(b, &head)) {
            (Some(ws), Some(wb)) => Some(wb.inverse().mul(&ws)),
            _ => None,
        };
        // SAFETY: checked type; only the fields after type/next are written.
        let loc = unsafe { &mut *location };
        match found {
            Some(p) => {
                loc.location_flags = xr::SpaceLocationFlags::ORIENTATION_VALID
                    | xr::SpaceLocationFlags::POSITION_VALID
                    | xr::SpaceLocationFlags::ORIENTATION_TRACKED
                    | xr::SpaceLocationFlags::POSITION_TRACKED;
                loc.pose = p.to_xr();
            }
            None => {
                loc.location_flags = xr::SpaceLocationFlags::EMPTY;
                loc.pose = Rigid::IDENTITY.to_xr();
            }
        }
        xr::Result::SUCCESS
    })
}

pub(crate) unsafe extern "system" fn locate_views(
    session: xr::Session,
    info: *const xr::ViewLocateInfo,
    state: *mut xr::ViewState,
    capacity: u32,
    count: *mut u32,
    views: *mut xr::View,
) -> xr::Result {
    guard("xrLocateViews", || {
        // SAFETY: type reads first.
        if unsafe { ty_of(info) } != Some(xr::StructureType::VIEW_LOCATE_INFO)
            || unsafe { ty_of(state) } != Some(xr::StructureType::VIEW_STATE)
        {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: checked.
        let info = unsafe { &*info };
        if info.view_configuration_type != xr::ViewConfigurationType::PRIMARY_STEREO {
            return xr::Result::ERROR_VIEW_CONFIGURATION_TYPE_UNSUPPORTED;
        }
        if info.display_time.as_nanos() <= 0 {
            return xr::Result::ERROR_TIME_INVALID;
        }
        let mut rt = lock();
        // The session's views: the client's, once it sent them.
        let settings = match rt.session(session) {
            Ok(s) => s.settings.clone(),
            Err(e) => return e,
        };
        let Some(space) = rt.spaces.get(&info.space.into_raw()) else {
            return xr::Result::ERROR_HANDLE_INVALID;
        };
        let head = head_at(&rt, session.into_raw(), info.display_time);
        let Some(world_from_space) = world_from(space, &head) else {
            // SAFETY: checked type.
            unsafe { (*state).view_state_flags = xr::ViewStateFlags::EMPTY };
            // SAFETY: the application's two-call array.
            return unsafe { fill_with(capacity, count, 2, |_| {}) };
        };
        let space_from_world = world_from_space.inverse();
        let (hx, hy) = settings.half_fov();
        let fov = xr::Fovf {
            angle_left: -hx,
            angle_right: hx,
            angle_up: hy,
            angle_down: -hy,
        };
        // SAFETY: checked type.
        unsafe {
            (*state).view_state_flags = xr::ViewStateFlags::ORIENTATION_VALID
                | xr::ViewStateFlags::POSITION_VALID
                | xr::ViewStateFlags::ORIENTATION_TRACKED
                | xr::ViewStateFlags::POSITION_TRACKED;
        }
        // SAFETY: the application's array of XrView (its own type/next kept).
        unsafe {
            fill_with(capacity, count, 2, |i| {
                let eye = space_from_world.mul(&head.mul(&eye_in_head(i, settings.ipd_m())));
                let v = &mut *views.add(i);
                v.pose = eye.to_xr();
                v.fov = fov;
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(kind: SpaceKind) -> Space {
        Space {
            session: 1,
            kind,
            offset: Rigid::IDENTITY,
        }
    }

    #[test]
    fn view_follows_the_head_and_stage_sits_below_local() {
        let head = Rigid::new(Quat::from_rotation_y(0.5), Vec3::new(0.1, 0.2, 0.0));
        let view = world_from(
            &space(SpaceKind::Reference(xr::ReferenceSpaceType::VIEW)),
            &head,
        )
        .unwrap();
        assert_eq!(view, head);
        let local = world_from(
            &space(SpaceKind::Reference(xr::ReferenceSpaceType::LOCAL)),
            &head,
        )
        .unwrap();
        let stage = world_from(
            &space(SpaceKind::Reference(xr::ReferenceSpaceType::STAGE)),
            &head,
        )
        .unwrap();
        // LOCAL's origin in STAGE: EYE_HEIGHT_M up.
        let p = stage.inverse().mul(&local).position;
        assert!((p - Vec3::new(0.0, EYE_HEIGHT_M, 0.0)).length() < 1e-6);
        assert!(world_from(&space(SpaceKind::Action), &head).is_none());
    }

    #[test]
    fn eyes_sit_half_the_ipd_either_side_along_the_heads_right_axis() {
        let head = Rigid::new(
            Quat::from_rotation_y(std::f32::consts::FRAC_PI_2),
            Vec3::ZERO,
        );
        let left = head.mul(&eye_in_head(0, 0.064)).position;
        // Turned 90° left, the head's right axis points along −z... its left eye is at +z.
        assert!(
            (left - Vec3::new(0.0, 0.0, 0.032)).length() < 1e-5,
            "{left}"
        );
    }
}

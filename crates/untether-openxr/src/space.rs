//! Spaces and where things are: reference spaces (view, local, stage), action spaces, and the
//! eye views, all from the client's head pose predicted for the asked time.
//!
//! World = the client's pose frame (docs/POSE.md): its origin is the resting head, so LOCAL
//! is the world itself and STAGE's origin lies on the floor [`EYE_HEIGHT_M`] below it.
//!
//! The safe core of the entry points in [`crate::ffi::space`].

#![forbid(unsafe_code)]

use glam::{Quat, Vec3};
use openxr_sys as xr;
use openxr_sys::Handle;

use crate::math::Rigid;
use crate::runtime::{lock_session, with_session, SESSIONS, SPACES};
use crate::util::{two_call, two_call_with, Array, Slot};

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

/// The head predicted for `time` in the space's session (takes the session's lock).
fn head_at(session: u64, time: xr::Time) -> Rigid {
    SESSIONS
        .get(session)
        .map(|s| lock_session(&s).head_at(time))
        .unwrap_or(Rigid::IDENTITY)
}

/// `xrEnumerateReferenceSpaces`.
pub fn reference_spaces(
    session: xr::Session,
    out: Array<'_, impl Slot<xr::ReferenceSpaceType>>,
) -> Result<xr::Result, xr::Result> {
    with_session(session, |_| Ok(()))?;
    Ok(two_call(out, &REFERENCE_SPACES))
}

/// `xrCreateReferenceSpace`.
pub fn create_reference_space(
    session: xr::Session,
    info: &xr::ReferenceSpaceCreateInfo,
) -> Result<xr::Space, xr::Result> {
    if !REFERENCE_SPACES.contains(&info.reference_space_type) {
        return Err(xr::Result::ERROR_REFERENCE_SPACE_UNSUPPORTED);
    }
    let offset =
        Rigid::from_xr(&info.pose_in_reference_space).ok_or(xr::Result::ERROR_POSE_INVALID)?;
    // Added under the session's lock: a session destroyed meanwhile gets no space.
    with_session(session, |_| {
        let space = Space {
            session: session.into_raw(),
            kind: SpaceKind::Reference(info.reference_space_type),
            offset,
        };
        let id = SPACES.insert_unless(space, |_| false);
        id.map(xr::Space::from_raw)
            .ok_or(xr::Result::ERROR_RUNTIME_FAILURE)
    })
}

/// `xrCreateActionSpace`: a pose action's space (never located: no hand tracking).
pub fn create_action_space(
    session: xr::Session,
    info: &xr::ActionSpaceCreateInfo,
) -> Result<xr::Space, xr::Result> {
    let offset =
        Rigid::from_xr(&info.pose_in_action_space).ok_or(xr::Result::ERROR_POSE_INVALID)?;
    with_session(session, |_| {
        let a = crate::actions::ACTIONS.get(info.action.into_raw())?;
        if a.ty != xr::ActionType::POSE_INPUT {
            return Err(xr::Result::ERROR_ACTION_TYPE_MISMATCH);
        }
        if info.subaction_path != xr::Path::NULL && !a.subactions.contains(&info.subaction_path) {
            return Err(xr::Result::ERROR_PATH_UNSUPPORTED);
        }
        let space = Space {
            session: session.into_raw(),
            kind: SpaceKind::Action,
            offset,
        };
        let id = SPACES.insert_unless(space, |_| false);
        id.map(xr::Space::from_raw)
            .ok_or(xr::Result::ERROR_RUNTIME_FAILURE)
    })
}

/// `xrGetReferenceSpaceBoundsRect`: no play area is known (zero bounds,
/// XR_SPACE_BOUNDS_UNAVAILABLE).
pub fn reference_space_bounds(
    session: xr::Session,
    ty: xr::ReferenceSpaceType,
) -> Result<(xr::Extent2Df, xr::Result), xr::Result> {
    with_session(session, |_| Ok(()))?;
    if !REFERENCE_SPACES.contains(&ty) {
        return Err(xr::Result::ERROR_REFERENCE_SPACE_UNSUPPORTED);
    }
    let none = xr::Extent2Df {
        width: 0.0,
        height: 0.0,
    };
    Ok((none, xr::Result::SPACE_BOUNDS_UNAVAILABLE))
}

/// `xrDestroySpace`.
pub fn destroy_space(space: xr::Space) -> Result<(), xr::Result> {
    SPACES.remove(space.into_raw()).map(|_| ())
}

/// Where `space` is in `base` given the head: None when either is not tracked.
pub fn relative(space: &Space, base: &Space, head: &Rigid) -> Option<Rigid> {
    match (world_from(space, head), world_from(base, head)) {
        (Some(ws), Some(wb)) => Some(wb.inverse().mul(&ws)),
        _ => None,
    }
}

/// Writes a location (or its absence) into the application's XrSpaceLocation.
pub fn write_location(found: Option<Rigid>, loc: &mut xr::SpaceLocation) {
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
}

/// `xrLocateSpace`.
pub fn locate_space(
    space: xr::Space,
    base: xr::Space,
    time: xr::Time,
    loc: &mut xr::SpaceLocation,
) -> Result<(), xr::Result> {
    if time.as_nanos() <= 0 {
        return Err(xr::Result::ERROR_TIME_INVALID);
    }
    let s = SPACES.get(space.into_raw())?;
    let b = SPACES.get(base.into_raw())?;
    let head = head_at(s.session, time);
    write_location(relative(&s, &b, &head), loc);
    Ok(())
}

/// The fields of the two eyes' XrViews in a space (the views' type and chain stay the
/// application's); None when the space is not tracked.
pub fn views_in(
    world_from_space: Option<Rigid>,
    head: &Rigid,
    half_fov: (f32, f32),
    ipd_m: f32,
) -> Option<[(xr::Posef, xr::Fovf); 2]> {
    let space_from_world = world_from_space?.inverse();
    let (hx, hy) = half_fov;
    let fov = xr::Fovf {
        angle_left: -hx,
        angle_right: hx,
        angle_up: hy,
        angle_down: -hy,
    };
    let eye = |i| {
        let pose = space_from_world.mul(&head.mul(&eye_in_head(i, ipd_m)));
        (pose.to_xr(), fov)
    };
    Some([eye(0), eye(1)])
}

/// `xrLocateViews`: the two eyes at the display time, in the info's space.
pub fn locate_views(
    session: xr::Session,
    info: &xr::ViewLocateInfo,
    state: &mut xr::ViewState,
    out: Array<'_, xr::View>,
) -> Result<xr::Result, xr::Result> {
    if info.view_configuration_type != xr::ViewConfigurationType::PRIMARY_STEREO {
        return Err(xr::Result::ERROR_VIEW_CONFIGURATION_TYPE_UNSUPPORTED);
    }
    if info.display_time.as_nanos() <= 0 {
        return Err(xr::Result::ERROR_TIME_INVALID);
    }
    // The session's views: the client's, once it sent them; its head at the display time.
    let (settings, head, space) = with_session(session, |s| {
        let space = SPACES.get(info.space.into_raw())?;
        Ok((s.settings.clone(), s.head_at(info.display_time), space))
    })?;
    let views = views_in(
        world_from(&space, &head),
        &head,
        settings.half_fov(),
        settings.ipd_m(),
    );
    let Some(views) = views else {
        state.view_state_flags = xr::ViewStateFlags::EMPTY;
        return Ok(two_call_with(out, 2, |_, _| {}));
    };
    state.view_state_flags = xr::ViewStateFlags::ORIENTATION_VALID
        | xr::ViewStateFlags::POSITION_VALID
        | xr::ViewStateFlags::ORIENTATION_TRACKED
        | xr::ViewStateFlags::POSITION_TRACKED;
    Ok(two_call_with(out, 2, |v, i| {
        (v.pose, v.fov) = views[i];
    }))
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

    #[test]
    fn views_sit_an_ipd_apart_in_the_asked_space_and_untracked_spaces_have_none() {
        let head = Rigid::new(Quat::IDENTITY, Vec3::new(0.0, 0.1, 0.0));
        let local = world_from(
            &space(SpaceKind::Reference(xr::ReferenceSpaceType::LOCAL)),
            &head,
        );
        let [(l, fov), (r, _)] = views_in(local, &head, (0.7, 0.6), 0.064).unwrap();
        assert!((l.position.x + 0.032).abs() < 1e-6 && (r.position.x - 0.032).abs() < 1e-6);
        assert!((l.position.y - 0.1).abs() < 1e-6);
        assert_eq!(
            (
                fov.angle_left,
                fov.angle_right,
                fov.angle_up,
                fov.angle_down
            ),
            (-0.7, 0.7, 0.6, -0.6)
        );
        // In VIEW space the eyes do not move with the head.
        let view = world_from(
            &space(SpaceKind::Reference(xr::ReferenceSpaceType::VIEW)),
            &head,
        );
        let [(l, _), _] = views_in(view, &head, (0.7, 0.6), 0.064).unwrap();
        assert!(l.position.y.abs() < 1e-6);
        assert!(views_in(None, &head, (0.7, 0.6), 0.064).is_none());
    }

    #[test]
    fn an_action_space_is_never_located() {
        let head = Rigid::IDENTITY;
        let local = space(SpaceKind::Reference(xr::ReferenceSpaceType::LOCAL));
        let stage = space(SpaceKind::Reference(xr::ReferenceSpaceType::STAGE));
        let action = space(SpaceKind::Action);
        assert!(relative(&action, &local, &head).is_none());
        assert!(relative(&local, &action, &head).is_none());
        let p = relative(&local, &stage, &head).unwrap();
        assert!((p.position.y - EYE_HEIGHT_M).abs() < 1e-6);
        let mut loc = xr::SpaceLocation {
            ty: xr::StructureType::SPACE_LOCATION,
            next: std::ptr::null_mut(),
            location_flags: xr::SpaceLocationFlags::POSITION_VALID,
            pose: Rigid::IDENTITY.to_xr(),
        };
        write_location(None, &mut loc);
        assert_eq!(loc.location_flags, xr::SpaceLocationFlags::EMPTY);
        write_location(Some(p), &mut loc);
        assert!(loc
            .location_flags
            .contains(xr::SpaceLocationFlags::POSITION_TRACKED));
        assert_eq!(loc.ty, xr::StructureType::SPACE_LOCATION);
    }
}

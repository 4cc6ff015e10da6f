//! The instance, the system (the streamed headset), its views, paths and events: the safe
//! core behind the entry points in [`crate::ffi::instance`], which read and check the
//! application's structures and pointers and hand them over as references and [`Array`]s.

#![forbid(unsafe_code)]

use std::ffi::c_char;

use openxr_sys as xr;
use openxr_sys::Handle;

use std::sync::Arc;

use crate::runtime::{self, Event, Instance, SYSTEM_RAW};
use crate::session::{destroy_session_objects, follow_clients};
use crate::stream::Settings;
use crate::util::{get_str, put_str, two_call, two_call_str, two_call_with, Array, Slot};
use crate::{API_MAX, RUNTIME_NAME};

/// The instance extensions offered, with their spec versions.
pub const EXTENSIONS: [(&str, u32); 3] = [
    ("XR_KHR_opengl_enable", 10),
    ("XR_KHR_vulkan_enable2", 2),
    ("XR_KHR_vulkan_enable", 8),
];

/// `xrEnumerateInstanceExtensionProperties` (the runtime's own extensions; no layers).
pub fn extension_properties(out: Array<'_, xr::ExtensionProperties>) -> xr::Result {
    two_call_with(out, EXTENSIONS.len(), |p, i| {
        put_str(&mut p.extension_name, EXTENSIONS[i].0);
        p.extension_version = EXTENSIONS[i].1;
    })
}

/// Which graphics APIs the enabled extensions ask for: (OpenGL, Vulkan).
pub fn graphics_of(extensions: &[&str]) -> Result<(bool, bool), xr::Result> {
    let (mut opengl, mut vulkan) = (false, false);
    for &name in extensions {
        match name {
            "XR_KHR_opengl_enable" => opengl = true,
            "XR_KHR_vulkan_enable2" | "XR_KHR_vulkan_enable" => vulkan = true,
            other => {
                log::warn!("xrCreateInstance: extension {other} is not supported (this runtime offers XR_KHR_opengl_enable, XR_KHR_vulkan_enable2 and XR_KHR_vulkan_enable)");
                return Err(xr::Result::ERROR_EXTENSION_NOT_PRESENT);
            }
        }
    }
    Ok((opengl, vulkan))
}

/// `xrCreateInstance`: `extensions` are the enabled extensions' names (None: one was not a
/// string).
pub fn create_instance(
    info: &xr::InstanceCreateInfo,
    extensions: Option<&[&str]>,
) -> Result<xr::Instance, xr::Result> {
    let v = info.application_info.api_version;
    if v.major() != 1 || v.minor() != 0 {
        log::warn!("xrCreateInstance: the application asks for OpenXR {v}; this runtime implements 1.0 (up to {API_MAX})");
        return Err(xr::Result::ERROR_API_VERSION_UNSUPPORTED);
    }
    let (opengl, vulkan) = graphics_of(extensions.ok_or(xr::Result::ERROR_VALIDATION_FAILURE)?)?;
    if info.enabled_api_layer_count > 0 {
        // Layers are the loader's business; a runtime sees none.
        return Err(xr::Result::ERROR_API_LAYER_NOT_PRESENT);
    }
    let settings = Settings::load().map_err(|e| {
        log::error!("xrCreateInstance: untether configuration: {e}");
        eprintln!("untether OpenXR runtime: configuration: {e}");
        xr::Result::ERROR_RUNTIME_FAILURE
    })?;
    let mut slot = runtime::slot_mut();
    if slot.is_some() {
        return Err(xr::Result::ERROR_LIMIT_REACHED);
    }
    let id = crate::table::new_handle();
    let application = get_str(&info.application_info.application_name).unwrap_or_default();
    *slot = Some(Arc::new(Instance::new(
        id,
        application,
        opengl,
        vulkan,
        settings,
    )));
    Ok(xr::Instance::from_raw(id))
}

/// `xrDestroyInstance`: its sessions and their objects, its action sets and actions go too.
/// The slot is emptied (and the action tables with it) under its write lock, which holds
/// nothing else; the sessions go after, each under its own lock.
pub fn destroy_instance(instance: xr::Instance) -> Result<(), xr::Result> {
    {
        let mut slot = runtime::slot_mut();
        match slot.as_ref() {
            Some(i) if i.id == instance.into_raw() => {}
            _ => return Err(xr::Result::ERROR_HANDLE_INVALID),
        }
        crate::actions::ACTIONS.clear();
        crate::actions::ACTION_SETS.clear();
        *slot = None;
    }
    for (id, _) in runtime::SESSIONS.snapshot() {
        destroy_session_objects(id);
    }
    Ok(())
}

/// `xrGetInstanceProperties`.
pub fn instance_properties(
    instance: xr::Instance,
    p: &mut xr::InstanceProperties,
) -> Result<(), xr::Result> {
    runtime::instance(instance)?;
    let v = env!("CARGO_PKG_VERSION").split('.').collect::<Vec<_>>();
    let n = |i: usize| v.get(i).and_then(|s| s.parse().ok()).unwrap_or(0);
    p.runtime_version = xr::Version::new(n(0) as u16, n(1) as u16, n(2));
    put_str(&mut p.runtime_name, RUNTIME_NAME);
    Ok(())
}

/// `xrPollEvent`: the next event, if any (the sessions follow their clients first).
pub fn poll_event(instance: xr::Instance) -> Result<Option<Event>, xr::Result> {
    let inst = runtime::instance(instance)?;
    follow_clients();
    let e = inst.state().events.pop_front();
    Ok(e)
}

fn enum_name(prefix: &str, debug: String, raw: i32) -> String {
    if debug
        .chars()
        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    {
        format!("{prefix}{debug}")
    } else {
        format!("{prefix}UNKNOWN_{raw}")
    }
}

/// `xrResultToString` into the application's XR_MAX_RESULT_STRING_SIZE buffer.
pub fn result_to_string(
    instance: xr::Instance,
    value: xr::Result,
    out: &mut [c_char],
) -> Result<(), xr::Result> {
    runtime::instance(instance)?;
    put_str(
        out,
        &enum_name("XR_", format!("{value:?}"), value.into_raw()),
    );
    Ok(())
}

/// `xrStructureTypeToString` into the application's XR_MAX_STRUCTURE_NAME_SIZE buffer.
pub fn structure_type_to_string(
    instance: xr::Instance,
    value: xr::StructureType,
    out: &mut [c_char],
) -> Result<(), xr::Result> {
    runtime::instance(instance)?;
    put_str(
        out,
        &enum_name("XR_TYPE_", format!("{value:?}"), value.into_raw()),
    );
    Ok(())
}

/// `xrGetSystem`: the one system, a head-mounted display.
pub fn get_system(
    instance: xr::Instance,
    info: &xr::SystemGetInfo,
) -> Result<xr::SystemId, xr::Result> {
    let inst = runtime::instance(instance)?;
    if info.form_factor != xr::FormFactor::HEAD_MOUNTED_DISPLAY {
        return Err(xr::Result::ERROR_FORM_FACTOR_UNSUPPORTED);
    }
    inst.state().system_asked = true;
    Ok(xr::SystemId::from_raw(SYSTEM_RAW))
}

/// `xrGetSystemProperties`.
pub fn system_properties(
    instance: xr::Instance,
    system: xr::SystemId,
    p: &mut xr::SystemProperties,
) -> Result<(), xr::Result> {
    runtime::system(instance, system)?;
    p.system_id = xr::SystemId::from_raw(SYSTEM_RAW);
    p.vendor_id = 0;
    put_str(&mut p.system_name, "untether (a streamed headset)");
    p.graphics_properties = xr::SystemGraphicsProperties {
        max_swapchain_image_width: 4096,
        max_swapchain_image_height: 4096,
        max_layer_count: crate::frame::MAX_LAYERS,
    };
    p.tracking_properties = xr::SystemTrackingProperties {
        orientation_tracking: xr::TRUE,
        position_tracking: xr::TRUE,
    };
    Ok(())
}

/// `xrEnumerateViewConfigurations`: primary stereo only.
pub fn view_configurations(
    instance: xr::Instance,
    system: xr::SystemId,
    out: Array<'_, impl Slot<xr::ViewConfigurationType>>,
) -> Result<xr::Result, xr::Result> {
    runtime::system(instance, system)?;
    Ok(two_call(out, &[xr::ViewConfigurationType::PRIMARY_STEREO]))
}

fn stereo_only(ty: xr::ViewConfigurationType) -> Result<(), xr::Result> {
    if ty != xr::ViewConfigurationType::PRIMARY_STEREO {
        return Err(xr::Result::ERROR_VIEW_CONFIGURATION_TYPE_UNSUPPORTED);
    }
    Ok(())
}

/// `xrGetViewConfigurationProperties`.
pub fn view_configuration_properties(
    instance: xr::Instance,
    system: xr::SystemId,
    ty: xr::ViewConfigurationType,
    p: &mut xr::ViewConfigurationProperties,
) -> Result<(), xr::Result> {
    runtime::system(instance, system)?;
    stereo_only(ty)?;
    p.view_configuration_type = ty;
    p.fov_mutable = xr::FALSE;
    Ok(())
}

/// `xrEnumerateViewConfigurationViews`: two eyes of the configured size.
pub fn view_configuration_views(
    instance: xr::Instance,
    system: xr::SystemId,
    ty: xr::ViewConfigurationType,
    out: Array<'_, xr::ViewConfigurationView>,
) -> Result<xr::Result, xr::Result> {
    let inst = runtime::system(instance, system)?;
    stereo_only(ty)?;
    let (w, h) = inst.settings.eye_size();
    Ok(two_call_with(out, 2, |v, _| {
        v.recommended_image_rect_width = w;
        v.recommended_image_rect_height = h;
        v.max_image_rect_width = 4096;
        v.max_image_rect_height = 4096;
        v.recommended_swapchain_sample_count = 1;
        v.max_swapchain_sample_count = 1;
    }))
}

/// `xrEnumerateEnvironmentBlendModes`: opaque only.
pub fn environment_blend_modes(
    instance: xr::Instance,
    system: xr::SystemId,
    ty: xr::ViewConfigurationType,
    out: Array<'_, impl Slot<xr::EnvironmentBlendMode>>,
) -> Result<xr::Result, xr::Result> {
    runtime::system(instance, system)?;
    stereo_only(ty)?;
    Ok(two_call(out, &[xr::EnvironmentBlendMode::OPAQUE]))
}

/// Whether `s` is a well-formed OpenXR path (`/a/b_c-1.2`).
pub fn path_ok(s: &str) -> bool {
    s.starts_with('/')
        && !s.ends_with('/')
        && s.len() < xr::MAX_PATH_LENGTH
        && s[1..].split('/').all(|c| {
            !c.is_empty()
                && c != "."
                && c != ".."
                && c.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
        })
}

/// `xrStringToPath`.
pub fn string_to_path(instance: xr::Instance, text: &str) -> Result<xr::Path, xr::Result> {
    let inst = runtime::instance(instance)?;
    if !path_ok(text) {
        return Err(xr::Result::ERROR_PATH_FORMAT_INVALID);
    }
    Ok(inst.path(text))
}

/// `xrPathToString`.
pub fn path_to_string(
    instance: xr::Instance,
    path: xr::Path,
    out: Array<'_, impl Slot<c_char>>,
) -> Result<xr::Result, xr::Result> {
    let inst = runtime::instance(instance)?;
    let s = inst.path_str(path).ok_or(xr::Result::ERROR_PATH_INVALID)?;
    Ok(two_call_str(out, &s))
}

/// `xrGetOpenGLGraphicsRequirementsKHR`.
pub fn opengl_graphics_requirements(
    instance: xr::Instance,
    system: xr::SystemId,
    r: &mut xr::GraphicsRequirementsOpenGLKHR,
) -> Result<(), xr::Result> {
    runtime::system(instance, system)?
        .state()
        .gl_requirements_asked = true;
    // Framebuffer blits, texture storage, fences and pixel-pack buffers: GL 4.3 core has
    // them all (3.3 lacks glTexStorage).
    r.min_api_version_supported = xr::Version::new(4, 3, 0);
    r.max_api_version_supported = xr::Version::new(4, 6, 0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_syntax_is_checked() {
        assert!(path_ok("/user/hand/left/input/select/click"));
        assert!(path_ok("/interaction_profiles/khr/simple_controller"));
        for bad in [
            "",
            "/",
            "user/hand",
            "/user//hand",
            "/User/hand",
            "/user/hand/",
            "/a/../b",
        ] {
            assert!(!path_ok(bad), "{bad}");
        }
    }

    #[test]
    fn result_names_follow_the_spec_spelling() {
        assert_eq!(
            enum_name("XR_", format!("{:?}", xr::Result::ERROR_LAYER_INVALID), -1),
            "XR_ERROR_LAYER_INVALID"
        );
        assert_eq!(
            enum_name(
                "XR_",
                format!("{:?}", xr::Result::from_raw(-999_999)),
                -999_999
            ),
            "XR_UNKNOWN_-999999"
        );
    }

    #[test]
    fn paths_systems_and_views_through_the_core() {
        use crate::runtime::tests::{install_instance, INSTANCE_SLOT};
        let _slot = INSTANCE_SLOT.lock().unwrap_or_else(|p| p.into_inner());
        let inst = install_instance();
        let stale = xr::Instance::from_raw(inst.into_raw() + 1_000_000);
        assert_eq!(
            string_to_path(inst, "/user/hand/"),
            Err(xr::Result::ERROR_PATH_FORMAT_INVALID)
        );
        assert_eq!(
            string_to_path(stale, "/user/hand/left"),
            Err(xr::Result::ERROR_HANDLE_INVALID)
        );
        let p = string_to_path(inst, "/user/hand/left").unwrap();
        assert_eq!(string_to_path(inst, "/user/hand/left"), Ok(p));
        let mut n = 0;
        let mut buf = [0 as c_char; 32];
        let r = path_to_string(
            inst,
            p,
            Array {
                count: &mut n,
                items: &mut buf,
            },
        );
        assert_eq!((r, n), (Ok(xr::Result::SUCCESS), 16));
        assert_eq!(get_str(&buf).as_deref(), Some("/user/hand/left"));
        let r = path_to_string(
            inst,
            xr::Path::from_raw(999),
            Array {
                count: &mut n,
                items: &mut buf,
            },
        );
        assert_eq!(r, Err(xr::Result::ERROR_PATH_INVALID));

        let info = xr::SystemGetInfo {
            ty: xr::StructureType::SYSTEM_GET_INFO,
            next: std::ptr::null(),
            form_factor: xr::FormFactor::HANDHELD_DISPLAY,
        };
        assert_eq!(
            get_system(inst, &info),
            Err(xr::Result::ERROR_FORM_FACTOR_UNSUPPORTED)
        );
        let info = xr::SystemGetInfo {
            form_factor: xr::FormFactor::HEAD_MOUNTED_DISPLAY,
            ..info
        };
        let system = get_system(inst, &info).unwrap();
        let stereo = xr::ViewConfigurationType::PRIMARY_STEREO;
        let mut modes = [xr::EnvironmentBlendMode::ADDITIVE; 2];
        let r = environment_blend_modes(
            inst,
            system,
            stereo,
            Array {
                count: &mut n,
                items: &mut modes,
            },
        );
        assert_eq!((r, n), (Ok(xr::Result::SUCCESS), 1));
        assert_eq!(modes[0], xr::EnvironmentBlendMode::OPAQUE);
        assert_eq!(
            environment_blend_modes(
                inst,
                xr::SystemId::from_raw(SYSTEM_RAW + 1),
                stereo,
                Array {
                    count: &mut n,
                    items: &mut modes,
                },
            ),
            Err(xr::Result::ERROR_SYSTEM_INVALID)
        );
        let view = xr::ViewConfigurationView {
            ty: xr::StructureType::VIEW_CONFIGURATION_VIEW,
            next: std::ptr::null_mut(),
            recommended_image_rect_width: 0,
            max_image_rect_width: 0,
            recommended_image_rect_height: 0,
            max_image_rect_height: 0,
            recommended_swapchain_sample_count: 0,
            max_swapchain_sample_count: 0,
        };
        let mut views = [view; 1];
        let r = view_configuration_views(
            inst,
            system,
            stereo,
            Array {
                count: &mut n,
                items: &mut views,
            },
        );
        assert_eq!((r, n), (Ok(xr::Result::ERROR_SIZE_INSUFFICIENT), 2));
        let mut views = [view; 2];
        let r = view_configuration_views(
            inst,
            system,
            stereo,
            Array {
                count: &mut n,
                items: &mut views,
            },
        );
        assert_eq!(r, Ok(xr::Result::SUCCESS));
        assert!(views.iter().all(|v| v.recommended_image_rect_width > 0
            && v.ty == xr::StructureType::VIEW_CONFIGURATION_VIEW));
        assert_eq!(destroy_instance(inst), Ok(()));
        assert_eq!(
            string_to_path(inst, "/user/hand/left"),
            Err(xr::Result::ERROR_HANDLE_INVALID)
        );
    }
}

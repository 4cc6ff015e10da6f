//! Entry points for the instance, the system, paths and events ([`crate::instance`]).

use std::ffi::c_char;

use openxr_sys as xr;
use openxr_sys::Handle;

use super::raw::{array, c_str, c_strs, fixed_str, input, out_value, output, struct_array};
use super::{entry, OK};
use crate::instance as core;
use crate::runtime::Event;
use xr::StructureType as T;

pub(crate) unsafe extern "system" fn enumerate_instance_extension_properties(
    layer: *const c_char,
    capacity: u32,
    count: *mut u32,
    props: *mut xr::ExtensionProperties,
) -> xr::Result {
    entry("xrEnumerateInstanceExtensionProperties", || {
        if !layer.is_null() {
            return Err(xr::Result::ERROR_API_LAYER_NOT_PRESENT);
        }
        // SAFETY: the application's two-call array of XrExtensionProperties (spec: `count`
        // writable, `props` `capacity` elements with their type set; null and the first
        // type are checked).
        let out = unsafe { struct_array(capacity, count, props, T::EXTENSION_PROPERTIES) }?;
        Ok(core::extension_properties(out))
    })
}

pub(crate) unsafe extern "system" fn create_instance(
    info: *const xr::InstanceCreateInfo,
    out: *mut xr::Instance,
) -> xr::Result {
    entry("xrCreateInstance", || {
        crate::util::init_logging();
        // SAFETY: the application's XrInstanceCreateInfo (null and type checked).
        let info = unsafe { input(info, T::INSTANCE_CREATE_INFO) }?;
        // SAFETY: the application's output handle (null checked).
        let out = unsafe { out_value(out) }?;
        // SAFETY: the spec's `enabledExtensionCount` NUL-terminated names (null checked).
        let names = unsafe { c_strs(info.enabled_extension_names, info.enabled_extension_count) };
        out.write(core::create_instance(info, names.as_deref())?);
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn destroy_instance(instance: xr::Instance) -> xr::Result {
    entry("xrDestroyInstance", || {
        core::destroy_instance(instance)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn get_instance_properties(
    instance: xr::Instance,
    props: *mut xr::InstanceProperties,
) -> xr::Result {
    entry("xrGetInstanceProperties", || {
        // SAFETY: the application's XrInstanceProperties (null and type checked).
        let p = unsafe { output(props, T::INSTANCE_PROPERTIES) }?;
        core::instance_properties(instance, p)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn poll_event(
    instance: xr::Instance,
    buffer: *mut xr::EventDataBuffer,
) -> xr::Result {
    entry("xrPollEvent", || {
        // SAFETY: the application's XrEventDataBuffer (null and type checked).
        let buffer: *mut xr::EventDataBuffer = unsafe { output(buffer, T::EVENT_DATA_BUFFER) }?;
        let Some(e) = core::poll_event(instance)? else {
            return Ok(xr::Result::EVENT_UNAVAILABLE);
        };
        match e {
            Event::SessionState {
                session,
                state,
                time,
            } => {
                let e = xr::EventDataSessionStateChanged {
                    ty: T::EVENT_DATA_SESSION_STATE_CHANGED,
                    next: std::ptr::null(),
                    session: xr::Session::from_raw(session),
                    state,
                    time,
                };
                // SAFETY: the buffer is an XrEventDataBuffer (checked above; 4016 bytes,
                // 8-aligned), larger than this event and aligned for it.
                unsafe { buffer.cast::<xr::EventDataSessionStateChanged>().write(e) };
            }
            Event::InteractionProfileChanged { session } => {
                let e = xr::EventDataInteractionProfileChanged {
                    ty: T::EVENT_DATA_INTERACTION_PROFILE_CHANGED,
                    next: std::ptr::null(),
                    session: xr::Session::from_raw(session),
                };
                // SAFETY: as above: the checked buffer is larger than this event.
                unsafe {
                    buffer
                        .cast::<xr::EventDataInteractionProfileChanged>()
                        .write(e)
                };
            }
        }
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn result_to_string(
    instance: xr::Instance,
    value: xr::Result,
    buffer: *mut c_char,
) -> xr::Result {
    entry("xrResultToString", || {
        // SAFETY: the spec's buffer of XR_MAX_RESULT_STRING_SIZE characters (null checked).
        let out = unsafe { fixed_str(buffer, xr::MAX_RESULT_STRING_SIZE) }?;
        core::result_to_string(instance, value, out)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn structure_type_to_string(
    instance: xr::Instance,
    value: xr::StructureType,
    buffer: *mut c_char,
) -> xr::Result {
    entry("xrStructureTypeToString", || {
        // SAFETY: the spec's buffer of XR_MAX_STRUCTURE_NAME_SIZE characters (null checked).
        let out = unsafe { fixed_str(buffer, xr::MAX_STRUCTURE_NAME_SIZE) }?;
        core::structure_type_to_string(instance, value, out)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn get_system(
    instance: xr::Instance,
    info: *const xr::SystemGetInfo,
    system: *mut xr::SystemId,
) -> xr::Result {
    entry("xrGetSystem", || {
        // SAFETY: the application's XrSystemGetInfo (null and type checked).
        let info = unsafe { input(info, T::SYSTEM_GET_INFO) }?;
        // SAFETY: the application's output id (null checked).
        let out = unsafe { out_value(system) }?;
        out.write(core::get_system(instance, info)?);
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn get_system_properties(
    instance: xr::Instance,
    system: xr::SystemId,
    props: *mut xr::SystemProperties,
) -> xr::Result {
    entry("xrGetSystemProperties", || {
        // SAFETY: the application's XrSystemProperties (null and type checked).
        let p = unsafe { output(props, T::SYSTEM_PROPERTIES) }?;
        core::system_properties(instance, system, p)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn enumerate_view_configurations(
    instance: xr::Instance,
    system: xr::SystemId,
    capacity: u32,
    count: *mut u32,
    types: *mut xr::ViewConfigurationType,
) -> xr::Result {
    entry("xrEnumerateViewConfigurations", || {
        // SAFETY: the application's two-call array (null checked).
        let out = unsafe { array(capacity, count, types) }?;
        core::view_configurations(instance, system, out)
    })
}

pub(crate) unsafe extern "system" fn get_view_configuration_properties(
    instance: xr::Instance,
    system: xr::SystemId,
    ty: xr::ViewConfigurationType,
    props: *mut xr::ViewConfigurationProperties,
) -> xr::Result {
    entry("xrGetViewConfigurationProperties", || {
        // SAFETY: the application's XrViewConfigurationProperties (null and type checked).
        let p = unsafe { output(props, T::VIEW_CONFIGURATION_PROPERTIES) }?;
        core::view_configuration_properties(instance, system, ty, p)?;
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn enumerate_view_configuration_views(
    instance: xr::Instance,
    system: xr::SystemId,
    ty: xr::ViewConfigurationType,
    capacity: u32,
    count: *mut u32,
    views: *mut xr::ViewConfigurationView,
) -> xr::Result {
    entry("xrEnumerateViewConfigurationViews", || {
        // SAFETY: the application's two-call array of XrViewConfigurationView (null and
        // the first type checked; the spec has the application set every element's type).
        let out = unsafe { struct_array(capacity, count, views, T::VIEW_CONFIGURATION_VIEW) }?;
        core::view_configuration_views(instance, system, ty, out)
    })
}

pub(crate) unsafe extern "system" fn enumerate_environment_blend_modes(
    instance: xr::Instance,
    system: xr::SystemId,
    ty: xr::ViewConfigurationType,
    capacity: u32,
    count: *mut u32,
    modes: *mut xr::EnvironmentBlendMode,
) -> xr::Result {
    entry("xrEnumerateEnvironmentBlendModes", || {
        // SAFETY: the application's two-call array (null checked).
        let out = unsafe { array(capacity, count, modes) }?;
        core::environment_blend_modes(instance, system, ty, out)
    })
}

pub(crate) unsafe extern "system" fn string_to_path(
    instance: xr::Instance,
    s: *const c_char,
    out: *mut xr::Path,
) -> xr::Result {
    entry("xrStringToPath", || {
        // SAFETY: the application's NUL-terminated string (null checked).
        let text = unsafe { c_str(s) }.ok_or(xr::Result::ERROR_VALIDATION_FAILURE)?;
        // SAFETY: the application's output path (null checked).
        let out = unsafe { out_value(out) }?;
        out.write(core::string_to_path(instance, text)?);
        Ok(OK)
    })
}

pub(crate) unsafe extern "system" fn path_to_string(
    instance: xr::Instance,
    path: xr::Path,
    capacity: u32,
    count: *mut u32,
    buffer: *mut c_char,
) -> xr::Result {
    entry("xrPathToString", || {
        // SAFETY: the application's two-call buffer (null checked).
        let out = unsafe { array(capacity, count, buffer) }?;
        core::path_to_string(instance, path, out)
    })
}

pub(crate) unsafe extern "system" fn get_opengl_graphics_requirements(
    instance: xr::Instance,
    system: xr::SystemId,
    req: *mut xr::GraphicsRequirementsOpenGLKHR,
) -> xr::Result {
    entry("xrGetOpenGLGraphicsRequirementsKHR", || {
        // SAFETY: the application's XrGraphicsRequirementsOpenGLKHR (null and type checked).
        let r = unsafe { output(req, T::GRAPHICS_REQUIREMENTS_OPENGL_KHR) }?;
        core::opengl_graphics_requirements(instance, system, r)?;
        Ok(OK)
    })
}

//! The instance, the system (the streamed headset), its views, paths and events.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_char;

use openxr_sys as xr;
use openxr_sys::Handle;

use crate::actions::Bindings;
use crate::guard;
use crate::runtime::{lock, Event, Instance, SYSTEM_RAW};
use crate::session::{destroy_session_objects, follow_clients};
use crate::stream::Settings;
use crate::util::{c_str, fill, fill_str, fill_with, get_str, put_str, ty_of};
use crate::{API_MAX, RUNTIME_NAME};

/// The instance extensions offered, with their spec versions.
pub const EXTENSIONS: [(&str, u32); 3] = [
    ("XR_KHR_opengl_enable", 10),
    ("XR_KHR_vulkan_enable2", 2),
    ("XR_KHR_vulkan_enable", 8),
];

pub(crate) unsafe extern "system" fn enumerate_instance_extension_properties(
    layer: *const c_char,
    capacity: u32,
    count: *mut u32,
    props: *mut xr::ExtensionProperties,
) -> xr::Result {
    guard("xrEnumerateInstanceExtensionProperties", || {
        if !layer.is_null() {
            return xr::Result::ERROR_API_LAYER_NOT_PRESENT;
        }
        if capacity > 0 {
            // SAFETY: type read of the application's first element.
            if unsafe { ty_of(props) } != Some(xr::StructureType::EXTENSION_PROPERTIES) {
                return xr::Result::ERROR_VALIDATION_FAILURE;
            }
        }
        // SAFETY: the application's two-call array.
        unsafe {
            fill_with(capacity, count, EXTENSIONS.len(), |i| {
                let p = &mut *props.add(i);
                put_str(&mut p.extension_name, EXTENSIONS[i].0);
                p.extension_version = EXTENSIONS[i].1;
            })
        }
    })
}

pub(crate) unsafe extern "system" fn create_instance(
    info: *const xr::InstanceCreateInfo,
    out: *mut xr::Instance,
) -> xr::Result {
    guard("xrCreateInstance", || {
        crate::util::init_logging();
        // SAFETY: type read first.
        if unsafe { ty_of(info) } != Some(xr::StructureType::INSTANCE_CREATE_INFO) || out.is_null()
        {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: checked.
        let info = unsafe { &*info };
        let v = info.application_info.api_version;
        if v.major() != 1 || v.minor() != 0 {
            log::warn!("xrCreateInstance: the application asks for OpenXR {v}; this runtime implements 1.0 (up to {API_MAX})");
            return xr::Result::ERROR_API_VERSION_UNSUPPORTED;
        }
        let (mut opengl, mut vulkan) = (false, false);
        for i in 0..info.enabled_extension_count as usize {
            // SAFETY: `enabled_extension_count` strings.
            let name = unsafe { c_str(*info.enabled_extension_names.add(i)) };
            match name {
                Some("XR_KHR_opengl_enable") => opengl = true,
                Some("XR_KHR_vulkan_enable2" | "XR_KHR_vulkan_enable") => vulkan = true,
                Some(other) => {
                    log::warn!("xrCreateInstance: extension {other} is not supported (this runtime offers XR_KHR_opengl_enable, XR_KHR_vulkan_enable2 and XR_KHR_vulkan_enable)");
                    return xr::Result::ERROR_EXTENSION_NOT_PRESENT;
                }
                None => return xr::Result::ERROR_VALIDATION_FAILURE,
            }
        }
        if info.enabled_api_layer_count > 0 {
            // Layers are the loader's business; a runtime sees none.
            return xr::Result::ERROR_API_LAYER_NOT_PRESENT;
        }
        let settings = match Settings::load() {
            Ok(s) => s,
            Err(e) => {
                log::error!("xrCreateInstance: untether configuration: {e}");
                eprintln!("untether OpenXR runtime: configuration: {e}");
                return xr::Result::ERROR_RUNTIME_FAILURE;
            }
        };
        let mut rt = lock();
        if rt.instance.is_some() {
            return xr::Result::ERROR_LIMIT_REACHED;
        }
        let id = rt.new_id();
        rt.instance = Some(Instance {
            id,
            application: get_str(&info.application_info.application_name).unwrap_or_default(),
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
        });
        // SAFETY: checked non-null.
        unsafe { out.write(xr::Instance::from_raw(id)) };
        xr::Result::SUCCESS
    })
}

pub(crate) unsafe extern "system" fn destroy_instance(instance: xr::Instance) -> xr::Result {
    guard("xrDestroyInstance", || {
        let mut rt = lock();
        if rt.instance(instance).is_err() {
            return xr::Result::ERROR_HANDLE_INVALID;
        }
        let sessions: Vec<u64> = rt.sessions.keys().copied().collect();
        for s in sessions {
            destroy_session_objects(&mut rt, s);
        }
        rt.action_sets.clear();
        rt.actions.clear();
        rt.instance = None;
        xr::Result::SUCCESS
    })
}

pub(crate) unsafe extern "system" fn get_instance_properties(
    instance: xr::Instance,
    props: *mut xr::InstanceProperties,
) -> xr::Result {
    guard("xrGetInstanceProperties", || {
        if lock().instance(instance).is_err() {
            return xr::Result::ERROR_HANDLE_INVALID;
        }
        // SAFETY: type read first.
        if unsafe { ty_of(props) } != Some(xr::StructureType::INSTANCE_PROPERTIES) {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: checked.
        let p = unsafe { &mut *props };
        let v = env!("CARGO_PKG_VERSION").split('.').collect::<Vec<_>>();
        let n = |i: usize| v.get(i).and_then(|s| s.parse().ok()).unwrap_or(0);
        p.runtime_version = xr::Version::new(n(0) as u16, n(1) as u16, n(2));
        put_str(&mut p.runtime_name, RUNTIME_NAME);
        xr::Result::SUCCESS
    })
}

pub(crate) unsafe extern "system" fn poll_event(
    instance: xr::Instance,
    buffer: *mut xr::EventDataBuffer,
) -> xr::Result {
    guard("xrPollEvent", || {
        // SAFETY: type read first.
        if unsafe { ty_of(buffer) } != Some(xr::StructureType::EVENT_DATA_BUFFER) {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        let mut rt = lock();
        if rt.instance(instance).is_err() {
            return xr::Result::ERROR_HANDLE_INVALID;
        }
        follow_clients(&mut rt);
        let Some(e) = rt.instance.as_mut().and_then(|i| i.events.pop_front()) else {
            return xr::Result::EVENT_UNAVAILABLE;
        };
        // SAFETY: the buffer is an XrEventDataBuffer (4000 bytes), larger than either event.
        unsafe {
            match e {
                Event::SessionState {
                    session,
                    state,
                    time,
                } => (buffer as *mut xr::EventDataSessionStateChanged).write(
                    xr::EventDataSessionStateChanged {
                        ty: xr::StructureType::EVENT_DATA_SESSION_STATE_CHANGED,
                        next: std::ptr::null(),
                        session: xr::Session::from_raw(session),
                        state,
                        time,
                    },
                ),
                Event::InteractionProfileChanged { session } => (buffer
                    as *mut xr::EventDataInteractionProfileChanged)
                    .write(xr::EventDataInteractionProfileChanged {
                        ty: xr::StructureType::EVENT_DATA_INTERACTION_PROFILE_CHANGED,
                        next: std::ptr::null(),
                        session: xr::Session::from_raw(session),
                    }),
            }
        }
        xr::Result::SUCCESS
    })
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

pub(crate) unsafe extern "system" fn result_to_string(
    instance: xr::Instance,
    value: xr::Result,
    buffer: *mut c_char,
) -> xr::Result {
    guard("xrResultToString", || {
        if lock().instance(instance).is_err() {
            return xr::Result::ERROR_HANDLE_INVALID;
        }
        if buffer.is_null() {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        let s = enum_name("XR_", format!("{value:?}"), value.into_raw());
        // SAFETY: the spec's buffer of XR_MAX_RESULT_STRING_SIZE.
        let out = unsafe { std::slice::from_raw_parts_mut(buffer, xr::MAX_RESULT_STRING_SIZE) };
        put_str(out, &s);
        xr::Result::SUCCESS
    })
}

pub(crate) unsafe extern "system" fn structure_type_to_string(
    instance: xr::Instance,
    value: xr::StructureType,
    buffer: *mut c_char,
) -> xr::Result {
    guard("xrStructureTypeToString", || {
        if lock().instance(instance).is_err() {
            return xr::Result::ERROR_HANDLE_INVALID;
        }
        if buffer.is_null() {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        let s = enum_name("XR_TYPE_", format!("{value:?}"), value.into_raw());
        // SAFETY: the spec's buffer of XR_MAX_STRUCTURE_NAME_SIZE.
        let out = unsafe { std::slice::from_raw_parts_mut(buffer, xr::MAX_STRUCTURE_NAME_SIZE) };
        put_str(out, &s);
        xr::Result::SUCCESS
    })
}

pub(crate) unsafe extern "system" fn get_system(
    instance: xr::Instance,
    info: *const xr::SystemGetInfo,
    system: *mut xr::SystemId,
) -> xr::Result {
    guard("xrGetSystem", || {
        // SAFETY: type read first.
        if unsafe { ty_of(info) } != Some(xr::StructureType::SYSTEM_GET_INFO) || system.is_null() {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: checked.
        let info = unsafe { &*info };
        let mut rt = lock();
        let Ok(inst) = rt.instance(instance) else {
            return xr::Result::ERROR_HANDLE_INVALID;
        };
        if info.form_factor != xr::FormFactor::HEAD_MOUNTED_DISPLAY {
            return xr::Result::ERROR_FORM_FACTOR_UNSUPPORTED;
        }
        inst.system_asked = true;
        // SAFETY: checked non-null.
        unsafe { system.write(xr::SystemId::from_raw(SYSTEM_RAW)) };
        xr::Result::SUCCESS
    })
}

pub(crate) unsafe extern "system" fn get_system_properties(
    instance: xr::Instance,
    system: xr::SystemId,
    props: *mut xr::SystemProperties,
) -> xr::Result {
    guard("xrGetSystemProperties", || {
        if let Err(e) = lock().system(instance, system) {
            return e;
        }
        // SAFETY: type read first.
        if unsafe { ty_of(props) } != Some(xr::StructureType::SYSTEM_PROPERTIES) {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: checked.
        let p = unsafe { &mut *props };
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
        xr::Result::SUCCESS
    })
}

pub(crate) unsafe extern "system" fn enumerate_view_configurations(
    instance: xr::Instance,
    system: xr::SystemId,
    capacity: u32,
    count: *mut u32,
    types: *mut xr::ViewConfigurationType,
) -> xr::Result {
    guard("xrEnumerateViewConfigurations", || {
        if let Err(e) = lock().system(instance, system) {
            return e;
        }
        // SAFETY: the application's two-call array.
        unsafe {
            fill(
                capacity,
                count,
                types,
                &[xr::ViewConfigurationType::PRIMARY_STEREO],
            )
        }
    })
}

pub(crate) unsafe extern "system" fn get_view_configuration_properties(
    instance: xr::Instance,
    system: xr::SystemId,
    ty: xr::ViewConfigurationType,
    props: *mut xr::ViewConfigurationProperties,
) -> xr::Result {
    guard("xrGetViewConfigurationProperties", || {
        if let Err(e) = lock().system(instance, system) {
            return e;
        }
        if ty != xr::ViewConfigurationType::PRIMARY_STEREO {
            return xr::Result::ERROR_VIEW_CONFIGURATION_TYPE_UNSUPPORTED;
        }
        // SAFETY: type read first.
        if unsafe { ty_of(props) } != Some(xr::StructureType::VIEW_CONFIGURATION_PROPERTIES) {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        // SAFETY: checked.
        let p = unsafe { &mut *props };
        p.view_configuration_type = ty;
        p.fov_mutable = xr::FALSE;
        xr::Result::SUCCESS
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
    guard("xrEnumerateViewConfigurationViews", || {
        let mut rt = lock();
        if let Err(e) = rt.system(instance, system) {
            return e;
        }
        if ty != xr::ViewConfigurationType::PRIMARY_STEREO {
            return xr::Result::ERROR_VIEW_CONFIGURATION_TYPE_UNSUPPORTED;
        }
        let Ok(inst) = rt.instance(instance) else {
            return xr::Result::ERROR_HANDLE_INVALID;
        };
        let (w, h) = inst.settings.eye_size();
        if capacity > 0 {
            // SAFETY: type read of the first element.
            if unsafe { ty_of(views) } != Some(xr::StructureType::VIEW_CONFIGURATION_VIEW) {
                return xr::Result::ERROR_VALIDATION_FAILURE;
            }
        }
        // SAFETY: the application's two-call array.
        unsafe {
            fill_with(capacity, count, 2, |i| {
                let v = &mut *views.add(i);
                v.recommended_image_rect_width = w;
                v.recommended_image_rect_height = h;
                v.max_image_rect_width = 4096;
                v.max_image_rect_height = 4096;
                v.recommended_swapchain_sample_count = 1;
                v.max_swapchain_sample_count = 1;
            })
        }
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
    guard("xrEnumerateEnvironmentBlendModes", || {
        if let Err(e) = lock().system(instance, system) {
            return e;
        }
        if ty != xr::ViewConfigurationType::PRIMARY_STEREO {
            return xr::Result::ERROR_VIEW_CONFIGURATION_TYPE_UNSUPPORTED;
        }
        // SAFETY: the application's two-call array.
        unsafe { fill(capacity, count, modes, &[xr::EnvironmentBlendMode::OPAQUE]) }
    })
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

pub(crate) unsafe extern "system" fn string_to_path(
    instance: xr::Instance,
    s: *const c_char,
    out: *mut xr::Path,
) -> xr::Result {
    guard("xrStringToPath", || {
        // SAFETY: the application's string.
        let Some(text) = (unsafe { c_str(s) }) else {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        };
        if out.is_null() {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        let mut rt = lock();
        let Ok(inst) = rt.instance(instance) else {
            return xr::Result::ERROR_HANDLE_INVALID;
        };
        if !path_ok(text) {
            return xr::Result::ERROR_PATH_FORMAT_INVALID;
        }
        let p = inst.path(text);
        // SAFETY: checked non-null.
        unsafe { out.write(p) };
        xr::Result::SUCCESS
    })
}

pub(crate) unsafe extern "system" fn path_to_string(
    instance: xr::Instance,
    path: xr::Path,
    capacity: u32,
    count: *mut u32,
    buffer: *mut c_char,
) -> xr::Result {
    guard("xrPathToString", || {
        let mut rt = lock();
        let Ok(inst) = rt.instance(instance) else {
            return xr::Result::ERROR_HANDLE_INVALID;
        };
        let Some(s) = inst.path_str(path) else {
            return xr::Result::ERROR_PATH_INVALID;
        };
        // SAFETY: the application's two-call buffer.
        unsafe { fill_str(capacity, count, buffer, s) }
    })
}

pub(crate) unsafe extern "system" fn get_opengl_graphics_requirements(
    instance: xr::Instance,
    system: xr::SystemId,
    req: *mut xr::GraphicsRequirementsOpenGLKHR,
) -> xr::Result {
    guard("xrGetOpenGLGraphicsRequirementsKHR", || {
        let mut rt = lock();
        if let Err(e) = rt.system(instance, system) {
            return e;
        }
        // SAFETY: type read first.
        if unsafe { ty_of(req) } != Some(xr::StructureType::GRAPHICS_REQUIREMENTS_OPENGL_KHR) {
            return xr::Result::ERROR_VALIDATION_FAILURE;
        }
        if let Ok(i) = rt.instance(instance) {
            i.gl_requirements_asked = true;
        }
        // SAFETY: checked.
        let r = unsafe { &mut *req };
        // Framebuffer blits, texture storage, fences and pixel-pack buffers: GL 4.3 core
        // has them all (3.3 lacks glTexStorage).
        r.min_api_version_supported = xr::Version::new(4, 3, 0);
        r.max_api_version_supported = xr::Version::new(4, 6, 0);
        xr::Result::SUCCESS
    })
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
}

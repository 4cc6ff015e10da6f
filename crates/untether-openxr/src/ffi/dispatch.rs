//! `xrGetInstanceProcAddr`: every entry point by name.

use std::ffi::c_char;

use openxr_sys as xr;
use openxr_sys::Handle;

use super::actions as a;
use super::frame as f;
use super::instance as i;
use super::raw::{array, c_str, out_value};
use super::session as s;
use super::space as sp;
use super::swapchain as sc;
use super::{entry, OK};
use crate::{vulkan as vk, vulkan1 as vk1};

/// Functions callable without an instance (the loader's and the spec's list).
const GLOBAL: [&str; 3] = [
    "xrEnumerateInstanceExtensionProperties",
    "xrCreateInstance",
    "xrEnumerateApiLayerProperties",
];

macro_rules! entries {
    ($name:expr, { $($n:literal => $f:path,)* }) => {
        match $name {
            $($n => Some(
                // SAFETY: an `extern "system"` entry point of this runtime (a function
                // pointer, the size of `*const ()`), cast to the spec's opaque function type;
                // the application casts it back to its real type before calling it.
                unsafe { std::mem::transmute::<*const (), xr::pfn::VoidFunction>($f as *const ()) }
            ),)*
            _ => None,
        }
    };
}

/// The entry point called `name`, if this runtime has it.
pub fn lookup(name: &str) -> Option<xr::pfn::VoidFunction> {
    entries!(name, {
        "xrGetInstanceProcAddr" => get_instance_proc_addr,
        "xrEnumerateApiLayerProperties" => enumerate_api_layer_properties,
        "xrEnumerateInstanceExtensionProperties" => i::enumerate_instance_extension_properties,
        "xrCreateInstance" => i::create_instance,
        "xrDestroyInstance" => i::destroy_instance,
        "xrGetInstanceProperties" => i::get_instance_properties,
        "xrPollEvent" => i::poll_event,
        "xrResultToString" => i::result_to_string,
        "xrStructureTypeToString" => i::structure_type_to_string,
        "xrGetSystem" => i::get_system,
        "xrGetSystemProperties" => i::get_system_properties,
        "xrEnumerateViewConfigurations" => i::enumerate_view_configurations,
        "xrGetViewConfigurationProperties" => i::get_view_configuration_properties,
        "xrEnumerateViewConfigurationViews" => i::enumerate_view_configuration_views,
        "xrEnumerateEnvironmentBlendModes" => i::enumerate_environment_blend_modes,
        "xrStringToPath" => i::string_to_path,
        "xrPathToString" => i::path_to_string,
        "xrGetOpenGLGraphicsRequirementsKHR" => i::get_opengl_graphics_requirements,
        "xrGetVulkanGraphicsRequirements2KHR" => vk::get_vulkan_graphics_requirements2,
        "xrCreateVulkanInstanceKHR" => vk::create_vulkan_instance,
        "xrGetVulkanGraphicsDevice2KHR" => vk::get_vulkan_graphics_device2,
        "xrCreateVulkanDeviceKHR" => vk::create_vulkan_device,
        "xrGetVulkanGraphicsRequirementsKHR" => vk::get_vulkan_graphics_requirements2,
        "xrGetVulkanInstanceExtensionsKHR" => vk1::get_vulkan_instance_extensions,
        "xrGetVulkanDeviceExtensionsKHR" => vk1::get_vulkan_device_extensions,
        "xrGetVulkanGraphicsDeviceKHR" => vk1::get_vulkan_graphics_device,
        "xrCreateSession" => s::create_session,
        "xrDestroySession" => s::destroy_session,
        "xrBeginSession" => s::begin_session,
        "xrEndSession" => s::end_session,
        "xrRequestExitSession" => s::request_exit_session,
        "xrWaitFrame" => f::wait_frame,
        "xrBeginFrame" => f::begin_frame,
        "xrEndFrame" => f::end_frame,
        "xrEnumerateReferenceSpaces" => sp::enumerate_reference_spaces,
        "xrCreateReferenceSpace" => sp::create_reference_space,
        "xrGetReferenceSpaceBoundsRect" => sp::get_reference_space_bounds_rect,
        "xrDestroySpace" => sp::destroy_space,
        "xrLocateSpace" => sp::locate_space,
        "xrLocateViews" => sp::locate_views,
        "xrEnumerateSwapchainFormats" => sc::enumerate_swapchain_formats,
        "xrCreateSwapchain" => sc::create_swapchain,
        "xrDestroySwapchain" => sc::destroy_swapchain,
        "xrEnumerateSwapchainImages" => sc::enumerate_swapchain_images,
        "xrAcquireSwapchainImage" => sc::acquire_swapchain_image,
        "xrWaitSwapchainImage" => sc::wait_swapchain_image,
        "xrReleaseSwapchainImage" => sc::release_swapchain_image,
        "xrCreateActionSet" => a::create_action_set,
        "xrDestroyActionSet" => a::destroy_action_set,
        "xrCreateAction" => a::create_action,
        "xrDestroyAction" => a::destroy_action,
        "xrSuggestInteractionProfileBindings" => a::suggest_interaction_profile_bindings,
        "xrAttachSessionActionSets" => a::attach_session_action_sets,
        "xrGetCurrentInteractionProfile" => a::get_current_interaction_profile,
        "xrSyncActions" => a::sync_actions,
        "xrGetActionStateBoolean" => a::get_action_state_boolean,
        "xrGetActionStateFloat" => a::get_action_state_float,
        "xrGetActionStateVector2f" => a::get_action_state_vector2f,
        "xrGetActionStatePose" => a::get_action_state_pose,
        "xrCreateActionSpace" => sp::create_action_space,
        "xrApplyHapticFeedback" => a::apply_haptic_feedback,
        "xrStopHapticFeedback" => a::stop_haptic_feedback,
        "xrEnumerateBoundSourcesForAction" => a::enumerate_bound_sources_for_action,
        "xrGetInputSourceLocalizedName" => a::get_input_source_localized_name,
    })
}

/// The runtime's `xrGetInstanceProcAddr`.
///
/// # Safety
/// `name` must be a NUL-terminated string and `function` writable (both checked for null).
pub(crate) unsafe extern "system" fn get_instance_proc_addr(
    instance: xr::Instance,
    name: *const c_char,
    function: *mut Option<xr::pfn::VoidFunction>,
) -> xr::Result {
    entry("xrGetInstanceProcAddr", || {
        // SAFETY: the application's output function pointer (null checked).
        let function = unsafe { out_value(function) }?;
        let function = function.write(None);
        // SAFETY: the application's NUL-terminated name (null checked).
        let name = unsafe { c_str(name) }.ok_or(xr::Result::ERROR_VALIDATION_FAILURE)?;
        *function = Some(resolve(instance, name)?);
        Ok(OK)
    })
}

/// The entry point `name` for `instance` (NULL: the global functions only).
pub fn resolve(instance: xr::Instance, name: &str) -> Result<xr::pfn::VoidFunction, xr::Result> {
    if instance == xr::Instance::NULL {
        if !GLOBAL.contains(&name) {
            return Err(xr::Result::ERROR_HANDLE_INVALID);
        }
    } else {
        crate::runtime::instance(instance)?;
    }
    lookup(name).ok_or(xr::Result::ERROR_FUNCTION_UNSUPPORTED)
}

/// A runtime has no API layers of its own.
unsafe extern "system" fn enumerate_api_layer_properties(
    capacity: u32,
    count: *mut u32,
    props: *mut xr::ApiLayerProperties,
) -> xr::Result {
    entry("xrEnumerateApiLayerProperties", || {
        // SAFETY: the application's two-call array (null checked; nothing is written to it).
        let out = unsafe { array(capacity, count, props) }?;
        Ok(crate::util::two_call::<xr::ApiLayerProperties, _>(out, &[]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_functions_resolve_without_an_instance_and_others_do_not() {
        assert!(resolve(xr::Instance::NULL, "xrCreateInstance").is_ok());
        assert_eq!(
            resolve(xr::Instance::NULL, "xrCreateSession").err(),
            Some(xr::Result::ERROR_HANDLE_INVALID)
        );
        // A handle no instance has: invalid, whatever the name.
        assert_eq!(
            resolve(xr::Instance::from_raw(u64::MAX), "xrCreateSession").err(),
            Some(xr::Result::ERROR_HANDLE_INVALID)
        );
        assert!(lookup("xrLocateViews").is_some());
        assert!(lookup("xrCreateHandTrackerEXT").is_none());
    }
}

//! The doctor's lines for capture from inside applications (`untether run`: the Vulkan layer
//! and the GL hook) and for KMS capture (`untether host --capture kms`).

use std::ffi::{c_void, CStr, CString};

use untether_capture::kms::KmsCapture;
use untether_capture::launch::find_hook_library;

use super::{check, Check, Findings, Status};

/// Opens a shared library (local symbols, nothing run but its constructors).
fn dlopen(name: &str) -> Option<*mut c_void> {
    let c = CString::new(name).ok()?;
    // SAFETY: a valid C string; the handle is checked and kept (never closed).
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    (!h.is_null()).then_some(h)
}

fn has(handle: *mut c_void, symbol: &CStr) -> bool {
    // SAFETY: a live handle from dlopen and a valid C string.
    !unsafe { libc::dlsym(handle, symbol.as_ptr()) }.is_null()
}

pub(super) fn checks(f: &mut Findings) {
    let hook = find_hook_library();
    let lib = hook
        .as_ref()
        .ok()
        .and_then(|p| dlopen(&p.display().to_string()));
    let build = "build it: cargo build --release -p untether-capture-hook (make build does), \
                 next to the untether binary";
    let (vk, gl) = match (&hook, lib) {
        (Err(e), _) => {
            let c = Check {
                fix: build.into(),
                ..check("capture", "Vulkan layer", Status::Warn, e.to_string())
            };
            (
                c.clone(),
                Check {
                    name: "GL hook".into(),
                    ..c
                },
            )
        }
        (Ok(p), None) => {
            let c = Check {
                fix: build.into(),
                ..check(
                    "capture",
                    "Vulkan layer",
                    Status::Warn,
                    format!("{} does not load", p.display()),
                )
            };
            (
                c.clone(),
                Check {
                    name: "GL hook".into(),
                    ..c
                },
            )
        }
        (Ok(p), Some(h)) => (vulkan(p, h), opengl(p, h)),
    };
    f.checks.push(vk);
    f.checks.push(gl);
    f.checks.push(match KmsCapture::open(None) {
        Ok(k) => check(
            "capture",
            "KMS",
            Status::Ok,
            format!(
                "{}: {}x{} scan-out readable (untether host --capture kms; untested on real hardware)",
                k.device().display(),
                k.width,
                k.height
            ),
        ),
        Err(e) => Check {
            fix: "only for a console without a compositor, as root; untested on real hardware"
                .into(),
            ..check("capture", "KMS", Status::Warn, e.to_string())
        },
    });
}

fn vulkan(path: &std::path::Path, h: *mut c_void) -> Check {
    let layer =
        has(h, c"untether_vkGetInstanceProcAddr") && has(h, c"untether_vkGetDeviceProcAddr");
    let loader = dlopen("libvulkan.so.1").is_some();
    match (layer, loader) {
        (true, true) => check(
            "capture",
            "Vulkan layer",
            Status::Ok,
            format!(
                "{} in {} (implicit; untether run writes its manifest and enables it) · Vulkan loader libvulkan.so.1",
                untether_capture::LAYER_NAME,
                path.display()
            ),
        ),
        (false, _) => check(
            "capture",
            "Vulkan layer",
            Status::Warn,
            format!("{} has no layer entry points", path.display()),
        ),
        (true, false) => Check {
            fix: "install the Vulkan loader (libvulkan1) for Vulkan applications".into(),
            ..check(
                "capture",
                "Vulkan layer",
                Status::Warn,
                "no Vulkan loader (libvulkan.so.1)".into(),
            )
        },
    }
}

fn opengl(path: &std::path::Path, h: *mut c_void) -> Check {
    let hooks = has(h, c"glXSwapBuffers") && has(h, c"eglSwapBuffers");
    let apis: Vec<&str> = [("libGL.so.1", "GLX"), ("libEGL.so.1", "EGL")]
        .into_iter()
        .filter(|(lib, _)| dlopen(lib).is_some())
        .map(|(_, api)| api)
        .collect();
    if !hooks {
        return check(
            "capture",
            "GL hook",
            Status::Warn,
            format!("{} has no glXSwapBuffers/eglSwapBuffers", path.display()),
        );
    }
    check(
        "capture",
        "GL hook",
        if apis.is_empty() {
            Status::Warn
        } else {
            Status::Ok
        },
        format!(
            "glXSwapBuffers, eglSwapBuffers in {} (LD_PRELOAD by untether run) · {}",
            path.display(),
            if apis.is_empty() {
                "no libGL/libEGL here".to_string()
            } else {
                apis.join(", ")
            }
        ),
    )
}

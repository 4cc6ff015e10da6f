//! `--rtsp` in a build without the `rtsp` feature (the aarch64 client build: Debian's arm64
//! GStreamer development packages cannot be installed beside the amd64 ones): refused with the
//! reason when asked for, nothing otherwise.

use std::sync::Arc;

use anyhow::{bail, Result};
use untether::config::ConfigToml;
use untether::host::HostSetup;
use untether::identity::Access;

/// No RTSP server exists in this build: no value of this type can be made.
pub enum RtspServer {}

impl RtspServer {
    pub fn stop(&self) {
        match *self {}
    }
}

/// `rtsp.listen` empty: nothing to do; set: an error naming the key and why.
pub fn start(
    cfg: &ConfigToml,
    _access: Access,
    _setup: &mut HostSetup,
) -> Result<Option<Arc<RtspServer>>> {
    if cfg.rtsp.enabled() {
        bail!(
            "rtsp.listen (--rtsp): this build of untether has no RTSP server (built without the \
             `rtsp` feature, as the aarch64 client build is); serve RTSP from an x86_64 host build"
        );
    }
    Ok(None)
}

pub fn port(server: &RtspServer) -> u16 {
    match *server {}
}

pub fn announce(_who: &str, server: &RtspServer, _cfg: &ConfigToml, _access: Access) {
    match *server {}
}

pub fn summary(server: &RtspServer) -> untether::host::ConsumerSummary {
    match *server {}
}

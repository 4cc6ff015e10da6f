//! `untether bench`: runs scenarios (the test scene streamed host→client over loopback, across
//! two network namespaces, through an `ffmpeg` RTP peer, or to `ffmpeg` through the host's
//! RTSP server), samples picture quality off the
//! frame path, measures response delay, and writes one JSON report per scenario (the contract
//! in docs/REPORT.md) plus one self-contained HTML report with plots.

pub mod contract;
pub mod html;
pub mod peer;
#[cfg(feature = "rtsp")]
mod rtsp_peer;
pub mod run;
pub mod scenario;
pub mod series;

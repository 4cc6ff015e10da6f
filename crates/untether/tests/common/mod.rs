//! Helpers of the browser tests: a headless Chromium driven by its console, stamped pictures,
//! and a Janus + simple-whip-server pair on loopback.
#![allow(dead_code)]

pub mod browser;
pub mod janus;

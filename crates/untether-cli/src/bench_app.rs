//! `untether bench --capture app -- APP ARGS…`: a scenario whose frames are an unmodified
//! application's presents (the capture hook's frame ring, as `untether run`), with what the
//! hook counted added to the scenario's report (`app`): presents, the frames due on the
//! stream's grid, how many of those the client showed (from the pixel stamps: each carries
//! its due number), frames dropped in the application, time in the hook per present.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use untether::host::PresentRing;
use untether_bench::scenario::Scenario;
use untether_capture::launch::AppLaunch;
use untether_capture::RingCounters;

/// The application of one scenario, started with the capture hook.
pub(crate) struct BenchApp {
    launch: AppLaunch,
    name: String,
    start: (Instant, RingCounters),
}

impl BenchApp {
    /// Starts `app` and waits for its first presented frame, which must be the scenario's size.
    pub fn start(app: &[OsString], sc: &Scenario) -> Result<BenchApp> {
        let Some((program, rest)) = app.split_first() else {
            bail!("--capture app: name the application after --, e.g. untether bench --capture app --resolution 640x360 -- vkcube --width 640 --height 360");
        };
        let mut launch = AppLaunch::spawn(program, rest)?;
        let name = program.to_string_lossy().into_owned();
        let deadline = Instant::now() + Duration::from_secs(10);
        let size = loop {
            if let Some(size) = launch.ring.latest_size() {
                break size;
            }
            if let Some(status) = launch.exited() {
                bail!("{name} exited before presenting a frame ({status})");
            }
            if Instant::now() > deadline {
                bail!("no frame from {name} in 10 s: is it a Vulkan or OpenGL (GLX/EGL) application, under a display?");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        if (size.0 & !1, size.1 & !1) != (sc.width, sc.height) {
            bail!(
                "--capture app: {name} presents {}x{}: give --resolution {}x{} (the scenario is {}x{})",
                size.0,
                size.1,
                size.0 & !1,
                size.1 & !1,
                sc.width,
                sc.height
            );
        }
        Ok(BenchApp {
            start: (Instant::now(), launch.ring.counters()),
            launch,
            name,
        })
    }

    /// The ring the scenario's host takes frames from.
    pub fn ring(&self) -> PresentRing {
        PresentRing(self.launch.ring.clone())
    }

    /// Ends the application, adds what its hook counted to `report` (`app`) and returns a
    /// line saying it.
    pub fn finish(mut self, report: &mut serde_json::Value) -> String {
        let (t0, c0) = self.start;
        let c = self.launch.ring.counters();
        let secs = t0.elapsed().as_secs_f64();
        self.launch.stop(Duration::from_secs(2));
        let f = &report["frames"];
        let shown = f["stamped_shown"].as_u64().unwrap_or(0);
        let span = match (f["stamp_first"].as_u64(), f["stamp_last"].as_u64()) {
            (Some(a), Some(b)) => b.saturating_sub(a) + 1,
            _ => 0,
        };
        let presents = c.presents - c0.presents;
        let hook_mean_ms =
            c.hook_ns_total.saturating_sub(c0.hook_ns_total) as f64 / presents.max(1) as f64 / 1e6;
        let g = &report["latency_ms"]["glass_to_glass"];
        let line = format!(
            "  {}: {:.1} presents/s; shown {shown} of {span} due ({}); dropped in the app {}; \
             in the hook {hook_mean_ms:.3} ms mean, {:.3} ms max per present; waited {}; \
             present→shown p50 {} p95 {} p99 {} ms",
            self.name,
            presents as f64 / secs.max(1e-9),
            if span > 0 {
                format!("{:.1} %", shown as f64 * 100.0 / span as f64)
            } else {
                "-".into()
            },
            c.dropped_busy - c0.dropped_busy,
            c.hook_ns_max as f64 / 1e6,
            c.waited,
            g["p50"],
            g["p95"],
            g["p99"],
        );
        if let Some(obj) = report.as_object_mut() {
            obj.insert(
                "app".into(),
                serde_json::json!({
                    "name": self.name,
                    "presents": presents,
                    "presents_per_s": presents as f64 / secs.max(1e-9),
                    "due": c.due - c0.due,
                    "published": c.published - c0.published,
                    "dropped_busy": c.dropped_busy - c0.dropped_busy,
                    "waited": c.waited,
                    "shown_of_due": if span > 0 { Some(shown as f64 / span as f64) } else { None },
                    "hook_ms_mean": hook_mean_ms,
                    "hook_ms_max": c.hook_ns_max as f64 / 1e6,
                }),
            );
        }
        line
    }
}

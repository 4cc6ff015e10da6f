//! `untether run [host flags] -- APP ARGS…`: the host and an unmodified application together.
//! The application starts with the capture hook (crate `untether-capture-hook`: an implicit
//! Vulkan layer and an `LD_PRELOAD` hook of `glXSwapBuffers` / `eglSwapBuffers`) writing its
//! presented frames into a shared-memory ring; the host encodes them as any source, and the
//! client's input goes back to the application's X display through XTEST. The host ends when
//! the application exits (or at `--duration`, or Ctrl-C, which also end the application).

use std::ffi::OsString;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Args;
use untether::host::{HostSetup, InputSpec, PresentRing, SourceSpec};
use untether_capture::launch::AppLaunch;
use untether_media::x11::PointerMode;

use crate::{Global, HostArgs};

#[derive(Args, Debug, Clone)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub host: HostArgs,
    /// The application and its arguments, after `--` (e.g. `-- vkcube`, `-- glxgears`).
    #[arg(last = true, required = true, value_name = "APP [ARGS]")]
    pub app: Vec<OsString>,
}

pub(crate) fn run(args: RunArgs, global: &Global) -> Result<()> {
    if args.host.capture.is_some() || args.host.source.is_some() {
        bail!(
            "untether run: --capture and --source do not apply: the source is the application's \
             presented frames"
        );
    }
    let Some((program, rest)) = args.app.split_first() else {
        bail!("untether run: name the application after --, e.g. untether run -- vkcube");
    };
    let mut app = AppRun {
        launch: AppLaunch::spawn(program, rest)?,
        name: program.to_string_lossy().into_owned(),
        pointer: match args.host.pointer.as_str() {
            "relative" => PointerMode::Relative,
            _ => PointerMode::Absolute,
        },
        rates: Rates::default(),
    };
    eprintln!(
        "untether run: started {} (pid {}) with the capture hook",
        app.name,
        app.launch.pid()
    );
    let mut host = args.host;
    // The ring copies the first presents before anyone watches: the stream starts at the
    // application's size (no encoder to reopen when the first client arrives).
    match app.first_size(Duration::from_secs(10)) {
        // Within the configurable sizes; otherwise the encoder follows the application's
        // size at its first frame (one keyframe later).
        Some((w, h)) if (512..=4096).contains(&w) && (288..=2304).contains(&h) => {
            host.video.resolution = Some(format!("{}x{}", w & !1, h & !1));
            host.size = None;
        }
        Some((w, h)) => eprintln!(
            "untether run: {} presents {w}x{h}, outside the configurable 512x288..4096x2304: \
             the encoder takes that size at the first frame",
            app.name
        ),
        None if app.launch.exited().is_some() => {
            app.finish();
            bail!(
                "untether run: {} exited before presenting a frame",
                app.name
            );
        }
        None => eprintln!(
            "untether run: no frame from {} in 10 s (is it a Vulkan or OpenGL application?); \
             the stream starts at the configured size",
            app.name
        ),
    }
    crate::run_host_app(host, global, Some(&mut app))
}

/// The application `untether run` started, as the host's loop sees it.
pub(crate) struct AppRun {
    launch: AppLaunch,
    name: String,
    pointer: PointerMode,
    /// The application's presents and time, while a client watched (capture on) and while
    /// none did (the hook only counts): the last look, and the sums.
    rates: Rates,
}

/// Presents per second with capture on and off, from the host loop's looks at the counters
/// (from the first present on, so the application's start-up is not counted).
#[derive(Default)]
struct Rates {
    last: Option<(Instant, u64, bool)>,
    /// (presents, seconds) while watched, and while not.
    watched: (u64, f64),
    unwatched: (u64, f64),
}

impl Rates {
    fn look(&mut self, now: Instant, presents: u64, watched: bool) {
        if let Some((t, p, w)) = self.last {
            if w == watched && p > 0 {
                let sum = if watched {
                    &mut self.watched
                } else {
                    &mut self.unwatched
                };
                sum.0 += presents - p;
                sum.1 += (now - t).as_secs_f64();
            }
        }
        self.last = Some((now, presents, watched));
    }

    fn rate((presents, s): (u64, f64)) -> f64 {
        if s > 0.0 {
            presents as f64 / s
        } else {
            0.0
        }
    }
}

impl AppRun {
    /// The source is the ring; input goes to the application's X display with XTEST.
    pub fn configure(&self, setup: &mut HostSetup) {
        setup.source = SourceSpec::Presents(PresentRing(self.launch.ring.clone()));
        setup.input = if std::env::var_os("DISPLAY").is_some() {
            InputSpec::Xtest {
                display: None,
                pointer: self.pointer,
            }
        } else {
            eprintln!("untether run: no DISPLAY: the client's input is dropped");
            InputSpec::Discard
        };
    }

    /// The size of the application's first presented frame, waiting up to `limit` (None: no
    /// frame in time, or the application exited).
    fn first_size(&mut self, limit: Duration) -> Option<(u32, u32)> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline && self.launch.exited().is_none() {
            if let Some(size) = self.launch.ring.latest_size() {
                return Some(size);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    /// Whether the application still runs (the host ends with it); notes the counters while
    /// a client watches.
    pub fn running(&mut self, watched: bool) -> bool {
        let presents = self.launch.ring.counters().presents;
        self.rates.look(Instant::now(), presents, watched);
        self.launch.exited().is_none()
    }

    /// Ends the application, prints what its hook counted and returns it for the report.
    pub fn finish(&mut self) -> serde_json::Value {
        let exit = self.launch.stop(Duration::from_secs(2));
        let c = self.launch.ring.counters();
        let rate = Rates::rate(self.rates.watched);
        let idle_rate = Rates::rate(self.rates.unwatched);
        eprintln!(
            "untether run: {} presented {} frames ({rate:.1}/s while watched, {idle_rate:.1}/s while not) · due on the stream's grid {} · copied {} · dropped {} (copy in flight or no slot) · skipped {} (above the stream's rate or nobody watching) · too big {} · unsupported {} · in the hook {:.3} ms on average, {:.3} ms at most, waited for a copy {} times · {}",
            self.name,
            c.presents,
            c.due,
            c.published,
            c.dropped_busy,
            c.skipped,
            c.too_big,
            c.unsupported,
            c.hook_ns_total as f64 / c.presents.max(1) as f64 / 1e6,
            c.hook_ns_max as f64 / 1e6,
            c.waited,
            match exit {
                Some(s) => format!("it ended: {s}"),
                None => "its exit status is unknown".into(),
            }
        );
        if c.presents == 0 {
            eprintln!(
                "untether run: no present reached the hook: is {} a Vulkan or OpenGL (GLX/EGL) \
                 application, and is the hook installed (untether doctor)?",
                self.name
            );
        }
        serde_json::json!({
            "name": self.name,
            "exit_code": exit.and_then(|s| s.code()),
            "presents": c.presents,
            "due": c.due,
            "published": c.published,
            "waited": c.waited,
            "dropped_busy": c.dropped_busy,
            "skipped": c.skipped,
            "too_big": c.too_big,
            "unsupported": c.unsupported,
            "hook_ms_mean": c.hook_ns_total as f64 / c.presents.max(1) as f64 / 1e6,
            "hook_ms_max": c.hook_ns_max as f64 / 1e6,
            "watched_s": self.rates.watched.1,
            "presents_per_s_watched": rate,
            "unwatched_s": self.rates.unwatched.1,
            "presents_per_s_unwatched": idle_rate,
        })
    }
}

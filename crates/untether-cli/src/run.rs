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
use untether_capture::RingCounters;
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
        watched: None,
    };
    eprintln!(
        "untether run: started {} (pid {}) with the capture hook",
        app.name,
        app.launch.pid()
    );
    crate::run_host_app(args.host, global, Some(&mut app))
}

/// The application `untether run` started, as the host's loop sees it.
pub(crate) struct AppRun {
    launch: AppLaunch,
    name: String,
    pointer: PointerMode,
    /// The first and the latest look at the counters while a client watched.
    watched: Option<((Instant, RingCounters), (Instant, RingCounters))>,
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

    /// Whether the application still runs (the host ends with it); notes the counters while
    /// a client watches.
    pub fn running(&mut self, watched: bool) -> bool {
        if watched {
            let now = (Instant::now(), self.launch.ring.counters());
            match &mut self.watched {
                None => self.watched = Some((now, now)),
                Some((_, last)) => *last = now,
            }
        }
        self.launch.exited().is_none()
    }

    /// Ends the application, prints what its hook counted and returns it for the report.
    pub fn finish(&mut self) -> serde_json::Value {
        let exit = self.launch.stop(Duration::from_secs(2));
        let c = self.launch.ring.counters();
        let (watched_s, rate) = match self.watched {
            Some(((t0, c0), (t1, c1))) if t1 > t0 => {
                let s = (t1 - t0).as_secs_f64();
                (s, (c1.presents - c0.presents) as f64 / s)
            }
            _ => (0.0, 0.0),
        };
        eprintln!(
            "untether run: {} presented {} frames ({rate:.1}/s while watched) · copied {} · dropped {} (copy in flight or no slot) · skipped {} (above the stream's rate or nobody watching) · too big {} · unsupported {} · in the hook {:.3} ms on average, {:.3} ms at most · {}",
            self.name,
            c.presents,
            c.published,
            c.dropped_busy,
            c.skipped,
            c.too_big,
            c.unsupported,
            c.hook_ns_total as f64 / c.presents.max(1) as f64 / 1e6,
            c.hook_ns_max as f64 / 1e6,
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
            "published": c.published,
            "dropped_busy": c.dropped_busy,
            "skipped": c.skipped,
            "too_big": c.too_big,
            "unsupported": c.unsupported,
            "hook_ms_mean": c.hook_ns_total as f64 / c.presents.max(1) as f64 / 1e6,
            "hook_ms_max": c.hook_ns_max as f64 / 1e6,
            "watched_s": watched_s,
            "presents_per_s_watched": rate,
        })
    }
}

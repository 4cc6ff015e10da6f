//! untether's log to stderr, for applications without a logger of their own.

use std::ffi::c_int;
use std::io::Write;

use crate::error::{guard, UNTETHER_OK};

/// Routes untether's log to stderr at `level` (0 off, 1 error,
/// 2 warn, 3 info, 4 debug). Call once, before anything else.
#[no_mangle]
pub extern "C" fn untether_log_to_stderr(level: c_int) -> c_int {
    guard(|| {
        let filter = match level {
            i32::MIN..=0 => log::LevelFilter::Off,
            1 => log::LevelFilter::Error,
            2 => log::LevelFilter::Warn,
            3 => log::LevelFilter::Info,
            _ => log::LevelFilter::Debug,
        };
        static LOGGER: StderrLogger = StderrLogger;
        let _ = log::set_logger(&LOGGER);
        log::set_max_level(filter);
        UNTETHER_OK
    })
}

struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let _ = writeln!(
                std::io::stderr(),
                "untether [{}] {}",
                record.level(),
                record.args()
            );
        }
    }
    fn flush(&self) {}
}

//! Encoder threads sized to the machine: when `video.encoder_threads` is left at `0` (auto),
//! the host picks x264's slice threads (and with them its slices: one per thread with sliced
//! threads), x265's pool or SVT-AV1's processors from the cores it may run on and the picture
//! height. An explicit setting always wins.
//!
//! The rule: one thread per core the process may use (`sched_getaffinity`, so `taskset`
//! counts), one core left for capture, conversion and the network once there are more than
//! two, and no more threads than the picture has bands of [`MIN_ROWS_PER_SLICE`] macroblock
//! rows (a thinner slice costs more in lost prediction and slice headers than its thread
//! saves), at most [`MAX_AUTO_THREADS`].

use std::fmt;

/// Macroblock rows (16 pixels) each slice thread gets at least.
pub const MIN_ROWS_PER_SLICE: u32 = 8;
/// The most threads auto picks (x264's sliced threads stop paying off well before this).
pub const MAX_AUTO_THREADS: usize = 16;

/// What auto chose and why (for the host's log line and the report).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoThreads {
    pub threads: usize,
    /// Cores this process may run on.
    pub cores: usize,
    /// Macroblock rows of the picture.
    pub rows: u32,
}

impl fmt::Display for AutoThreads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} encoder threads (auto: {} cores, {} macroblock rows, at least {} rows a slice)",
            self.threads, self.cores, self.rows, MIN_ROWS_PER_SLICE
        )
    }
}

/// Cores this process may run on (its affinity mask; 1 when unknown).
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The threads for a picture `height` pixels tall on `cores` cores.
pub fn auto_threads(cores: usize, height: u32) -> AutoThreads {
    let rows = height.div_ceil(16).max(1);
    let cores = cores.max(1);
    let usable = if cores > 2 { cores - 1 } else { cores };
    let by_rows = (rows / MIN_ROWS_PER_SLICE).max(1) as usize;
    AutoThreads {
        threads: usable.min(by_rows).clamp(1, MAX_AUTO_THREADS),
        cores,
        rows,
    }
}

/// `configured` threads, or (0) the auto choice for this machine; the choice comes back so
/// the caller can say what it picked.
pub fn resolve_threads(configured: usize, height: u32) -> (usize, Option<AutoThreads>) {
    if configured > 0 {
        return (configured, None);
    }
    let a = auto_threads(available_cores(), height);
    (a.threads, Some(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_threads_follow_cores_and_resolution() {
        // This dev box: 2 cores, both used.
        assert_eq!(auto_threads(2, 1080).threads, 2);
        assert_eq!(auto_threads(1, 1080).threads, 1);
        // 16 cores: one left over, and 1080p (68 rows) holds 8 slices of 8 rows.
        assert_eq!(auto_threads(16, 1080).threads, 8);
        assert_eq!(auto_threads(16, 720).threads, 5);
        assert_eq!(auto_threads(4, 1080).threads, 3);
        // A small picture gets one thread however many cores there are.
        assert_eq!(auto_threads(64, 120).threads, 1);
        assert_eq!(auto_threads(64, 4320).threads, MAX_AUTO_THREADS);
    }

    #[test]
    fn explicit_threads_win() {
        assert_eq!(resolve_threads(3, 1080), (3, None));
        let (n, a) = resolve_threads(0, 1080);
        assert!(n >= 1 && a.is_some_and(|a| a.threads == n));
    }
}

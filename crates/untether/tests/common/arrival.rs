//! How long after an application's change its frame was captured: shared by the tests that
//! check a source encodes on arrival (X11 DAMAGE in integration.rs, wlr-screencopy in
//! wayland.rs).

/// For each capture time at or after the first change, the time since the last change before
/// it, µs, sorted (a capture before any change is not counted).
pub fn since_last_change(changes_us: &[u64], captures_us: impl Iterator<Item = u64>) -> Vec<u64> {
    let Some(&first) = changes_us.first() else {
        return Vec::new();
    };
    let mut delays: Vec<u64> = captures_us
        .filter(|&c| c >= first)
        .filter_map(|c| {
            let changed = changes_us.iter().rev().find(|&&d| d <= c)?;
            Some(c - changed)
        })
        .collect();
    delays.sort_unstable();
    delays
}

/// The median of sorted values (None when empty).
pub fn p50(sorted: &[u64]) -> Option<u64> {
    sorted.get(sorted.len() / 2).copied()
}

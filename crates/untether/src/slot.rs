//! A latest-wins hand-over between two pipeline stages: it holds at most one item; putting a
//! new one replaces (and counts) the older one that was never taken. Stages never build queues.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

#[derive(Debug)]
pub struct Slot<T> {
    state: Mutex<SlotState<T>>,
    ready: Condvar,
}

#[derive(Debug)]
struct SlotState<T> {
    item: Option<T>,
    replaced: u64,
    closed: bool,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Slot<T> {
    pub fn new() -> Self {
        Slot {
            state: Mutex::new(SlotState {
                item: None,
                replaced: 0,
                closed: false,
            }),
            ready: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, SlotState<T>> {
        // A panicking stage poisons nothing we rely on: the state is always consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts `item`, returning the older item it replaced (so its buffer can be reused).
    pub fn put(&self, item: T) -> Option<T> {
        let mut s = self.lock();
        let old = s.item.replace(item);
        if old.is_some() {
            s.replaced += 1;
        }
        drop(s);
        self.ready.notify_one();
        old
    }

    /// Takes the item, waiting up to `timeout`. None on timeout or when closed and empty.
    pub fn take(&self, timeout: Duration) -> Option<T> {
        let mut s = self.lock();
        if s.item.is_none() && !s.closed {
            s = self
                .ready
                .wait_timeout_while(s, timeout, |s| s.item.is_none() && !s.closed)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        s.item.take()
    }

    /// Takes the item if there is one, without waiting.
    pub fn try_take(&self) -> Option<T> {
        self.lock().item.take()
    }

    /// Wakes every waiter; later takes return what is left and then None at once.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// How many items were replaced before anyone took them (frames dropped at this stage).
    pub fn replaced(&self) -> u64 {
        self.lock().replaced
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn latest_wins_and_counts_drops() {
        let s = Slot::new();
        assert_eq!(s.put(1), None);
        assert_eq!(s.put(2), Some(1));
        assert_eq!(s.replaced(), 1);
        assert_eq!(s.take(Duration::ZERO), Some(2));
        assert_eq!(s.take(Duration::from_millis(5)), None);
    }

    #[test]
    fn take_wakes_on_put_and_close() {
        let s = Arc::new(Slot::new());
        let s2 = s.clone();
        let t = std::thread::spawn(move || s2.take(Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(20));
        s.put(7);
        assert_eq!(t.join().unwrap(), Some(7));
        let s3 = s.clone();
        let t = std::thread::spawn(move || s3.take(Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(20));
        s.close();
        assert_eq!(t.join().unwrap(), None);
    }
}

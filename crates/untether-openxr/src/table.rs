//! Handle tables: one per kind of object, each behind its own lock, mapping a handle to the
//! object it names (owned, shared out as an `Arc`, with its own lock for what changes).
//!
//! Handles are numbers from one process-wide counter, never reused and shared by every
//! kind (the instance too), so a stale handle, or one of another kind, names nothing:
//! `XR_ERROR_HANDLE_INVALID`, never a crash.
//!
//! The tables: sessions, spaces and swapchains ([`crate::runtime`]), action sets and
//! actions ([`crate::actions`]). Lock order (in full in [`crate::runtime`]'s doc): a
//! session's lock, then an action set's or a swapchain's own lock, then the instance slot,
//! then the instance's state lock, then a table's. A table's lock is held only inside its
//! methods, which call nothing else (the `conflicts`/`keep` closures the callers pass only
//! look at the objects' fixed fields), so it can be taken under any other lock and never
//! waits on one.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use openxr_sys as xr;

/// A fresh handle: never 0 (XR_NULL_HANDLE), never one given before.
pub fn new_handle() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The objects of one kind by handle.
pub struct Table<T> {
    objects: Mutex<BTreeMap<u64, Arc<T>>>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Table<T> {
    pub const fn new() -> Self {
        Table {
            objects: Mutex::new(BTreeMap::new()),
        }
    }

    /// The map, locked (a panic in another call does not poison it for good).
    fn map(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<T>>> {
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `object` under a fresh handle unless one already there `conflicts` with it
    /// (checked and added under one lock): None then.
    pub fn insert_unless(&self, object: T, conflicts: impl Fn(&T) -> bool) -> Option<u64> {
        let id = new_handle();
        self.insert_as(id, object, conflicts).ok().map(|()| id)
    }

    /// Adds `object` under `id` (a fresh [`new_handle`], which the object may hold itself)
    /// unless one already there `conflicts` with it (checked and added under one lock): the
    /// object is handed back then.
    pub fn insert_as(&self, id: u64, object: T, conflicts: impl Fn(&T) -> bool) -> Result<(), T> {
        let mut map = self.map();
        if map.values().any(|o| conflicts(o)) || map.contains_key(&id) {
            return Err(object);
        }
        map.insert(id, Arc::new(object));
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.map().is_empty()
    }

    /// The object `handle` names.
    pub fn get(&self, handle: u64) -> Result<Arc<T>, xr::Result> {
        self.map()
            .get(&handle)
            .cloned()
            .ok_or(xr::Result::ERROR_HANDLE_INVALID)
    }

    pub fn contains(&self, handle: u64) -> bool {
        self.map().contains_key(&handle)
    }

    /// Removes the object `handle` names (it lives on while others still hold it).
    pub fn remove(&self, handle: u64) -> Result<Arc<T>, xr::Result> {
        self.map()
            .remove(&handle)
            .ok_or(xr::Result::ERROR_HANDLE_INVALID)
    }

    /// Keeps only the objects `keep` says to.
    pub fn retain(&self, keep: impl Fn(&T) -> bool) {
        self.map().retain(|_, o| keep(o));
    }

    pub fn clear(&self) {
        self.map().clear();
    }

    /// Every object with its handle, in handle order (a snapshot: the lock is not held
    /// while the caller looks at them).
    pub fn snapshot(&self) -> Vec<(u64, Arc<T>)> {
        self.map().iter().map(|(&h, o)| (h, o.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_never_reused_and_stale_ones_are_invalid() {
        let t: Table<&str> = Table::new();
        let a = t.insert_unless("a", |_| false).unwrap();
        let b = t.insert_unless("b", |_| false).unwrap();
        assert!(a != 0 && b > a);
        assert_eq!(t.get(a).as_deref().copied(), Ok("a"));
        assert_eq!(t.remove(a).as_deref().copied(), Ok("a"));
        assert_eq!(t.get(a), Err(xr::Result::ERROR_HANDLE_INVALID));
        assert_eq!(t.remove(a), Err(xr::Result::ERROR_HANDLE_INVALID));
        let c = t.insert_unless("a", |_| false).unwrap();
        assert!(c > b, "a new object never gets an old handle");
        // Another table's handle names nothing here.
        let other: Table<u8> = Table::new();
        let o = other.insert_unless(1, |_| false).unwrap();
        assert!(!t.contains(o));
    }

    #[test]
    fn a_conflicting_object_is_not_added() {
        let t: Table<String> = Table::new();
        assert!(t.insert_unless("x".into(), |o| o == "x").is_some());
        assert!(t.insert_unless("x".into(), |o| o == "x").is_none());
        t.retain(|o| o != "x");
        assert!(t.snapshot().is_empty());
        assert!(t.insert_unless("x".into(), |o| o == "x").is_some());
        t.clear();
        assert!(t.snapshot().is_empty());
    }

    #[test]
    fn an_object_added_under_its_own_handle_comes_back_on_a_conflict() {
        let t: Table<String> = Table::new();
        assert!(t.is_empty());
        let id = new_handle();
        assert_eq!(t.insert_as(id, "one".into(), |_| true), Ok(()));
        assert!(!t.is_empty());
        assert_eq!(t.get(id).as_deref().map(String::as_str), Ok("one"));
        // One at a time: the second is handed back, the first stays.
        let other = new_handle();
        assert_eq!(
            t.insert_as(other, "two".into(), |_| true),
            Err("two".into())
        );
        assert!(!t.contains(other));
        // The same handle twice is a conflict too.
        assert_eq!(
            t.insert_as(id, "three".into(), |_| false),
            Err("three".into())
        );
        assert!(t.remove(id).is_ok());
        assert!(t.is_empty());
    }
}

//! Waking a thread that waits on its sockets: an `eventfd(2)` that [`wait`] polls beside them.
//!
//! A driver thread sleeps in [`wait`] until a datagram arrives or its next timer is due; another
//! thread that hands it work (over a channel) calls [`Waker::wake`] so it does not sleep through
//! it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::UdpEndpoint;

/// A wake-up signal for a thread blocked in [`wait`]. Cheap to share (`Arc<Waker>`).
#[derive(Debug)]
pub struct Waker {
    fd: OwnedFd,
}

impl Waker {
    /// A new, unsignalled waker.
    pub fn new() -> io::Result<Waker> {
        // SAFETY: eventfd has no pointer arguments; a negative return is an error.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Waker { fd })
    }

    /// Wakes the thread in [`wait`] (or makes its next wait return at once).
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64. A full counter (EAGAIN) still leaves the
        // waker signalled, which is all that matters.
        unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            )
        };
    }

    /// Clears the signal; true when it was set.
    fn reset(&self) -> bool {
        let mut n: u64 = 0;
        // SAFETY: reads at most 8 bytes into a valid u64; non-blocking.
        let r = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                &mut n as *mut u64 as *mut libc::c_void,
                8,
            )
        };
        r == 8 && n > 0
    }
}

/// What [`wait`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// Per endpoint (in the order given): readable, or an error to report.
    pub readable: Vec<bool>,
    /// The waker was signalled (and is now cleared).
    pub woken: bool,
}

impl Readiness {
    /// Nothing happened before the timeout.
    pub fn is_idle(&self) -> bool {
        !self.woken && !self.readable.iter().any(|&r| r)
    }
}

/// Waits up to `timeout` (nanosecond resolution, `ppoll(2)`) until one of `endpoints` can be
/// read or `waker` is signalled. A signal interrupting the wait reads as nothing ready.
pub fn wait(
    endpoints: &[&UdpEndpoint],
    waker: Option<&Waker>,
    timeout: Duration,
) -> io::Result<Readiness> {
    let fds: Vec<RawFd> = endpoints.iter().map(|e| e.raw_fd()).collect();
    wait_fds(&fds, waker, timeout)
}

/// Like [`wait`], over any descriptors (UDP endpoints' and a raw layer-2 endpoint's,
/// [`crate::raw::RawEndpoint::raw_fd`]); `readable` follows the order of `descriptors`.
pub fn wait_fds(
    descriptors: &[RawFd],
    waker: Option<&Waker>,
    timeout: Duration,
) -> io::Result<Readiness> {
    let endpoints = descriptors;
    let mut fds: Vec<libc::pollfd> = descriptors
        .iter()
        .map(|&fd| pollfd(fd))
        .chain(waker.map(|w| pollfd(w.fd.as_raw_fd())))
        .collect();
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `fds` holds `fds.len()` valid pollfds, `ts` a valid timespec, no signal mask.
    let rc = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    let mut out = Readiness {
        readable: vec![false; endpoints.len()],
        woken: false,
    };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok(out);
        }
        return Err(err);
    }
    for (r, f) in out.readable.iter_mut().zip(&fds) {
        *r = f.revents != 0;
    }
    if let Some(w) = waker {
        if fds[endpoints.len()].revents != 0 {
            out.woken = w.reset();
        }
    }
    Ok(out)
}

fn pollfd(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn waker_interrupts_a_wait_and_clears() {
        let a = UdpEndpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let w = Arc::new(Waker::new().unwrap());
        let w2 = w.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            w2.wake();
        });
        let start = Instant::now();
        let r = wait(&[&a], Some(&w), Duration::from_secs(5)).unwrap();
        assert!(r.woken && r.readable == vec![false]);
        assert!(start.elapsed() < Duration::from_secs(4));
        t.join().unwrap();
        // Cleared: the next wait times out.
        let r = wait(&[&a], Some(&w), Duration::from_millis(10)).unwrap();
        assert!(r.is_idle());
    }

    #[test]
    fn readable_socket_is_reported_in_order() {
        let a = UdpEndpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let b = UdpEndpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let c = UdpEndpoint::connect_to(b.local_addr().unwrap()).unwrap();
        c.send(b"x").unwrap();
        let r = wait(&[&a, &b], None, Duration::from_secs(2)).unwrap();
        assert_eq!(r.readable, vec![false, true]);
        assert!(!r.woken);
    }
}

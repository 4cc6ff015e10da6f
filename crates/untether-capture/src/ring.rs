//! The shared-memory frame ring between a capture hook in the application's process (the
//! producer) and the host (the consumer).
//!
//! One memfd holds a header page and `slots` pixel slots of `slot_bytes` each. A slot is
//! `FREE`, `WRITING` (the producer copies a frame into it), `READY` (a published frame) or
//! `READING` (the host encodes from it). The producer takes a free slot, or a ready one that
//! is not the newest: with three slots there is always one, so **the producer never waits**;
//! with fewer, or a frame larger than a slot, the frame is dropped and counted in the header.
//! The newest published frame is named by `latest`; the consumer takes that one (newest wins:
//! older ready frames are overwritten unseen). Publishing bumps a futex word that the consumer
//! sleeps on. The host also tells the producer how often it wants a frame (`interval_us`, a
//! fixed grid so that an application faster than the stream is sampled at the stream's rate)
//! and whether anyone watches (no copy at all while nobody does).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

const MAGIC: u64 = 0x554e_5445_5448_5246; // "UNTETHRF"
const VERSION: u32 = 2;
/// The most slots a ring has.
pub const MAX_SLOTS: usize = 8;
/// The sides of a frame the host takes, in pixels: anything else the application's side wrote
/// is refused frame by frame (counted, its reason kept), never handed to the encoder, whose
/// opening would fail for it and stop the host.
pub const FRAME_SIDES: std::ops::RangeInclusive<u32> = 2..=8192;
/// Bytes before the first slot (the header, padded to a page).
const HEADER_BYTES: usize = 4096;

const FREE: u32 = 0;
const WRITING: u32 = 1;
const READY: u32 = 2;
const READING: u32 = 3;

/// A slot's pixel layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameFormat {
    /// Bytes B, G, R, A (or X) per pixel: Vulkan `B8G8R8A8_*`, GL `GL_BGRA`.
    Bgra,
    /// Bytes R, G, B, A per pixel: Vulkan `R8G8B8A8_*`, GLES `GL_RGBA`.
    Rgba,
}

impl FrameFormat {
    fn code(self) -> u32 {
        match self {
            FrameFormat::Bgra => 1,
            FrameFormat::Rgba => 2,
        }
    }
    fn from_code(c: u32) -> Option<Self> {
        match c {
            1 => Some(FrameFormat::Bgra),
            2 => Some(FrameFormat::Rgba),
            _ => None,
        }
    }
}

/// What is wrong with a ring.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    #[error("frame ring: {what}: {source}")]
    Os {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("frame ring: {0}")]
    Invalid(String),
}

fn os(what: &'static str) -> RingError {
    RingError::Os {
        what,
        source: std::io::Error::last_os_error(),
    }
}

/// What the host takes of a slot's header, written by the application: its format known, its
/// sides within [`FRAME_SIDES`], its rows at least `4 × width` bytes and all of them inside the
/// slot. The reason otherwise.
fn check_frame(
    width: u32,
    height: u32,
    stride: usize,
    format: Option<FrameFormat>,
    slot_bytes: usize,
) -> Result<FrameFormat, String> {
    let format = format.ok_or("an unknown pixel format")?;
    if !FRAME_SIDES.contains(&width) || !FRAME_SIDES.contains(&height) {
        return Err(format!(
            "a {width}x{height} frame: each side must be {}–{} pixels",
            FRAME_SIDES.start(),
            FRAME_SIDES.end()
        ));
    }
    if (width as usize) * 4 > stride {
        return Err(format!("rows of {stride} bytes for {width} pixels"));
    }
    match stride.checked_mul(height as usize) {
        Some(n) if n <= slot_bytes => Ok(format),
        _ => Err(format!(
            "{height} rows of {stride} bytes: larger than the slot's {slot_bytes} bytes"
        )),
    }
}

#[repr(C)]
struct SlotMeta {
    width: AtomicU32,
    height: AtomicU32,
    stride: AtomicU32,
    format: AtomicU32,
    bottom_up: AtomicU32,
    _pad: AtomicU32,
    present_us: AtomicU64,
    frame: AtomicU64,
}

#[repr(C)]
struct Header {
    magic: AtomicU64,
    version: AtomicU32,
    slots: AtomicU32,
    slot_bytes: AtomicU64,
    // Host → application.
    interval_us: AtomicU64,
    watching: AtomicU32,
    producer_pid: AtomicU32,
    // Application → host.
    next_due_us: AtomicU64,
    /// The futex word: bumped at every publish.
    seq: AtomicU32,
    waiters: AtomicU32,
    /// `(frame << 8) | slot` of the newest published frame; 0: none yet.
    latest: AtomicU64,
    /// Presents due on the stream's grid (each one's number is its frame number).
    due: AtomicU64,
    presents: AtomicU64,
    published: AtomicU64,
    dropped_busy: AtomicU64,
    skipped: AtomicU64,
    too_big: AtomicU64,
    unsupported: AtomicU64,
    hook_ns_total: AtomicU64,
    hook_ns_max: AtomicU64,
    waited: AtomicU64,
    state: [AtomicU32; MAX_SLOTS],
    meta: [SlotMeta; MAX_SLOTS],
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_BYTES);

/// The application's counters, as the host reads them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingCounters {
    /// Presents the hook saw (every `vkQueuePresentKHR` / `glXSwapBuffers` / `eglSwapBuffers`).
    pub presents: u64,
    /// Presents due on the stream's grid while someone watched: the frames the stream should
    /// carry (each is copied and published, or dropped and counted).
    pub due: u64,
    /// Frames copied and published into the ring.
    pub published: u64,
    /// Frames dropped because no slot was free or the previous copy was still in flight.
    pub dropped_busy: u64,
    /// Presents not copied: nobody watching, or above the stream's rate.
    pub skipped: u64,
    /// Frames larger than a slot (dropped).
    pub too_big: u64,
    /// Presents of a pixel format the hook does not copy (dropped).
    pub unsupported: u64,
    /// Time spent inside the hook, in total and at most once (nanoseconds).
    pub hook_ns_total: u64,
    pub hook_ns_max: u64,
    /// Presents in which the hook waited for a copy (a fence, the previous copy): the hook is
    /// built never to, so this stays 0.
    pub waited: u64,
    /// The process that writes into the ring (0: none yet).
    pub producer_pid: u32,
}

/// A published frame the host holds (its slot is `READING` until this is dropped).
pub struct TakenFrame<'a> {
    ring: &'a FrameRing,
    slot: usize,
    pub width: u32,
    pub height: u32,
    pub stride: usize,
    pub format: FrameFormat,
    /// Rows are stored bottom row first (GL's `glReadPixels`).
    pub bottom_up: bool,
    /// When the application presented it (`CLOCK_MONOTONIC`, µs).
    pub present_us: u64,
    /// The number of the due present it is (1, 2, …; gaps are due frames dropped in the
    /// application or overwritten in the ring unseen).
    pub frame: u64,
}

impl TakenFrame<'_> {
    /// The pixels: `height` rows of `stride` bytes.
    pub fn data(&self) -> &[u8] {
        let len = self.stride * self.height as usize;
        // SAFETY: the slot is READING: the producer does not write it until it is freed on
        // drop; `len` was checked against the slot's size when the frame was taken.
        unsafe { std::slice::from_raw_parts(self.ring.slot_ptr(self.slot), len) }
    }

    /// The pixels, writable (e.g. for a stamp): the slot is the host's until dropped.
    pub fn data_mut(&mut self) -> &mut [u8] {
        let len = self.stride * self.height as usize;
        // SAFETY: as in `data`; `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ring.slot_ptr(self.slot), len) }
    }
}

impl Drop for TakenFrame<'_> {
    fn drop(&mut self) {
        self.ring.header().state[self.slot].store(FREE, Ordering::Release);
    }
}

/// A slot the producer copies a frame into; published with [`WriteSlot::publish`], freed
/// (nothing published) when dropped.
pub struct WriteSlot<'a> {
    ring: &'a FrameRing,
    slot: usize,
    len: usize,
    published: bool,
}

impl WriteSlot<'_> {
    /// The slot's pixel bytes, `stride * height` of them.
    pub fn pixels_mut(&mut self) -> &mut [u8] {
        // SAFETY: the slot is WRITING: only this producer touches it; `len` ≤ slot_bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ring.slot_ptr(self.slot), self.len) }
    }

    /// Publishes due frame number `frame` (from [`FrameRing::note_present`]; increasing),
    /// presented at `present_us`, as the newest and wakes the host.
    pub fn publish(mut self, present_us: u64, frame: u64) {
        let h = self.ring.header();
        let frame = frame.clamp(1, u64::MAX >> 8);
        let m = &h.meta[self.slot];
        m.present_us.store(present_us, Ordering::Relaxed);
        m.frame.store(frame, Ordering::Relaxed);
        h.state[self.slot].store(READY, Ordering::Release);
        h.latest
            .store((frame << 8) | self.slot as u64, Ordering::Release);
        h.published.fetch_add(1, Ordering::Relaxed);
        self.published = true;
        h.seq.fetch_add(1, Ordering::SeqCst);
        if h.waiters.load(Ordering::SeqCst) > 0 {
            futex_wake(&h.seq);
        }
    }
}

impl Drop for WriteSlot<'_> {
    fn drop(&mut self) {
        if !self.published {
            self.ring.header().state[self.slot].store(FREE, Ordering::Release);
        }
    }
}

/// The ring, mapped into this process.
pub struct FrameRing {
    fd: OwnedFd,
    base: *mut u8,
    map_len: usize,
    slots: usize,
    slot_bytes: usize,
    /// Consumer side: the `latest` word last taken (frame number and slot). A frame is new
    /// when `latest` differs from it, not when its number is larger: the application writes
    /// the number, and one past every later frame's (2^56 - 1) must not freeze the stream.
    taken: AtomicU64,
    /// Consumer side: frames refused as malformed, and the newest one's reason (until taken).
    refused: AtomicU64,
    refusal: std::sync::Mutex<Option<String>>,
}

// SAFETY: every shared field is an atomic in the mapping; slot bytes are handed out under the
// slot state protocol (WRITING to one producer, READING to one consumer).
unsafe impl Send for FrameRing {}
// SAFETY: as above.
unsafe impl Sync for FrameRing {}

impl FrameRing {
    /// Makes a new ring in a memfd: `slots` (2–8) of `slot_bytes` each (the pages of a slot
    /// are only allocated when a frame is written, so a large slot costs nothing unused).
    pub fn create(slots: usize, slot_bytes: usize) -> Result<FrameRing, RingError> {
        if !(2..=MAX_SLOTS).contains(&slots) || slot_bytes == 0 {
            return Err(RingError::Invalid(format!(
                "{slots} slots of {slot_bytes} bytes: slots must be 2..={MAX_SLOTS}, bytes > 0"
            )));
        }
        let name = c"untether-frames";
        // SAFETY: a valid C string; the result is checked.
        let fd = unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return Err(os("memfd_create"));
        }
        // SAFETY: `fd` was just created and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let len = HEADER_BYTES + slots * slot_bytes;
        // SAFETY: a valid fd; the result is checked.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(os("ftruncate"));
        }
        // The application shares the file: sealed at its size, so it can never shrink it
        // under the host's mapping (a read past the end would be SIGBUS in the host).
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: a valid fd made with MFD_ALLOW_SEALING; the result is checked.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(os("fcntl(F_ADD_SEALS)"));
        }
        let ring = Self::map(fd, len, slots, slot_bytes)?;
        let h = ring.header();
        h.version.store(VERSION, Ordering::Relaxed);
        h.slots.store(slots as u32, Ordering::Relaxed);
        h.slot_bytes.store(slot_bytes as u64, Ordering::Relaxed);
        h.watching.store(1, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(ring)
    }

    /// Maps a ring made by [`create`](Self::create) in another process (the fd inherited).
    pub fn from_fd(fd: OwnedFd) -> Result<FrameRing, RingError> {
        // SAFETY: zeroed stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid fd and a valid stat to fill.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(os("fstat"));
        }
        let len = st.st_size as usize;
        if len < HEADER_BYTES {
            return Err(RingError::Invalid(format!(
                "{len} bytes: smaller than the header"
            )));
        }
        let mut ring = Self::map(fd, len, 0, 0)?;
        let h = ring.header();
        if h.magic.load(Ordering::Acquire) != MAGIC || h.version.load(Ordering::Relaxed) != VERSION
        {
            return Err(RingError::Invalid(
                "not an untether frame ring (magic or version)".into(),
            ));
        }
        let slots = h.slots.load(Ordering::Relaxed) as usize;
        let slot_bytes = h.slot_bytes.load(Ordering::Relaxed) as usize;
        let need = slots
            .checked_mul(slot_bytes)
            .and_then(|b| b.checked_add(HEADER_BYTES));
        if !(2..=MAX_SLOTS).contains(&slots) || need != Some(len) {
            return Err(RingError::Invalid(format!(
                "{slots} slots of {slot_bytes} bytes do not fit its {len} bytes"
            )));
        }
        ring.slots = slots;
        ring.slot_bytes = slot_bytes;
        Ok(ring)
    }

    /// Maps the ring whose fd number is in the environment variable [`crate::RING_FD_ENV`]
    /// (the application's side); None when it is not set.
    pub fn from_env() -> Option<Result<FrameRing, RingError>> {
        let v = std::env::var(crate::RING_FD_ENV).ok()?;
        let Ok(fd) = v.trim().parse::<RawFd>() else {
            return Some(Err(RingError::Invalid(format!(
                "{}={v:?}: not a file descriptor number",
                crate::RING_FD_ENV
            ))));
        };
        // SAFETY: F_DUPFD_CLOEXEC on any number is safe; an invalid one fails with EBADF.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        if dup < 0 {
            return Some(Err(os("the inherited fd")));
        }
        // SAFETY: `dup` is a new descriptor this process owns.
        Some(Self::from_fd(unsafe { OwnedFd::from_raw_fd(dup) }))
    }

    fn map(fd: OwnedFd, len: usize, slots: usize, slot_bytes: usize) -> Result<Self, RingError> {
        // SAFETY: mapping a valid fd of at least `len` bytes, shared; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os("mmap"));
        }
        Ok(FrameRing {
            fd,
            base: p.cast(),
            map_len: len,
            slots,
            slot_bytes,
            taken: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            refusal: std::sync::Mutex::new(None),
        })
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping is at least HEADER_BYTES long, page-aligned, and every field of
        // Header is an atomic (valid for any bit pattern, shared across processes).
        unsafe { &*(self.base as *const Header) }
    }

    fn slot_ptr(&self, slot: usize) -> *mut u8 {
        // SAFETY: slot < self.slots, so the offset stays inside the mapping.
        unsafe { self.base.add(HEADER_BYTES + slot * self.slot_bytes) }
    }

    /// The ring's file descriptor (to hand to the application).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The size of one slot in bytes: the largest frame the ring carries.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    // ---- the host's side ----

    /// The producer copies at most one frame per `interval` (the stream's frame period).
    pub fn set_interval(&self, interval: Duration) {
        self.header()
            .interval_us
            .store(interval.as_micros() as u64, Ordering::Relaxed);
    }

    /// Whether anyone watches: while nobody does, the producer copies nothing.
    pub fn set_watching(&self, watching: bool) {
        self.header()
            .watching
            .store(watching as u32, Ordering::Relaxed);
    }

    /// The application's counters.
    pub fn counters(&self) -> RingCounters {
        let h = self.header();
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RingCounters {
            presents: l(&h.presents),
            published: l(&h.published),
            dropped_busy: l(&h.dropped_busy),
            skipped: l(&h.skipped),
            too_big: l(&h.too_big),
            unsupported: l(&h.unsupported),
            hook_ns_total: l(&h.hook_ns_total),
            hook_ns_max: l(&h.hook_ns_max),
            waited: l(&h.waited),
            due: l(&h.due),
            producer_pid: h.producer_pid.load(Ordering::Relaxed),
        }
    }

    /// The size of the newest published frame, without taking it (None: none yet).
    pub fn latest_size(&self) -> Option<(u32, u32)> {
        let h = self.header();
        let latest = h.latest.load(Ordering::Acquire);
        let slot = (latest & 0xff) as usize;
        if latest == 0 || slot >= self.slots {
            return None;
        }
        let m = &h.meta[slot];
        Some((
            m.width.load(Ordering::Relaxed),
            m.height.load(Ordering::Relaxed),
        ))
    }

    /// The newest published frame not yet taken, waiting up to `timeout` for one.
    pub fn take(&self, timeout: Duration) -> Option<TakenFrame<'_>> {
        let h = self.header();
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let seen = h.seq.load(Ordering::SeqCst);
            if let Some(f) = self.try_take() {
                return Some(f);
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            h.waiters.fetch_add(1, Ordering::SeqCst);
            futex_wait(&h.seq, seen, left);
            h.waiters.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn try_take(&self) -> Option<TakenFrame<'_>> {
        let h = self.header();
        for _ in 0..16 {
            let latest = h.latest.load(Ordering::Acquire);
            if latest == 0 || latest == self.taken.load(Ordering::Relaxed) {
                return None;
            }
            let slot = (latest & 0xff) as usize;
            if slot >= self.slots {
                return None;
            }
            if h.state[slot]
                .compare_exchange(READY, READING, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue; // overwritten meanwhile: a newer one is (or soon is) the latest
            }
            let m = &h.meta[slot];
            let r = |a: &AtomicU32| a.load(Ordering::Relaxed);
            let frame = latest >> 8;
            let (width, height, stride) = (r(&m.width), r(&m.height), r(&m.stride) as usize);
            let format = FrameFormat::from_code(r(&m.format));
            self.taken.store(latest, Ordering::Relaxed);
            let format = match check_frame(width, height, stride, format, self.slot_bytes) {
                Ok(f) => f,
                Err(why) => {
                    // A malformed frame from the producer: freed, never handed out.
                    h.state[slot].store(FREE, Ordering::Release);
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    *self.refusal.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
                    return None;
                }
            };
            return Some(TakenFrame {
                ring: self,
                slot,
                width,
                height,
                stride,
                format,
                bottom_up: r(&m.bottom_up) != 0,
                present_us: m.present_us.load(Ordering::Relaxed),
                frame,
            });
        }
        None
    }

    /// Frames refused as malformed so far (see [`FRAME_SIDES`]).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The newest refused frame's reason, once (None: none since the last call).
    pub fn take_refusal(&self) -> Option<String> {
        self.refusal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    // ---- the application's side ----

    /// Counts a present and says whether to copy its frame, giving its due number (1, 2, …,
    /// what [`WriteSlot::publish`] takes): this process writes the ring (the first to present
    /// claims it; a child process of the application is ignored), someone watches, and the
    /// stream's next frame is due (a fixed grid at the host's interval).
    pub fn note_present(&self, now_us: u64) -> Option<u64> {
        let h = self.header();
        let pid = std::process::id();
        if h.producer_pid.load(Ordering::Relaxed) != pid
            && h.producer_pid
                .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return None;
        }
        h.presents.fetch_add(1, Ordering::Relaxed);
        if h.watching.load(Ordering::Relaxed) == 0 {
            h.skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let interval = h.interval_us.load(Ordering::Relaxed);
        let due = h.next_due_us.load(Ordering::Relaxed);
        if now_us < due {
            h.skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // On the grid; fallen more than a period behind (a pause): start again from now.
        let next = if now_us - due > interval {
            now_us + interval
        } else {
            due + interval
        };
        h.next_due_us.store(next, Ordering::Relaxed);
        Some(h.due.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// A slot for a `width`×`height` frame of `stride`-byte rows, or None (dropped and
    /// counted: too big for a slot, or no slot free). Never waits.
    pub fn begin_write(
        &self,
        width: u32,
        height: u32,
        stride: usize,
        format: FrameFormat,
        bottom_up: bool,
    ) -> Option<WriteSlot<'_>> {
        let h = self.header();
        let len = stride.checked_mul(height as usize)?;
        if len > self.slot_bytes || (width as usize) * 4 > stride {
            h.too_big.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let latest = (h.latest.load(Ordering::Acquire) & 0xff) as usize;
        let has_latest = h.latest.load(Ordering::Relaxed) != 0;
        let claim = |slot: usize, from: u32| {
            h.state[slot]
                .compare_exchange(from, WRITING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        };
        let slot = (0..self.slots)
            .find(|&s| claim(s, FREE))
            .or_else(|| (0..self.slots).find(|&s| !(has_latest && s == latest) && claim(s, READY)));
        let Some(slot) = slot else {
            h.dropped_busy.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let m = &h.meta[slot];
        m.width.store(width, Ordering::Relaxed);
        m.height.store(height, Ordering::Relaxed);
        m.stride.store(stride as u32, Ordering::Relaxed);
        m.format.store(format.code(), Ordering::Relaxed);
        m.bottom_up.store(bottom_up as u32, Ordering::Relaxed);
        Some(WriteSlot {
            ring: self,
            slot,
            len,
            published: false,
        })
    }

    /// Counts a frame dropped because the previous copy was still in flight.
    pub fn count_busy(&self) {
        self.header().dropped_busy.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a present in which the hook waited for a copy (it is built never to).
    pub fn count_wait(&self) {
        self.header().waited.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a present of a pixel format the hook does not copy.
    pub fn count_unsupported(&self) {
        self.header().unsupported.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds the time one present spent inside the hook.
    pub fn add_hook_time(&self, ns: u64) {
        let h = self.header();
        h.hook_ns_total.fetch_add(ns, Ordering::Relaxed);
        h.hook_ns_max.fetch_max(ns, Ordering::Relaxed);
    }
}

impl Drop for FrameRing {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped; no view outlives `self` (the borrow
        // checker ties TakenFrame and WriteSlot to it).
        unsafe { libc::munmap(self.base.cast(), self.map_len) };
    }
}

fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT (shared: the word is in a MAP_SHARED mapping used by two processes)
    // on a valid, aligned u32 with a valid timeout; it only reads the word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32; wakes every waiter.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        )
    };
}

#[cfg(test)]
mod tests;

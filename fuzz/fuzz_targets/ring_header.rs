//! The host's side of the application capture ring (`untether_capture::ring`) against a hostile
//! application, which owns the whole shared memory: a real ring (memfd) per input, into which
//! the input writes raw bytes anywhere in the header and the slots, and publishes frames of
//! fuzzed sizes through the producer's own API, between fuzzed takes by the host.
//!
//! Each take is checked against the header as it was just before (read back from the memfd),
//! with the host's one private state, the `latest` word last taken, modelled here: a frame
//! is handed out exactly when the named slot was `READY` with a header that passes an
//! independent check (known format, sides within `FRAME_SIDES`, rows of at least `4 × width`
//! bytes, `stride × height` within the slot), with exactly the header's fields and
//! `stride × height` readable bytes; a malformed one is refused (counted, its reason said once)
//! and its slot freed; the host writes nothing into the shared memory but the taken slot's state.
//!
//! The layout of the ring's header is private to ring.rs and mirrored below; it is checked
//! against the producer's API once per process, so a change in ring.rs fails loudly here.
#![no_main]
use std::fs::File;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::FileExt;
use std::sync::Once;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use untether_capture::ring::FRAME_SIDES;
use untether_capture::{FrameFormat, FrameRing, TakenFrame};

// The header's layout (repr(C) `Header` and `SlotMeta` of ring.rs).
const HEADER_LEN: usize = 496;
const HEADER_BYTES: usize = 4096;
const OFF_LATEST: usize = 56;
const OFF_STATE: usize = 144;
const OFF_META: usize = 176;
const META_LEN: usize = 40;
const MAX_SLOTS: usize = 8;
const FREE: u32 = 0;
const READY: u32 = 2;
const READING: u32 = 3;

/// Slots are at most this large here (each take touches a returned frame's last byte, and the
/// largest accepted frames, 8192 × 2 and 2 × 8192, need 64 KiB).
const MAX_SLOT_BYTES: usize = 1 << 20;

struct Snap([u8; HEADER_LEN]);

impl Snap {
    fn read(mem: &File) -> Snap {
        let mut b = [0u8; HEADER_LEN];
        mem.read_exact_at(&mut b, 0)
            .expect("read the ring's header");
        Snap(b)
    }
    fn u32_at(&self, o: usize) -> u32 {
        u32::from_ne_bytes(self.0[o..o + 4].try_into().unwrap())
    }
    fn u64_at(&self, o: usize) -> u64 {
        u64::from_ne_bytes(self.0[o..o + 8].try_into().unwrap())
    }
    fn latest(&self) -> u64 {
        self.u64_at(OFF_LATEST)
    }
    fn state(&self, slot: usize) -> u32 {
        self.u32_at(OFF_STATE + 4 * slot)
    }
    /// width, height, stride, format, bottom_up, present_us, frame of a slot.
    fn meta(&self, slot: usize) -> (u32, u32, u32, u32, u32, u64, u64) {
        let o = OFF_META + META_LEN * slot;
        (
            self.u32_at(o),
            self.u32_at(o + 4),
            self.u32_at(o + 8),
            self.u32_at(o + 12),
            self.u32_at(o + 16),
            self.u64_at(o + 24),
            self.u64_at(o + 32),
        )
    }
}

/// A second handle on the ring's memfd: the application's view (writes land in the same pages
/// the host has mapped).
fn shared_memory(ring: &FrameRing) -> File {
    // SAFETY: the ring owns this fd and outlives the borrow; it is only duplicated.
    let fd = unsafe { BorrowedFd::borrow_raw(ring.raw_fd()) };
    File::from(fd.try_clone_to_owned().expect("dup the ring's fd"))
}

/// The mirrored layout matches ring.rs: a frame published through the producer's API reads
/// back at the offsets above.
fn check_layout() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let ring = FrameRing::create(3, 4096).unwrap();
        let mem = shared_memory(&ring);
        for (slot, w) in [(0usize, 5u32), (1, 6), (2, 7)] {
            let s = ring.begin_write(w, 3, 1000 + w as usize, FrameFormat::Rgba, true);
            s.expect("a free slot").publish(77 + w as u64, w as u64);
            let h = Snap::read(&mem);
            let layout =
                "fuzz/fuzz_targets/ring_header.rs mirrors ring.rs's header layout: update it";
            assert_eq!(h.latest(), ((w as u64) << 8) | slot as u64, "{layout}");
            assert_eq!(h.state(slot), READY, "{layout}");
            assert_eq!(
                h.meta(slot),
                (w, 3, 1000 + w, 2, 1, 77 + w as u64, w as u64),
                "{layout}"
            );
        }
    });
}

/// The host's own view of a sound frame header (independent of ring.rs's `check_frame`).
fn sound(w: u32, h: u32, stride: u32, format: u32, slot_bytes: usize) -> Option<FrameFormat> {
    let format = match format {
        1 => FrameFormat::Bgra,
        2 => FrameFormat::Rgba,
        _ => return None,
    };
    let sides = FRAME_SIDES.contains(&w) && FRAME_SIDES.contains(&h);
    let rows = w as u64 * 4 <= stride as u64;
    let fits = stride as u64 * h as u64 <= slot_bytes as u64;
    (sides && rows && fits).then_some(format)
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u8(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        self.u32() as u64 | (self.u32() as u64) << 32
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
}

/// One take by the host (as the host's ring loop does: never waiting here), checked against the
/// header just before it. `taken` is the `latest` word the host last took, modelled (a frame
/// is new when `latest` differs from it: the application writes the numbers).
fn take_and_check<'r>(
    ring: &'r FrameRing,
    mem: &File,
    slots: usize,
    slot_bytes: usize,
    taken: &mut u64,
) -> Option<TakenFrame<'r>> {
    let before = Snap::read(mem);
    let refused = ring.refused();
    assert!(
        ring.take_refusal().is_none(),
        "a refusal's reason is said once"
    );
    let got = ring.take(Duration::ZERO);
    let after = Snap::read(mem);

    // What the host must have done.
    let latest = before.latest();
    let slot = (latest & 0xff) as usize;
    let considered = latest != 0 && latest != *taken && slot < slots;
    let ready = considered && before.state(slot) == READY;
    let (w, h, stride, format, bottom_up, present_us, _) = before.meta(slot.min(MAX_SLOTS - 1));
    let frame = latest >> 8;
    let expect = if ready {
        *taken = latest;
        Some(sound(w, h, stride, format, slot_bytes))
    } else {
        None
    };

    // The host wrote nothing but the taken slot's state.
    let mut want_after = before.0;
    if let Some(s) = expect {
        let to = if s.is_some() { READING } else { FREE };
        want_after[OFF_STATE + 4 * slot..OFF_STATE + 4 * slot + 4]
            .copy_from_slice(&to.to_ne_bytes());
    }
    assert!(
        after.0 == want_after,
        "the host wrote into the shared header beyond the taken slot's state"
    );

    match (expect, &got) {
        (None, None) => {
            assert_eq!(ring.refused(), refused, "nothing to take is no refusal");
            assert!(ring.take_refusal().is_none());
        }
        (Some(None), None) => {
            assert_eq!(ring.refused(), refused + 1, "a malformed frame is counted");
            let why = ring.take_refusal().expect("a refused frame's reason");
            assert!(!why.is_empty());
            assert!(ring.take_refusal().is_none(), "the reason is said once");
        }
        (Some(Some(fmt)), Some(f)) => {
            assert_eq!(ring.refused(), refused, "a sound frame is no refusal");
            assert!(ring.take_refusal().is_none());
            assert!(FRAME_SIDES.contains(&f.width) && FRAME_SIDES.contains(&f.height));
            assert!(f.width as usize * 4 <= f.stride);
            assert_eq!((f.width, f.height, f.stride), (w, h, stride as usize));
            assert_eq!(f.format, fmt);
            assert_eq!(
                (f.bottom_up, f.present_us, f.frame),
                (bottom_up != 0, present_us, frame)
            );
            let len = f.stride * f.height as usize;
            assert!(len <= slot_bytes && len <= ring.slot_bytes());
            let data = f.data();
            assert_eq!(data.len(), len);
            // Inside the mapping (a byte past it would fault here).
            std::hint::black_box((data[0], data[len - 1]));
        }
        (Some(Some(_)), None) => panic!(
            "a sound {w}x{h} frame (stride {stride}, format {format}) was not handed out \
             (refusal: {:?})",
            ring.take_refusal()
        ),
        (_, Some(f)) => panic!(
            "a frame was handed out that should not have been: {}x{} stride {} (header: \
             latest {latest:#x}, state {}, format {format}; last taken {:#x})",
            f.width,
            f.height,
            f.stride,
            before.state(slot.min(MAX_SLOTS - 1)),
            *taken
        ),
    }
    got
}

fuzz_target!(|data: &[u8]| {
    check_layout();
    let mut r = Reader(data);
    let slots = 2 + r.u8() as usize % (MAX_SLOTS - 1);
    let slot_bytes = 1 + (r.u32() as usize % MAX_SLOT_BYTES);
    let ring = FrameRing::create(slots, slot_bytes).expect("a ring");
    assert_eq!(ring.slot_bytes(), slot_bytes);
    let mem = shared_memory(&ring);
    let map_len = (HEADER_BYTES + slots * slot_bytes) as u64;
    let mut taken = 0u64;
    let mut held: Option<TakenFrame<'_>> = None;
    while !r.0.is_empty() {
        let op = r.u8() % 7;
        match op {
            // The application writes raw bytes into the header.
            0 | 1 => {
                let off = r.u16() as usize % HEADER_LEN;
                let n = r.u8() as usize;
                let b = r.bytes(n.min(HEADER_LEN - off));
                mem.write_all_at(b, off as u64).unwrap();
            }
            // … or anywhere in the mapping (never past its end: the file keeps its size).
            2 => {
                let off = r.u32() as u64 % map_len;
                let n = r.u8() as u64;
                let b = r.bytes(n.min(map_len - off) as usize);
                mem.write_all_at(b, off).unwrap();
            }
            // The application publishes (or abandons) a frame through the producer's API: of
            // any size, or of sides around FRAME_SIDES and rows of 4 × width bytes and a little.
            3 | 4 => {
                let (w, h, stride) = if op == 3 {
                    (r.u16() as u32 * 2, r.u16() as u32 / 4, r.u32() as usize)
                } else {
                    let (w, h) = (r.u16() as u32 % 8200, r.u16() as u32 % 8200);
                    (w, h, w as usize * 4 + r.u8() as usize)
                };
                let flags = r.u8();
                let format = if flags & 1 == 0 {
                    FrameFormat::Bgra
                } else {
                    FrameFormat::Rgba
                };
                let (present_us, frame) = (r.u64(), r.u16() as u64);
                if let Some(mut s) = ring.begin_write(w, h, stride, format, flags & 2 != 0) {
                    let px = s.pixels_mut();
                    assert_eq!(px.len(), stride * h as usize);
                    assert!(px.len() <= slot_bytes);
                    if let Some(last) = px.last_mut() {
                        *last = flags;
                    }
                    if flags & 4 == 0 {
                        s.publish(present_us, frame);
                    }
                }
            }
            // The host takes the newest frame, holds it (its slot READING) or lets it go.
            5 | 6 => {
                drop(held.take());
                let hold = r.u8() & 1 != 0;
                let f = take_and_check(&ring, &mem, slots, slot_bytes, &mut taken);
                if hold {
                    held = f;
                }
            }
            _ => unreachable!(),
        }
        // The host's other reads of the header never fail.
        let _ = ring.latest_size();
        let _ = ring.counters();
    }
    drop(held.take());
    take_and_check(&ring, &mem, slots, slot_bytes, &mut taken);
});

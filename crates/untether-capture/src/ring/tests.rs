use super::*;

fn frame(ring: &FrameRing, w: u32, h: u32, fill: u8, present_us: u64) -> bool {
    match ring.begin_write(w, h, w as usize * 4, FrameFormat::Bgra, false) {
        Some(mut slot) => {
            slot.pixels_mut().fill(fill);
            slot.publish(present_us, present_us);
            true
        }
        None => false,
    }
}

#[test]
fn a_published_frame_is_taken_with_its_size_format_and_present_time() {
    let ring = FrameRing::create(3, 64 * 64 * 4).unwrap();
    assert!(ring.take(Duration::ZERO).is_none(), "nothing published yet");
    assert_eq!(ring.latest_size(), None);
    assert!(frame(&ring, 8, 4, 7, 1234));
    assert_eq!(ring.latest_size(), Some((8, 4)));
    let f = ring.take(Duration::ZERO).unwrap();
    assert_eq!((f.width, f.height, f.stride), (8, 4, 32));
    assert_eq!(
        (f.format, f.bottom_up, f.present_us),
        (FrameFormat::Bgra, false, 1234)
    );
    assert!(f.data().iter().all(|&b| b == 7));
    drop(f);
    assert!(ring.take(Duration::ZERO).is_none(), "a frame is taken once");
    assert_eq!(ring.counters().published, 1);
}

#[test]
fn the_newest_frame_wins_and_older_ready_frames_are_overwritten() {
    let ring = FrameRing::create(3, 16 * 16 * 4).unwrap();
    for n in 1..=10u8 {
        assert!(frame(&ring, 16, 16, n, n as u64), "frame {n} found a slot");
    }
    let f = ring.take(Duration::ZERO).unwrap();
    assert_eq!(f.present_us, 10);
    assert_eq!(f.frame, 10);
    assert!(f.data().iter().all(|&b| b == 10));
}

#[test]
fn the_producer_never_waits_while_the_host_holds_a_frame() {
    // Three slots: one the host encodes from, one the newest, one to write: always a slot.
    let ring = FrameRing::create(3, 16 * 16 * 4).unwrap();
    assert!(frame(&ring, 16, 16, 1, 1));
    let held = ring.take(Duration::ZERO).unwrap();
    for n in 2..50u8 {
        assert!(frame(&ring, 16, 16, n, n as u64));
    }
    assert!(
        held.data().iter().all(|&b| b == 1),
        "the held slot was untouched"
    );
    assert_eq!(ring.counters().dropped_busy, 0);
    drop(held);
    assert_eq!(ring.take(Duration::ZERO).unwrap().present_us, 49);
    // Two slots, one held and one the newest unseen: the frame is dropped and counted.
    let ring = FrameRing::create(2, 16 * 16 * 4).unwrap();
    assert!(frame(&ring, 16, 16, 1, 1));
    let _held = ring.take(Duration::ZERO).unwrap();
    assert!(frame(&ring, 16, 16, 2, 2));
    assert!(
        !frame(&ring, 16, 16, 3, 3),
        "no slot: dropped, not waited for"
    );
    assert_eq!(ring.counters().dropped_busy, 1);
}

#[test]
fn a_frame_larger_than_a_slot_is_dropped_and_counted() {
    let ring = FrameRing::create(2, 16 * 16 * 4).unwrap();
    assert!(!frame(&ring, 32, 16, 1, 1));
    assert!(ring
        .begin_write(16, 16, 8, FrameFormat::Rgba, false)
        .is_none());
    assert_eq!(ring.counters().too_big, 2);
}

#[test]
fn presents_are_sampled_on_the_stream_grid_and_not_at_all_while_nobody_watches() {
    let ring = FrameRing::create(3, 64).unwrap();
    ring.set_interval(Duration::from_micros(16_667));
    // An application at 100 fps (10 ms) under a 60 fps stream: 60 of its 100 presents per
    // second are copied, not 50 (a grid, not "one interval after the last copy").
    let due: Vec<u64> = (0..100u64)
        .filter_map(|i| ring.note_present(1_000_000 + i * 10_000))
        .collect();
    let copied = due.len();
    assert!((59..=61).contains(&copied), "{copied}");
    assert_eq!(
        due,
        (1..=copied as u64).collect::<Vec<_>>(),
        "numbered 1, 2, …"
    );
    let c = ring.counters();
    assert_eq!(c.presents, 100);
    assert_eq!(c.due, copied as u64);
    assert_eq!(c.skipped, 100 - copied as u64);
    ring.set_watching(false);
    assert_eq!(ring.note_present(5_000_000), None);
    assert_eq!(ring.counters().presents, 101);
    assert_eq!(ring.counters().producer_pid, std::process::id());
}

#[test]
fn a_second_mapping_of_the_fd_sees_the_frames_and_the_futex_wakes_the_host() {
    let host = FrameRing::create(3, 8 * 8 * 4).unwrap();
    // SAFETY: dup of a valid fd; the result is checked.
    let fd = unsafe { libc::dup(host.raw_fd()) };
    assert!(fd >= 0);
    // SAFETY: `fd` is the fresh duplicate above, owned by nothing else.
    let app = FrameRing::from_fd(unsafe { OwnedFd::from_raw_fd(fd) }).unwrap();
    assert_eq!(app.slot_bytes(), 8 * 8 * 4);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| host.take(Duration::from_secs(10)).map(|f| f.present_us));
        // The host is asleep on the futex (or about to be): the publish must wake it.
        std::thread::sleep(Duration::from_millis(20));
        assert!(frame(&app, 8, 8, 3, 77));
        assert_eq!(waiter.join().unwrap(), Some(77));
    });
}

#[test]
fn a_file_that_is_not_a_ring_is_refused_with_a_reason() {
    let f = tempfile();
    let e = FrameRing::from_fd(f).err().unwrap().to_string();
    assert!(e.contains("smaller than the header"), "{e}");
    assert!(FrameRing::create(1, 10).is_err());
    assert!(FrameRing::create(3, 0).is_err());
    std::env::set_var(crate::RING_FD_ENV, "nope");
    let e = FrameRing::from_env().unwrap().err().unwrap().to_string();
    assert!(e.contains("not a file descriptor"), "{e}");
    std::env::remove_var(crate::RING_FD_ENV);
}

fn tempfile() -> OwnedFd {
    // SAFETY: a valid C string; the result is checked.
    let fd = unsafe { libc::memfd_create(c"not-a-ring".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: just created, owned here.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Issue 33: a header the application wrote with absurd sides (2 × 4 000 000, which fits a
/// 4K slot's bytes) is refused frame by frame with its reason, never handed to the host, whose
/// encoder could not open for it; the next good frame is taken.
#[test]
fn a_frame_of_absurd_sides_is_refused_with_its_reason_and_the_next_one_taken() {
    let ring = FrameRing::create(2, 3840 * 2160 * 4).unwrap();
    ring.set_watching(true);
    let slot = ring.begin_write(2, 4_000_000, 8, FrameFormat::Bgra, false);
    slot.expect("it fits the slot's bytes").publish(10, 1);
    assert!(ring.take(Duration::ZERO).is_none());
    assert_eq!(ring.refused(), 1);
    let why = ring.take_refusal().expect("a reason");
    assert!(why.contains("2x4000000") && why.contains("2–8192"), "{why}");
    assert!(ring.take_refusal().is_none(), "said once");
    assert!(frame(&ring, 64, 32, 5, 20));
    let f = ring.take(Duration::ZERO).expect("a good frame after it");
    assert_eq!((f.width, f.height, f.present_us), (64, 32, 20));
}

#[test]
fn a_slot_header_is_checked_side_by_side() {
    let bgra = Some(FrameFormat::Bgra);
    assert!(check_frame(64, 64, 256, bgra, 1 << 20).is_ok());
    assert!(check_frame(64, 64, 256, None, 1 << 20)
        .unwrap_err()
        .contains("pixel format"));
    assert!(check_frame(1, 64, 256, bgra, 1 << 20).is_err());
    assert!(check_frame(8193, 64, 1 << 16, bgra, 1 << 30).is_err());
    assert!(check_frame(64, 64, 255, bgra, 1 << 20)
        .unwrap_err()
        .contains("rows of 255 bytes"));
    assert!(check_frame(64, 64, 256, bgra, 1000)
        .unwrap_err()
        .contains("larger than the slot"));
    assert!(check_frame(8192, 8192, usize::MAX / 2, bgra, 1 << 30).is_err());
}

/// The application shares the ring's file: shrinking it under the host's mapping made the
/// host's next read of a published frame a SIGBUS (found by the ring_header fuzz target's
/// author). The file is sealed at its size: the application's ftruncate fails.
#[test]
fn the_application_cannot_shrink_or_grow_the_shared_file() {
    let ring = FrameRing::create(3, 16 * 16 * 4).unwrap();
    assert!(frame(&ring, 16, 16, 5, 1));
    // SAFETY: dup of a valid fd, owned by the OwnedFd below.
    let app = unsafe { OwnedFd::from_raw_fd(libc::dup(ring.raw_fd())) };
    for len in [0, 4096, 1 << 30] {
        // SAFETY: a valid fd; the result is checked.
        let r = unsafe { libc::ftruncate(app.as_raw_fd(), len) };
        let err = std::io::Error::last_os_error();
        assert!(r != 0, "the application resized the ring to {len}");
        assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
    }
    // Nor can it lift the seals.
    // SAFETY: as above.
    let r = unsafe { libc::fcntl(app.as_raw_fd(), libc::F_ADD_SEALS, 0) };
    assert!(r != 0, "the seals were not sealed");
    let f = ring.take(Duration::ZERO).unwrap();
    assert!(f.data().iter().all(|&b| b == 5));
}

/// The application writes the frame numbers: one past every later frame's used to make the
/// host wait for a number that never comes (silently, every later frame ignored).
#[test]
fn a_huge_frame_number_does_not_freeze_the_stream() {
    let ring = FrameRing::create(3, 16 * 16 * 4).unwrap();
    let publish = |fill: u8, number: u64| {
        let mut slot = ring
            .begin_write(16, 16, 64, FrameFormat::Bgra, false)
            .unwrap();
        slot.pixels_mut().fill(fill);
        slot.publish(number, number);
    };
    publish(1, u64::MAX);
    assert!(ring.take(Duration::ZERO).is_some());
    publish(2, 2);
    let f = ring.take(Duration::ZERO).expect("the next frame is taken");
    assert!(f.data().iter().all(|&b| b == 2));
    drop(f);
    assert!(ring.take(Duration::ZERO).is_none(), "a frame is taken once");
}

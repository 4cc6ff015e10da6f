//! The protocol units fed arbitrary operations: the latest-wins state channel (arbitrary acks
//! and packets), the reliable input channel, the packet window and the frame assembler.
#![no_main]
use libfuzzer_sys::fuzz_target;
use untether_proto::assembler::{Assembler, AssemblerConfig};
use untether_proto::reliable::{ReliableReceiver, ReliableSender};
use untether_proto::state::{
    StateAck, StateConfig, StatePacket, StateReceiver, StateSender, StateValue, MAX_HISTORY,
};
use untether_proto::window::PacketWindow;
use untether_proto::wire::{InputEvent, Reader, ShardHeader};

fuzz_target!(|data: &[u8]| {
    // A budget (the first byte picks it; 0: none) exercises the token bucket's waits.
    let budget = data.first().map_or(0, |b| (*b as u64 & 0x0f) * 2_000);
    let mut tx = StateSender::new(StateConfig {
        budget_bytes_per_s: budget,
        ..StateConfig::default()
    });
    let mut rx = StateReceiver::new();
    let mut rs = ReliableSender::new();
    let mut rr = ReliableReceiver::new();
    let mut win = PacketWindow::new();
    let mut asm = Assembler::new(AssemblerConfig::default());
    let mut now = 0u64;
    let mut r = Reader::new(data, "fuzz");
    let mut out = Vec::new();
    while let Ok(op) = r.u8() {
        now += (op as u64 & 7) * 500;
        match op >> 3 {
            0 => {
                // Keys across the whole table (up to 4096 and past it: refused).
                let key = r.u16().unwrap_or(0) & 0x1fff;
                let v = match op & 3 {
                    0 => StateValue::Axis((op as f32) / 255.0),
                    1 => StateValue::Int(op as i64),
                    2 => StateValue::Haptic { low: 0.5, high: 1.0 },
                    _ => StateValue::PoseSample(untether_proto::PoseSample {
                        sample_us: now,
                        pose: untether_proto::Pose::from_angles(op as f32, 0.0, 0.0, [0.0; 3]),
                    }),
                };
                tx.set(now, key, v);
            }
            1 => {
                if let Some(p) = tx.poll_packet(now, 1 + r.u16().unwrap_or(0) as usize) {
                    rx.on_packet(now, &p);
                }
            }
            2 => {
                if let Ok(a) = StateAck::parse(&mut r) {
                    tx.on_ack(now, &a);
                }
            }
            3 => {
                if let Ok(p) = StatePacket::parse(&mut r) {
                    rx.on_packet(now, &p);
                }
            }
            4 => {
                if let Some(a) = rx.poll_ack() {
                    tx.on_ack(now, &a);
                }
            }
            5 => tx.handle_timeout(now),
            6 => {
                let _ = rs.push(InputEvent::Key {
                    code: op as u32,
                    down: true,
                });
            }
            7 => {
                for (first, evs) in rs.due(now, 1000, 64) {
                    rr.on_events(first, &evs, &mut out);
                }
            }
            8 => rs.on_ack(r.u32().unwrap_or(0)),
            9 => {
                let first = r.u32().unwrap_or(0);
                rr.on_events(first, &[InputEvent::Wheel { dx: 1, dy: 2 }], &mut out);
            }
            10 => {
                let _ = win.record(r.u64().unwrap_or(0));
            }
            11 => {
                let n = r.u16().unwrap_or(0) as usize;
                if let Ok(b) = r.bytes(n.min(r.remaining())) {
                    if let Ok((h, p)) = ShardHeader::parse(b) {
                        asm.insert(now, &h, p);
                    }
                }
            }
            12 => asm.handle_timeout(now),
            _ => {
                let _ = asm.drain().count();
            }
        }
        assert!(rx.history_len() <= MAX_HISTORY as usize);
        assert!(tx.key_count() <= untether_proto::state::MAX_KEYS);
        let st = tx.staleness(now);
        assert!(st.p50_us <= st.p99_us && st.p99_us <= st.max_us);
        assert!(asm.in_flight() <= 16);
    }
    let _ = win.lost();
});

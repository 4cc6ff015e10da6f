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
    let mut tx = StateSender::new(StateConfig::default());
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
                let key = r.u8().unwrap_or(0) as u16;
                tx.set(now, key, StateValue::Axis((op as f32) / 255.0));
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
        assert!(asm.in_flight() <= 16);
    }
    let _ = win.lost();
});

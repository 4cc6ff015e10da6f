//! What security costs: AEAD per 1080p frame (a 250 KB keyframe and a 40 KB P-frame cut into
//! 1200-byte datagrams; seal on the host, open on the client; encrypted vs authenticated-only;
//! ChaCha20-Poly1305 vs AES-256-GCM), the whole handshake, the latest-wins channel, and a
//! tick of the reliable input channel with 4096 events unacknowledged.
//!
//! `cargo bench -p untether-proto --bench protocol`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use untether_proto::assembler::shard_frame;
use untether_proto::crypto::{Opener, Sealer, Suite, ALL_SUITES, TAG_LEN};
use untether_proto::handshake::{
    ClientHandshake, ClientInfoPayload, HostHandshake, Mode, SessionRng, SessionSetup,
    StaticKeypair,
};
use untether_proto::reliable::{ReliableSender, MAX_UNACKED};
use untether_proto::state::{StateConfig, StateReceiver, StateSender, StateValue};
use untether_proto::wire::{Header, InputEvent, PacketType, HEADER_LEN, SHARD_HEADER_LEN};

/// The datagrams of one frame, unprotected.
fn datagrams(frame_bytes: usize) -> Vec<Vec<u8>> {
    let data = vec![0x5Au8; frame_bytes];
    let max_payload = 1200 - HEADER_LEN - SHARD_HEADER_LEN - TAG_LEN;
    shard_frame(1, 0, true, frame_bytes, max_payload)
        .enumerate()
        .map(|(i, (sh, range))| {
            let mut out = Vec::with_capacity(1200);
            Header::new(PacketType::Shard, 7, i as u64).write(&mut out);
            sh.write(&mut out);
            out.extend_from_slice(&data[range]);
            out
        })
        .collect()
}

fn aead(c: &mut Criterion) {
    for (label, bytes) in [("keyframe_250KB", 250_000usize), ("pframe_40KB", 40_000)] {
        let plain = datagrams(bytes);
        let mut g = c.benchmark_group(format!("aead_{label}"));
        g.throughput(Throughput::Bytes(bytes as u64));
        for suite in [Suite::ChaCha20Poly1305, Suite::Aes256Gcm] {
            for encrypt in [true, false] {
                let mode = if encrypt { "encrypt" } else { "auth_only" };
                let name = format!("{suite:?}_{mode}");
                // Seal: copy each datagram into a fresh buffer (as packetizing does) and seal.
                let mut sealer = Sealer::new(suite, [1; 32], 22);
                g.bench_function(format!("seal_{name}"), |b| {
                    b.iter(|| {
                        let mut total = 0;
                        for (pn, d) in plain.iter().enumerate() {
                            let mut out = Vec::with_capacity(d.len() + TAG_LEN);
                            out.extend_from_slice(d);
                            sealer
                                .seal(&mut out, HEADER_LEN, pn as u64, encrypt)
                                .unwrap();
                            total += out.len();
                        }
                        total
                    })
                });
                // Open: into one reused buffer, as the sessions do.
                let mut s2 = Sealer::new(suite, [1; 32], 22);
                let sealed: Vec<Vec<u8>> = plain
                    .iter()
                    .enumerate()
                    .map(|(pn, d)| {
                        let mut out = d.clone();
                        s2.seal(&mut out, HEADER_LEN, pn as u64, encrypt).unwrap();
                        out
                    })
                    .collect();
                let mut opener = Opener::new(suite, [1; 32], 22);
                let mut scratch = Vec::with_capacity(2048);
                g.bench_function(format!("open_{name}"), |b| {
                    b.iter(|| {
                        let mut total = 0;
                        for (pn, d) in sealed.iter().enumerate() {
                            scratch.clear();
                            scratch.extend_from_slice(d);
                            total += opener
                                .open(&mut scratch, HEADER_LEN, pn as u64, encrypt)
                                .unwrap();
                        }
                        total
                    })
                });
            }
        }
        g.finish();
    }
}

fn handshake(c: &mut Criterion) {
    let mut rng = SessionRng::from_seed([1; 32]);
    let host = StaticKeypair::generate(&mut rng);
    let client = StaticKeypair::generate(&mut rng);
    let info = ClientInfoPayload {
        max_datagram: 1200,
        capabilities: 3,
        name: "bench".into(),
        codecs: Vec::new(),
        wants: None,
        view: None,
    };
    let mut g = c.benchmark_group("handshake");
    for pin in [None, Some("123456")] {
        let name = if pin.is_some() {
            "xxpsk3_spake2_pin"
        } else {
            "xx"
        };
        g.bench_function(name, |b| {
            b.iter(|| {
                let (mut c, m1) =
                    ClientHandshake::start(&client, pin, ALL_SUITES, Suite::Aes256Gcm, &mut rng)
                        .unwrap();
                let mode = if pin.is_some() {
                    Mode::Pin
                } else {
                    Mode::Known
                };
                let (mut h, m2, _, _) =
                    HostHandshake::respond(&host, mode, &m1, pin, &mut rng, |o| {
                        Some(SessionSetup {
                            connection_id: 9,
                            suite: o.choose(ALL_SUITES)?,
                            key_update_log2: 22,
                            video_auth_only: false,
                            spake: None,
                        })
                    })
                    .unwrap();
                c.read_reply(&m2).unwrap();
                let (m3, _) = c.finish(&info).unwrap();
                h.finish(&m3).unwrap()
            })
        });
    }
    g.finish();
}

fn latest_wins(c: &mut Criterion) {
    let mut g = c.benchmark_group("latest_wins");
    g.bench_function("set2_packet_receive_ack", |b| {
        let mut tx = StateSender::new(StateConfig::default());
        let mut rx = StateReceiver::new();
        let mut now = 0u64;
        b.iter_batched(
            || (),
            |_| {
                now += 1000;
                tx.set(
                    now,
                    0,
                    StateValue::Pointer {
                        x: now as i32,
                        y: 1,
                    },
                );
                tx.set(
                    now,
                    1,
                    StateValue::Pose {
                        orientation: [0.0, 0.0, 0.0, 1.0],
                        position: [0.0, 1.6, 0.0],
                    },
                );
                let p = tx.poll_packet(now, 1100).unwrap();
                rx.on_packet(now, &p);
                let a = rx.poll_ack().unwrap();
                tx.on_ack(now + 500, &a);
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// The reliable input channel while the host is unreachable: 4096 events unacknowledged,
/// each tick asks when the next retransmission is due and what is due now (nothing, or the
/// one event whose RTO expired).
fn reliable_input(c: &mut Criterion) {
    let mut g = c.benchmark_group("reliable_input");
    g.bench_function("tick_4096_unacked", |b| {
        let mut tx = ReliableSender::new();
        for code in 0..MAX_UNACKED as u32 {
            tx.push(InputEvent::Key { code, down: true });
        }
        // Sent one per 10 µs, so one falls due per 10 µs tick.
        let mut now = 0u64;
        let rto = 40_000;
        for _ in 0..MAX_UNACKED {
            tx.due(now, rto, 1);
            now += 10;
        }
        b.iter(|| {
            now += 10;
            let t = tx.poll_timeout(rto);
            (t, tx.due(now, rto, 512))
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2))
        .sample_size(30);
    targets = aead, handshake, latest_wins, reliable_input
}
criterion_main!(benches);

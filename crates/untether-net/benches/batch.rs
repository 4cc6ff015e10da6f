//! One-datagram-per-call against batched (GSO send, recvmmsg + GRO receive) sockets, on
//! loopback, for a 1080p keyframe's burst (250 KB: 220 datagrams of 1200 bytes and a shorter
//! last one) and a P-frame's (25 KB: 21 datagrams). `cargo bench -p untether-net --bench batch`.

use std::io::IoSliceMut;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use untether_net::{datagrams, RecvMeta, UdpEndpoint, BATCH_SIZE, MAX_DATAGRAM};

const SHARD: usize = 1200;

/// (name, datagrams of SHARD bytes, length of the shorter last one)
const BURSTS: [(&str, usize, usize); 2] = [("keyframe_1080p", 219, 400), ("p_frame", 20, 700)];

fn burst(full: usize, last: usize) -> Vec<u8> {
    vec![0x5A; full * SHARD + last]
}

fn bind() -> UdpEndpoint {
    UdpEndpoint::bind("127.0.0.1:0".parse().expect("an address")).expect("a loopback socket")
}

fn send_one_per_call(tx: &UdpEndpoint, to: SocketAddr, contents: &[u8]) {
    for d in contents.chunks(SHARD) {
        tx.send_to(d, to).expect("sent");
    }
}

/// Reads with one `recvfrom` per datagram until `want` arrived; how many did.
fn recv_one_per_call(rx: &UdpEndpoint, want: usize, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < want {
        match rx.try_recv_from(buf).expect("received") {
            Some(_) => n += 1,
            None => {
                if !rx
                    .wait_readable(Duration::from_millis(100))
                    .expect("waited")
                {
                    break;
                }
            }
        }
    }
    n
}

/// Reads with `recv_batch` until `want` datagrams arrived; how many did.
fn recv_batched(
    rx: &UdpEndpoint,
    want: usize,
    storage: &mut [Vec<u8>],
    metas: &mut [RecvMeta],
) -> usize {
    let mut n = 0;
    while n < want {
        let mut bufs: Vec<IoSliceMut> = storage.iter_mut().map(|b| IoSliceMut::new(b)).collect();
        let got = rx.recv_batch(&mut bufs, metas).expect("received");
        if got == 0 {
            if !rx
                .wait_readable(Duration::from_millis(100))
                .expect("waited")
            {
                break;
            }
            continue;
        }
        for (buf, meta) in storage.iter().zip(metas.iter()).take(got) {
            n += datagrams(buf, meta).count();
        }
    }
    n
}

fn send(c: &mut Criterion) {
    let rx = bind();
    let to = rx.local_addr().expect("an address");
    // A reader that keeps the receive buffer from filling (so no send is a drop).
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut storage = vec![vec![0u8; MAX_DATAGRAM]; BATCH_SIZE];
            let mut metas = vec![RecvMeta::default(); BATCH_SIZE];
            while !stop.load(Ordering::Relaxed) {
                recv_batched(&rx, usize::MAX, &mut storage, &mut metas);
            }
        })
    };
    let tx = bind();
    eprintln!(
        "send: max_gso_segments {} (1 = no GSO here)",
        tx.max_gso_segments()
    );
    let mut g = c.benchmark_group("send");
    for (name, full, last) in BURSTS {
        let contents = burst(full, last);
        g.throughput(Throughput::Elements(full as u64 + 1));
        g.bench_with_input(BenchmarkId::new("one_per_call", name), &contents, |b, c| {
            b.iter(|| send_one_per_call(&tx, to, c))
        });
        g.bench_with_input(BenchmarkId::new("batched", name), &contents, |b, c| {
            b.iter(|| tx.send_batch(Some(to), c, SHARD).expect("sent"))
        });
    }
    g.finish();
    eprintln!("send: {:?}", tx.batch_send_counts());
    stop.store(true, Ordering::Relaxed);
    let _ = reader.join();
}

fn receive(c: &mut Criterion) {
    let rx = bind();
    let to = rx.local_addr().expect("an address");
    let tx = bind();
    eprintln!(
        "receive: gro_segments {} (1 = no GRO here)",
        rx.gro_segments()
    );
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut storage = vec![vec![0u8; MAX_DATAGRAM]; BATCH_SIZE];
    let mut metas = vec![RecvMeta::default(); BATCH_SIZE];
    let mut g = c.benchmark_group("receive");
    for (name, full, last) in BURSTS {
        let contents = burst(full, last);
        let want = full + 1;
        g.throughput(Throughput::Elements(want as u64));
        // Only the reading is timed; the burst is sent (whole, into the buffer) before.
        let timed = |send_batched: bool, read: &mut dyn FnMut() -> usize, iters: u64| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                if send_batched {
                    tx.send_batch(Some(to), &contents, SHARD).expect("sent");
                } else {
                    send_one_per_call(&tx, to, &contents);
                }
                let t = Instant::now();
                let n = read();
                total += t.elapsed();
                assert_eq!(n, want, "the whole burst arrived");
            }
            total
        };
        g.bench_function(BenchmarkId::new("one_per_call", name), |b| {
            b.iter_custom(|iters| {
                timed(false, &mut || recv_one_per_call(&rx, want, &mut buf), iters)
            })
        });
        g.bench_function(BenchmarkId::new("recvmmsg", name), |b| {
            b.iter_custom(|iters| {
                timed(
                    false,
                    &mut || recv_batched(&rx, want, &mut storage, &mut metas),
                    iters,
                )
            })
        });
        g.bench_function(BenchmarkId::new("recvmmsg_gro", name), |b| {
            b.iter_custom(|iters| {
                timed(
                    true,
                    &mut || recv_batched(&rx, want, &mut storage, &mut metas),
                    iters,
                )
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = send, receive
}
criterion_main!(benches);

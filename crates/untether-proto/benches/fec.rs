//! What FEC costs: Reed–Solomon parity of one frame on the host (encode) and the rebuilding of
//! lost data shards on the client (decode, with as many data shards lost as there are parity
//! shards: the worst case the code recovers). 1140-byte shards (1200-byte datagrams).
//!
//! `cargo bench -p untether-proto --bench fec`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use untether_proto::fec::{FecDecoder, FecEncoder};

const SHARD: usize = 1140;

fn fec(c: &mut Criterion) {
    // (label, frame bytes, parity shards)
    let cases = [
        ("pframe_40KB_k36_m7", 40_000usize, 7usize),
        ("pframe_40KB_k36_m18", 40_000, 18),
        ("keyframe_250KB_k220_m22", 250_000, 22),
        ("keyframe_250KB_k220_m44", 250_000, 44),
    ];
    for (label, bytes, m) in cases {
        let frame: Vec<u8> = (0..bytes).map(|i| (i * 131 + 7) as u8).collect();
        let k = bytes.div_ceil(SHARD);
        let mut g = c.benchmark_group(format!("fec_{label}"));
        g.throughput(Throughput::Bytes(bytes as u64));
        let mut enc = FecEncoder::new();
        let mut parity = vec![vec![0u8; SHARD]; m];
        g.bench_function("encode", |b| {
            b.iter(|| {
                enc.encode(&frame, SHARD, m, |i, s| parity[i].copy_from_slice(s))
                    .unwrap()
            })
        });
        // Lose the first m data shards (spread would cost the same).
        let have: Vec<bool> = (0..k).map(|i| i >= m).collect();
        let mut dec = FecDecoder::new();
        let mut got = frame.clone();
        g.bench_function("decode_m_lost", |b| {
            b.iter(|| {
                let n = dec
                    .reconstruct(
                        &mut got,
                        SHARD,
                        &have,
                        m,
                        parity.iter().enumerate().map(|(i, p)| (i, &p[..])),
                    )
                    .unwrap();
                assert_eq!(n, m);
            })
        });
        assert_eq!(got, frame);
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = fec
}
criterion_main!(benches);

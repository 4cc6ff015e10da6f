//! Builds the SVT-AV1 shim (`csrc/svt.c`) when SVT-AV1's headers are installed
//! (`libsvtav1-dev libsvtav1enc-dev`, which scripts/setup.sh installs): untether then drives
//! libsvtav1 directly (`src/codec/svt.rs`). Without them (e.g. an aarch64 build: Debian 12 has
//! no SVT-AV1 there) the crate builds without AV1 encoding.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(untether_svt)");
    println!("cargo:rerun-if-changed=csrc/svt.c");
    println!("cargo:rerun-if-env-changed=UNTETHER_NO_SVT");
    if std::env::var_os("UNTETHER_NO_SVT").is_some() {
        return;
    }
    match pkg_config::Config::new()
        .atleast_version("1.0")
        .probe("SvtAv1Enc")
    {
        Ok(lib) => {
            let mut b = cc::Build::new();
            b.file("csrc/svt.c").warnings(true);
            for p in &lib.include_paths {
                b.include(p);
            }
            for (k, v) in &lib.defines {
                b.define(k, v.as_deref());
            }
            b.compile("untether_svt");
            println!("cargo:rustc-cfg=untether_svt");
        }
        Err(e) => println!(
            "cargo:warning=SVT-AV1 headers not found ({e}): building without libsvtav1 \
             (install libsvtav1-dev libsvtav1enc-dev for AV1 encoding)"
        ),
    }
}

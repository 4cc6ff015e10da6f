//! A Linux IMU as a head pose source: accelerometer and gyroscope samples, from an IIO device
//! (sysfs `in_accel_{x,y,z}_raw` and `in_anglvel_{x,y,z}_raw` times their `_scale`, on one
//! device or two) or an evdev accelerometer (`INPUT_PROP_ACCELEROMETER`: `ABS_X/Y/Z`
//! acceleration, `ABS_RX/RY/RZ` angular rate, scaled by each axis's resolution), fused into an
//! orientation by the Madgwick filter of the `ahrs` crate (6 degrees of freedom: no
//! magnetometer, so yaw is integrated and drifts slowly).
//!
//! The IMU's axes are taken to be the head's (x right, y up, z back: mount it so, or expect
//! the orientation in its own frame). **Untested on real hardware** (the development machine
//! has no IMU): the fusion is tested on synthetic samples, the IIO reader on a sysfs tree made
//! by the test, the "no IMU found" error on this machine.

use std::fs;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use ahrs::{Ahrs, Madgwick};
use nalgebra::Vector3;
use untether_proto::pose::{quat_mul, quat_normalize};
use untether_proto::{Micros, Pose};

use super::{PoseError, PoseSource};

/// Where IIO devices are.
pub const IIO_ROOT: &str = "/sys/bus/iio/devices";
/// Where evdev devices are.
pub const EVDEV_ROOT: &str = "/dev/input";
/// The Madgwick filter's gain (the library's default).
pub const BETA: f64 = 0.1;

/// One IMU reading in the head's frame: acceleration (m/s²) and angular rate (rad/s).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ImuSample {
    pub accel: [f64; 3],
    pub gyro: [f64; 3],
}

/// The Madgwick filter in the head's frame: samples in (x right, y up, z back), orientation out
/// in OpenXR's convention. (Madgwick's earth frame has z up; the head's has y up.)
pub struct Fusion {
    filter: Madgwick<f64>,
    last_us: Option<Micros>,
}

/// Head frame (y up, z back) → Madgwick's frame (z up, y forward): (x, y, z) → (x, −z, y).
fn to_zup(v: [f64; 3]) -> Vector3<f64> {
    Vector3::new(v[0], -v[2], v[1])
}

impl Fusion {
    pub fn new(rate_hz: f64) -> Fusion {
        Fusion {
            filter: Madgwick::new(1.0 / rate_hz.max(1.0), BETA),
            last_us: None,
        }
    }

    /// Takes one sample taken at `t_us`; returns the head's orientation.
    pub fn update(&mut self, t_us: Micros, s: ImuSample) -> [f32; 4] {
        if let Some(last) = self.last_us {
            let dt = (t_us.saturating_sub(last) as f64 / 1e6).clamp(1e-4, 0.1);
            // The filter integrates over its sample period: keep it the real one.
            *self.filter.sample_period_mut() = dt;
        }
        self.last_us = Some(t_us);
        let (g, a) = (to_zup(s.gyro), to_zup(s.accel));
        let q = match self.filter.update_imu(&g, &a) {
            Ok(q) => *q,
            // Free fall (no gravity to align to): integrate the gyroscope alone.
            Err(_) => *self.filter.update_gyro(&g),
        };
        let q = q.into_inner();
        let qz = [q.i as f32, q.j as f32, q.k as f32, q.w as f32];
        // Back to y up: C·q·C⁻¹ with C a −90° turn about x.
        let h = std::f32::consts::FRAC_1_SQRT_2;
        let c = [-h, 0.0, 0.0, h];
        let c_inv = [h, 0.0, 0.0, h];
        quat_normalize(quat_mul(quat_mul(c, qz), c_inv))
    }
}

/// Why an IMU cannot be opened or read.
#[derive(Debug, thiserror::Error)]
pub enum ImuError {
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a number", .0.display())]
    NotANumber(PathBuf),
    #[error("{}: not an accelerometer (INPUT_PROP_ACCELEROMETER)", .0.display())]
    NotAccelerometer(PathBuf),
    #[error(
        "{}: not an IIO IMU (needs in_accel_[xyz]_raw and in_anglvel_[xyz]_raw)",
        .0.display()
    )]
    NotIio(PathBuf),
    #[error(
        "no IMU found: no IIO device with an accelerometer and a gyroscope under {} and no evdev \
         accelerometer under {} (use --pose synthetic, track:FILE or mouse)",
        .iio_root.display(),
        .evdev_root.display()
    )]
    NotFound {
        iio_root: PathBuf,
        evdev_root: PathBuf,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ImuError + '_ {
    move |source| ImuError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads an IMU's samples.
trait Reader: Send {
    fn read(&mut self) -> Result<Option<ImuSample>, ImuError>;
    fn describe(&self) -> String;
}

/// One IIO channel triple (`in_<kind>_{x,y,z}_raw`) and its scale.
struct IioTriple {
    files: [PathBuf; 3],
    scale: [f64; 3],
}

impl IioTriple {
    fn open(dir: &Path, kind: &str) -> Option<IioTriple> {
        let files = ["x", "y", "z"].map(|a| dir.join(format!("in_{kind}_{a}_raw")));
        if !files.iter().all(|f| f.exists()) {
            return None;
        }
        let read = |p: PathBuf| {
            fs::read_to_string(p)
                .ok()
                .and_then(|s| s.trim().parse::<f64>().ok())
        };
        let shared = read(dir.join(format!("in_{kind}_scale")));
        let scale = ["x", "y", "z"].map(|a| {
            read(dir.join(format!("in_{kind}_{a}_scale")))
                .or(shared)
                .unwrap_or(1.0)
        });
        Some(IioTriple { files, scale })
    }

    fn read(&self) -> Result<[f64; 3], ImuError> {
        let mut v = [0.0; 3];
        for (i, f) in self.files.iter().enumerate() {
            let raw: f64 = fs::read_to_string(f)
                .map_err(io_error(f))?
                .trim()
                .parse()
                .map_err(|_| ImuError::NotANumber(f.clone()))?;
            v[i] = raw * self.scale[i];
        }
        Ok(v)
    }
}

struct IioReader {
    accel: IioTriple,
    gyro: IioTriple,
    what: String,
}

impl Reader for IioReader {
    fn read(&mut self) -> Result<Option<ImuSample>, ImuError> {
        Ok(Some(ImuSample {
            accel: self.accel.read()?,
            gyro: self.gyro.read()?,
        }))
    }
    fn describe(&self) -> String {
        self.what.clone()
    }
}

/// An IIO IMU under `root`: a device with both channels, or one with each.
fn find_iio(root: &Path) -> Option<IioReader> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(root)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .collect();
    dirs.sort();
    let accel = dirs
        .iter()
        .find_map(|d| Some((d, IioTriple::open(d, "accel")?)));
    let gyro = dirs
        .iter()
        .find_map(|d| Some((d, IioTriple::open(d, "anglvel")?)));
    let ((ad, accel), (gd, gyro)) = (accel?, gyro?);
    Some(IioReader {
        what: format!("IIO {} + {}", ad.display(), gd.display()),
        accel,
        gyro,
    })
}

/// An evdev accelerometer (with gyroscope axes).
struct EvdevReader {
    file: fs::File,
    path: PathBuf,
    /// Units per m/s² (ABS_X/Y/Z) and per degree/s (ABS_RX/RY/RZ): the axes' resolution.
    res: [f64; 6],
    now: [f64; 6],
}

const EV_ABS: u16 = 3;
const EV_SYN: u16 = 0;
const INPUT_PROP_ACCELEROMETER: usize = 6;

/// `EVIOCGPROP(len)` and `EVIOCGABS(abs)`: `_IOC(_IOC_READ, 'E', nr, size)`.
fn ioc_read(nr: u64, size: u64) -> u64 {
    (2u64 << 30) | (size << 16) | ((b'E' as u64) << 8) | nr
}

impl EvdevReader {
    fn open(path: &Path) -> Result<EvdevReader, ImuError> {
        let file = fs::File::open(path).map_err(io_error(path))?;
        let fd = file.as_raw_fd();
        let mut props = [0u8; 8];
        // SAFETY: EVIOCGPROP writes at most `props.len()` bytes into the buffer.
        let rc = unsafe {
            libc::ioctl(
                fd,
                ioc_read(0x09, props.len() as u64) as _,
                props.as_mut_ptr(),
            )
        };
        if rc < 0
            || props[INPUT_PROP_ACCELEROMETER / 8] & (1 << (INPUT_PROP_ACCELEROMETER % 8)) == 0
        {
            return Err(ImuError::NotAccelerometer(path.to_path_buf()));
        }
        let mut res = [1.0; 6];
        for (i, code) in [0u64, 1, 2, 3, 4, 5].iter().enumerate() {
            let mut info = [0i32; 6]; // value, minimum, maximum, fuzz, flat, resolution
                                      // SAFETY: EVIOCGABS writes one struct input_absinfo (6 × i32) into `info`.
            let rc = unsafe { libc::ioctl(fd, ioc_read(0x40 + code, 24) as _, info.as_mut_ptr()) };
            if rc == 0 && info[5] > 0 {
                res[i] = info[5] as f64;
            }
        }
        Ok(EvdevReader {
            file,
            path: path.to_path_buf(),
            res,
            now: [0.0; 6],
        })
    }
}

impl Reader for EvdevReader {
    fn read(&mut self) -> Result<Option<ImuSample>, ImuError> {
        // One report (up to SYN_REPORT) per call; blocking reads pace the source.
        let mut buf = [0u8; untether_media::evdev::RECORD_LEN];
        loop {
            self.file
                .read_exact(&mut buf)
                .map_err(io_error(&self.path))?;
            let r = untether_media::evdev::Record::parse(&buf);
            match r.ev_type {
                EV_ABS if (r.code as usize) < 6 => {
                    self.now[r.code as usize] = r.value as f64 / self.res[r.code as usize];
                }
                EV_SYN => {
                    let d = std::f64::consts::PI / 180.0;
                    return Ok(Some(ImuSample {
                        accel: [self.now[0], self.now[1], self.now[2]],
                        gyro: [self.now[3] * d, self.now[4] * d, self.now[5] * d],
                    }));
                }
                _ => {}
            }
        }
    }
    fn describe(&self) -> String {
        format!("evdev {}", self.path.display())
    }
}

fn find_evdev(root: &Path) -> Option<EvdevReader> {
    let mut nodes: Vec<PathBuf> = fs::read_dir(root)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("event"))
        })
        .collect();
    nodes.sort();
    nodes.iter().find_map(|p| EvdevReader::open(p).ok())
}

/// An IMU fused into head poses.
pub struct ImuSource {
    reader: Box<dyn Reader>,
    fusion: Fusion,
}

impl ImuSource {
    /// Opens `path` (an IIO device directory or an evdev node), or the first IMU found under
    /// [`IIO_ROOT`] and [`EVDEV_ROOT`].
    pub fn open(path: Option<&Path>) -> Result<ImuSource, PoseError> {
        Self::open_in(path, Path::new(IIO_ROOT), Path::new(EVDEV_ROOT))
    }

    pub(crate) fn open_in(
        path: Option<&Path>,
        iio_root: &Path,
        evdev_root: &Path,
    ) -> Result<ImuSource, PoseError> {
        let reader: Box<dyn Reader> = match path {
            Some(p) if p.is_dir() => {
                let (Some(accel), Some(gyro)) =
                    (IioTriple::open(p, "accel"), IioTriple::open(p, "anglvel"))
                else {
                    return Err(ImuError::NotIio(p.to_path_buf()).into());
                };
                Box::new(IioReader {
                    accel,
                    gyro,
                    what: format!("IIO {}", p.display()),
                })
            }
            Some(p) => Box::new(EvdevReader::open(p)?),
            None => match find_iio(iio_root) {
                Some(r) => Box::new(r),
                None => match find_evdev(evdev_root) {
                    Some(r) => Box::new(r),
                    None => {
                        return Err(ImuError::NotFound {
                            iio_root: iio_root.to_path_buf(),
                            evdev_root: evdev_root.to_path_buf(),
                        }
                        .into())
                    }
                },
            },
        };
        log::info!("client: head pose from the IMU {}", reader.describe());
        Ok(ImuSource {
            reader,
            fusion: Fusion::new(500.0),
        })
    }
}

impl PoseSource for ImuSource {
    fn name(&self) -> String {
        format!("IMU {}", self.reader.describe())
    }
    fn sample(&mut self, now_us: Micros) -> Result<Option<Pose>, PoseError> {
        match self.reader.read()? {
            Some(s) => Ok(Some(Pose {
                orientation: self.fusion.update(now_us, s),
                position: [0.0; 3],
            })),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gravity's reaction in the head frame when the head is upright: +y.
    const UP: [f64; 3] = [0.0, 9.81, 0.0];

    #[test]
    fn fusion_follows_a_turn_and_a_tilt() {
        // Turning left at 90°/s for 1 s, upright: yaw +90°.
        let mut f = Fusion::new(1000.0);
        let mut q = [0.0, 0.0, 0.0, 1.0];
        for i in 0..=1000u64 {
            q = f.update(
                i * 1000,
                ImuSample {
                    accel: UP,
                    gyro: [0.0, std::f64::consts::FRAC_PI_2, 0.0],
                },
            );
        }
        let (yaw, pitch, roll) = untether_proto::pose::quat_to_yaw_pitch_roll(q);
        assert!(
            (yaw.to_degrees() - 90.0).abs() < 3.0,
            "yaw {}",
            yaw.to_degrees()
        );
        assert!(pitch.to_degrees().abs() < 2.0 && roll.to_degrees().abs() < 2.0);
        // Held still looking 30° up, gravity tells the pitch: the filter converges to it.
        let p = 30f64.to_radians();
        let mut f = Fusion::new(1000.0);
        for i in 0..5000u64 {
            q = f.update(
                i * 1000,
                ImuSample {
                    // Gravity's reaction (world up) seen from a head pitched up by p.
                    accel: [0.0, 9.81 * p.cos(), -9.81 * p.sin()],
                    gyro: [0.0; 3],
                },
            );
        }
        let (_, pitch, _) = untether_proto::pose::quat_to_yaw_pitch_roll(q);
        assert!(
            (pitch.to_degrees() - 30.0).abs() < 2.0,
            "pitch {}",
            pitch.to_degrees()
        );
    }

    #[test]
    fn an_iio_tree_is_read_and_scaled() {
        let dir = std::env::temp_dir().join(format!("untether-iio-{}", std::process::id()));
        let dev = dir.join("iio:device0");
        fs::create_dir_all(&dev).unwrap();
        for (f, v) in [
            ("in_accel_x_raw", "0"),
            ("in_accel_y_raw", "1000"),
            ("in_accel_z_raw", "0"),
            ("in_accel_scale", "0.00981"),
            ("in_anglvel_x_raw", "0"),
            ("in_anglvel_y_raw", "500"),
            ("in_anglvel_z_raw", "0"),
            ("in_anglvel_scale", "0.001"),
        ] {
            fs::write(dev.join(f), v).unwrap();
        }
        let mut src = ImuSource::open_in(None, &dir, Path::new("/nonexistent")).unwrap();
        assert!(src.name().contains("iio:device0"));
        let s = src.reader.read().unwrap().unwrap();
        assert!((s.accel[1] - 9.81).abs() < 1e-9 && (s.gyro[1] - 0.5).abs() < 1e-9);
        let p = src.sample(0).unwrap().unwrap();
        assert!(p.is_valid());
        // A channel that stops reading as a number names its file.
        fs::write(dev.join("in_anglvel_y_raw"), "x").unwrap();
        let e = src.sample(0).unwrap_err();
        assert!(
            matches!(&e, PoseError::Imu(ImuError::NotANumber(f)) if f.ends_with("in_anglvel_y_raw")),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!("{}: not a number", dev.join("in_anglvel_y_raw").display())
        );
        // A directory without the channels is not an IIO IMU.
        let e = ImuSource::open_in(Some(&dir), &dir, Path::new("/nonexistent"))
            .err()
            .unwrap();
        assert!(matches!(e, PoseError::Imu(ImuError::NotIio(_))), "{e:?}");
        assert!(
            e.to_string()
                .ends_with(": not an IIO IMU (needs in_accel_[xyz]_raw and in_anglvel_[xyz]_raw)"),
            "{e}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_imu_is_one_clear_error() {
        let e = ImuSource::open_in(
            None,
            Path::new("/nonexistent/iio"),
            Path::new("/nonexistent/input"),
        )
        .err()
        .unwrap();
        assert!(
            matches!(e, PoseError::Imu(ImuError::NotFound { .. })),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "no IMU found: no IIO device with an accelerometer and a gyroscope under \
             /nonexistent/iio and no evdev accelerometer under /nonexistent/input (use --pose \
             synthetic, track:FILE or mouse)"
        );
        // On this machine too (it has no IMU), through the real paths.
        if let Err(e) = ImuSource::open(None) {
            assert!(e.to_string().starts_with("no IMU found"), "{e}");
        }
    }
}

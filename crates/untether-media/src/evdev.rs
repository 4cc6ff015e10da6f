//! Linux input devices by file descriptor: evdev `struct input_event` records as they come from
//! `/dev/input/event*` (an IMU or gamepad on a Raspberry Pi, a keyboard), or from any pipe or
//! socket that carries the same records.
//!
//! Records are grouped into reports by `SYN_REPORT`, the way the kernel delivers them. Each
//! report becomes [`DeviceEvent`]s: every key/button change in order (they must all arrive),
//! only the **latest** value of each absolute axis (state: older values are stale), and the
//! **sum** of each relative axis (deltas must not be lost).

use std::io::Read;

use crate::{MediaError, Result};

/// `struct input_event` on 64-bit Linux: `struct timeval` (2 × 8 bytes), type u16, code u16,
/// value i32, native endian.
pub const RECORD_LEN: usize = 24;

pub const EV_SYN: u16 = 0x00;
pub const EV_KEY: u16 = 0x01;
pub const EV_REL: u16 = 0x02;
pub const EV_ABS: u16 = 0x03;
pub const SYN_REPORT: u16 = 0;
pub const SYN_DROPPED: u16 = 3;

/// One evdev record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Record {
    pub sec: i64,
    pub usec: i64,
    pub ev_type: u16,
    pub code: u16,
    pub value: i32,
}

impl Record {
    pub fn new(ev_type: u16, code: u16, value: i32) -> Record {
        Record {
            ev_type,
            code,
            value,
            ..Default::default()
        }
    }

    pub fn parse(b: &[u8; RECORD_LEN]) -> Record {
        let i64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            i64::from_ne_bytes(a)
        };
        Record {
            sec: i64_at(0),
            usec: i64_at(8),
            ev_type: u16::from_ne_bytes([b[16], b[17]]),
            code: u16::from_ne_bytes([b[18], b[19]]),
            value: i32::from_ne_bytes([b[20], b[21], b[22], b[23]]),
        }
    }

    pub fn to_bytes(&self) -> [u8; RECORD_LEN] {
        let mut b = [0u8; RECORD_LEN];
        b[0..8].copy_from_slice(&self.sec.to_ne_bytes());
        b[8..16].copy_from_slice(&self.usec.to_ne_bytes());
        b[16..18].copy_from_slice(&self.ev_type.to_ne_bytes());
        b[18..20].copy_from_slice(&self.code.to_ne_bytes());
        b[20..24].copy_from_slice(&self.value.to_ne_bytes());
        b
    }
}

/// What a device reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceEvent {
    /// `EV_KEY` press (true) or release (false); auto-repeat (value 2) is dropped.
    Button { code: u16, down: bool },
    /// `EV_ABS`: the latest value in the report.
    Absolute { code: u16, value: i32 },
    /// `EV_REL`: the sum of the report's deltas.
    Relative { code: u16, value: i32 },
}

/// Groups records into reports and coalesces axes.
#[derive(Debug, Default)]
pub struct Coalescer {
    buttons: Vec<DeviceEvent>,
    abs: Vec<(u16, i32)>,
    rel: Vec<(u16, i32)>,
    /// After SYN_DROPPED the kernel's buffer overflowed: drop until the next SYN_REPORT.
    dropping: bool,
    pub records: u64,
    pub reports: u64,
}

impl Coalescer {
    /// Takes one record; at a `SYN_REPORT` appends the report's events to `out`.
    pub fn push(&mut self, r: Record, out: &mut Vec<DeviceEvent>) {
        self.records += 1;
        match (r.ev_type, r.code) {
            (EV_SYN, SYN_REPORT) => {
                if self.dropping {
                    self.dropping = false;
                    self.clear();
                    return;
                }
                self.reports += 1;
                out.append(&mut self.buttons);
                out.extend(
                    self.abs
                        .drain(..)
                        .map(|(code, value)| DeviceEvent::Absolute { code, value }),
                );
                out.extend(
                    self.rel
                        .drain(..)
                        .filter(|&(_, v)| v != 0)
                        .map(|(code, value)| DeviceEvent::Relative { code, value }),
                );
            }
            (EV_SYN, SYN_DROPPED) => {
                self.dropping = true;
                self.clear();
            }
            _ if self.dropping => {}
            (EV_KEY, code) if (r.value == 0 || r.value == 1) && self.buttons.len() < 256 => {
                self.buttons.push(DeviceEvent::Button {
                    code,
                    down: r.value == 1,
                });
            }
            (EV_KEY, _) => {} // auto-repeat, or a runaway report
            (EV_ABS, code) => match self.abs.iter().position(|(c, _)| *c == code) {
                Some(i) => self.abs[i].1 = r.value,
                None if self.abs.len() < 64 => self.abs.push((code, r.value)),
                None => {}
            },
            (EV_REL, code) => match self.rel.iter().position(|(c, _)| *c == code) {
                Some(i) => self.rel[i].1 = self.rel[i].1.saturating_add(r.value),
                None if self.rel.len() < 64 => self.rel.push((code, r.value)),
                None => {}
            },
            _ => {} // EV_MSC, EV_LED, …: not forwarded
        }
    }

    fn clear(&mut self) {
        self.buttons.clear();
        self.abs.clear();
        self.rel.clear();
    }
}

/// Reads records from a device, pipe or socket.
pub struct DeviceReader<R: Read> {
    input: R,
    buf: [u8; RECORD_LEN * 64],
    have: usize,
    pub coalescer: Coalescer,
}

impl<R: Read> DeviceReader<R> {
    pub fn new(input: R) -> Self {
        DeviceReader {
            input,
            buf: [0; RECORD_LEN * 64],
            have: 0,
            coalescer: Coalescer::default(),
        }
    }

    /// Blocks for the next read and appends the events of every complete report to `out`.
    /// Ok(false) at the end of the input.
    pub fn read(&mut self, out: &mut Vec<DeviceEvent>) -> Result<bool> {
        let n = loop {
            match self.input.read(&mut self.buf[self.have..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(MediaError::Other(format!("input device: {e}"))),
            }
        };
        if n == 0 {
            return Ok(false);
        }
        self.have += n;
        let whole = self.have / RECORD_LEN * RECORD_LEN;
        for chunk in self.buf[..whole].chunks_exact(RECORD_LEN) {
            let mut rec = [0u8; RECORD_LEN];
            rec.copy_from_slice(chunk);
            self.coalescer.push(Record::parse(&rec), out);
        }
        self.buf.copy_within(whole..self.have, 0);
        self.have -= whole;
        Ok(true)
    }
}

/// The device's name (`EVIOCGNAME`), when `fd` is an evdev device.
pub fn device_name(fd: std::os::fd::BorrowedFd<'_>) -> Option<String> {
    use std::os::fd::AsRawFd;
    let mut name = [0u8; 256];
    // EVIOCGNAME(len) = _IOC(_IOC_READ, 'E', 0x06, len)
    let req = (2u64 << 30) | ((name.len() as u64) << 16) | ((b'E' as u64) << 8) | 0x06;
    // SAFETY: the ioctl writes at most `name.len()` bytes into `name`; on a non-evdev fd it
    // fails with ENOTTY and writes nothing.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, name.as_mut_ptr()) };
    if rc <= 0 {
        return None;
    }
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Some(String::from_utf8_lossy(&name[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_keep_every_button_the_latest_abs_and_the_sum_of_rel() {
        let recs = [
            Record::new(EV_KEY, 0x130, 1),
            Record::new(EV_ABS, 0, 100),
            Record::new(EV_ABS, 1, -5),
            Record::new(EV_ABS, 0, 120),
            Record::new(EV_REL, 0, 3),
            Record::new(EV_REL, 0, 4),
            Record::new(EV_KEY, 0x130, 2), // auto-repeat: dropped
            Record::new(EV_KEY, 0x131, 1),
            Record::new(4, 4, 99), // EV_MSC: dropped
            Record::new(EV_SYN, SYN_REPORT, 0),
            Record::new(EV_KEY, 0x130, 0),
            Record::new(EV_SYN, SYN_REPORT, 0),
        ];
        let mut bytes = Vec::new();
        for r in recs {
            bytes.extend_from_slice(&r.to_bytes());
        }
        // Deliver in odd-sized pieces.
        struct Chunky(Vec<u8>, usize);
        impl Read for Chunky {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = buf.len().min(13).min(self.0.len() - self.1);
                buf[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
                self.1 += n;
                Ok(n)
            }
        }
        let mut r = DeviceReader::new(Chunky(bytes, 0));
        let mut out = Vec::new();
        while r.read(&mut out).unwrap() {}
        assert_eq!(
            out,
            vec![
                DeviceEvent::Button {
                    code: 0x130,
                    down: true
                },
                DeviceEvent::Button {
                    code: 0x131,
                    down: true
                },
                DeviceEvent::Absolute {
                    code: 0,
                    value: 120
                },
                DeviceEvent::Absolute { code: 1, value: -5 },
                DeviceEvent::Relative { code: 0, value: 7 },
                DeviceEvent::Button {
                    code: 0x130,
                    down: false
                },
            ]
        );
        assert_eq!(r.coalescer.reports, 2);
    }

    #[test]
    fn syn_dropped_discards_until_the_next_report() {
        let mut c = Coalescer::default();
        let mut out = Vec::new();
        c.push(Record::new(EV_KEY, 30, 1), &mut out);
        c.push(Record::new(EV_SYN, SYN_DROPPED, 0), &mut out);
        c.push(Record::new(EV_KEY, 31, 1), &mut out);
        c.push(Record::new(EV_SYN, SYN_REPORT, 0), &mut out);
        assert!(out.is_empty());
        c.push(Record::new(EV_KEY, 32, 1), &mut out);
        c.push(Record::new(EV_SYN, SYN_REPORT, 0), &mut out);
        assert_eq!(
            out,
            vec![DeviceEvent::Button {
                code: 32,
                down: true
            }]
        );
        let r = Record {
            sec: 5,
            usec: 7,
            ev_type: 3,
            code: 1,
            value: -9,
        };
        assert_eq!(Record::parse(&r.to_bytes()), r);
    }
}

//! A sliding window over received packet numbers: tells new packets from duplicates (a
//! redundant path, a duplicating network, or a replay) and counts gaps as losses.

/// Packets this far behind the newest are too old to judge and are refused.
pub const WINDOW: u64 = 1024;
const WORDS: usize = (WINDOW / 64) as usize;

/// What the window says about a packet number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    New,
    Duplicate,
    TooOld,
}

/// Received-packet bookkeeping for one direction of one session.
#[derive(Clone, Debug)]
pub struct PacketWindow {
    /// Highest packet number seen + 1 (0: none yet).
    top: u64,
    /// Bit i of the window: packet `top - 1 - i` was received.
    bits: [u64; WORDS],
    received: u64,
    /// Packet numbers that slid out of the window without having been received.
    lost: u64,
}

impl Default for PacketWindow {
    fn default() -> Self {
        Self::new()
    }
}

impl PacketWindow {
    pub fn new() -> Self {
        PacketWindow {
            top: 0,
            bits: [0; WORDS],
            received: 0,
            lost: 0,
        }
    }

    fn get(&self, age: u64) -> bool {
        self.bits[(age / 64) as usize] & (1 << (age % 64)) != 0
    }

    fn set(&mut self, age: u64) {
        self.bits[(age / 64) as usize] |= 1 << (age % 64);
    }

    /// Checks a packet number without recording it.
    pub fn check(&self, pn: u64) -> Seen {
        if pn == u64::MAX {
            // Never sent (the counter would have to wrap): treat as a forgery.
            Seen::TooOld
        } else if pn >= self.top {
            Seen::New
        } else {
            let age = self.top - 1 - pn;
            if age >= WINDOW {
                Seen::TooOld
            } else if self.get(age) {
                Seen::Duplicate
            } else {
                Seen::New
            }
        }
    }

    /// Records a packet number; returns what it was.
    pub fn record(&mut self, pn: u64) -> Seen {
        let seen = self.check(pn);
        if seen != Seen::New {
            return seen;
        }
        self.received += 1;
        if pn >= self.top {
            let shift = pn + 1 - self.top;
            // Packets that fall out of the window unreceived are lost.
            let first_ever = self.top == 0;
            self.shift(shift, first_ever);
            self.top = pn + 1;
            self.set(0);
            if first_ever {
                // Numbering starts at 0: packets below the first one seen were lost (those
                // still inside the window are counted as its gaps).
                self.lost += pn.saturating_sub(WINDOW - 1);
            }
        } else {
            self.set(self.top - 1 - pn);
        }
        seen
    }

    fn shift(&mut self, n: u64, first_ever: bool) {
        if n >= WINDOW {
            if !first_ever {
                let unreceived: u64 = self
                    .bits
                    .iter()
                    .map(|w| (!w).count_ones() as u64)
                    .sum::<u64>();
                // Everything in the old window not received, plus packets skipped entirely.
                let in_window = self.top.min(WINDOW);
                let missing_in_window = unreceived - (WINDOW - in_window);
                self.lost += missing_in_window + (n - WINDOW).min(u64::MAX / 2);
            }
            self.bits = [0; WORDS];
            return;
        }
        if !first_ever {
            // Count unreceived packets that slide out (ages WINDOW-n .. WINDOW).
            for age in (WINDOW - n)..WINDOW {
                if age < self.top && !self.get(age) {
                    self.lost += 1;
                }
            }
        }
        let (words, bits) = ((n / 64) as usize, (n % 64) as u32);
        let mut out = [0u64; WORDS];
        for (i, o) in out.iter_mut().enumerate() {
            if i >= words {
                let src = i - words;
                let mut v = self.bits[src] << bits;
                if bits > 0 && src > 0 {
                    v |= self.bits[src - 1] >> (64 - bits);
                }
                *o = v;
            }
        }
        self.bits = out;
    }

    pub fn received(&self) -> u64 {
        self.received
    }

    /// Packets never received: those that left the window plus current gaps in it.
    pub fn lost(&self) -> u64 {
        let in_window = self.top.min(WINDOW);
        let gaps: u64 = (0..in_window).filter(|&a| !self.get(a)).count() as u64;
        self.lost + gaps
    }

    /// Highest packet number seen.
    pub fn highest(&self) -> Option<u64> {
        self.top.checked_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn duplicates_and_too_old() {
        let mut w = PacketWindow::new();
        assert_eq!(w.record(0), Seen::New);
        assert_eq!(w.record(0), Seen::Duplicate);
        assert_eq!(w.record(5), Seen::New);
        assert_eq!(w.record(3), Seen::New);
        assert_eq!(w.record(3), Seen::Duplicate);
        assert_eq!(w.lost(), 3); // 1, 2, 4
        assert_eq!(w.record(5000), Seen::New);
        assert_eq!(w.record(3000), Seen::TooOld);
        assert_eq!(w.received(), 4);
    }

    proptest! {
        #[test]
        fn matches_a_set(pns in proptest::collection::vec(0u64..3000, 1..400)) {
            let mut w = PacketWindow::new();
            let mut seen = std::collections::BTreeSet::new();
            let mut top = 0u64;
            for pn in pns {
                let expect = if pn + WINDOW < top {
                    Seen::TooOld
                } else if seen.contains(&pn) {
                    Seen::Duplicate
                } else {
                    Seen::New
                };
                prop_assert_eq!(w.record(pn), expect);
                if expect == Seen::New {
                    seen.insert(pn);
                    top = top.max(pn + 1);
                }
            }
            // received + lost = every number up to the highest.
            prop_assert_eq!(w.received() + w.lost(), top);
        }
    }
}

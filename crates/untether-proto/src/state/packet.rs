//! The state channel's two messages on the wire: a state packet ([`StatePacket`]) and its
//! acknowledgement as ACK/NAK runs compressed to their starts ([`StateAck`]).

use super::{StateKey, StateValue, MAX_ENTRIES, MAX_RUNS};
use crate::wire::{bad, Put, Reader, WireError};

/// One state packet: `pid u32 ‖ ank u32 ‖ count u8 ‖ entries`.
#[derive(Clone, Debug, PartialEq)]
pub struct StatePacket {
    pub pid: u32,
    /// Every pid below this is resolved at the sender: the receiver may forget them.
    pub ank: u32,
    pub entries: Vec<(StateKey, StateValue)>,
}

impl StatePacket {
    pub fn encoded_len(&self) -> usize {
        9 + self
            .entries
            .iter()
            .map(|(_, v)| v.entry_len())
            .sum::<usize>()
    }
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.pid);
        out.put_u32(self.ank);
        out.put_u8(self.entries.len().min(MAX_ENTRIES) as u8);
        for (k, v) in self.entries.iter().take(MAX_ENTRIES) {
            v.encode_entry(*k, out);
        }
    }
    pub fn parse(r: &mut Reader<'_>) -> Result<StatePacket, WireError> {
        let pid = r.u32()?;
        let ank = r.u32()?;
        let n = r.u8()? as usize;
        if n > MAX_ENTRIES || n * 7 > r.remaining() {
            return Err(bad("state.count", "more entries than allowed or present"));
        }
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            entries.push(StateValue::parse_entry(r)?);
        }
        Ok(StatePacket { pid, ank, entries })
    }
}

/// ACK/NAK runs compressed to their starts: run `i` covers `[starts[i], starts[i+1])`, the last
/// run `[starts[last], end]`; runs alternate between ACK and NAK starting with `first_ack`, and
/// the last run is an ACK (`end` is the highest pid received).
///
/// Wire: `end u32 ‖ first_ack u8 ‖ n u8 ‖ starts u32 × n` with `starts` strictly increasing and
/// `≤ end`, `1 ≤ n ≤ 64`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateAck {
    pub end: u32,
    pub first_ack: bool,
    pub starts: Vec<u32>,
}

impl StateAck {
    pub fn encoded_len(&self) -> usize {
        6 + 4 * self.starts.len()
    }
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.end);
        out.put_u8(self.first_ack as u8);
        out.put_u8(self.starts.len() as u8);
        for s in &self.starts {
            out.put_u32(*s);
        }
    }
    pub fn parse(r: &mut Reader<'_>) -> Result<StateAck, WireError> {
        let end = r.u32()?;
        let first_ack = r.bool("state_ack.first_ack")?;
        let n = r.u8()? as usize;
        if n == 0 || n > MAX_RUNS {
            return Err(bad("state_ack.count", "must be 1..=64"));
        }
        let mut starts = Vec::with_capacity(n);
        for _ in 0..n {
            starts.push(r.u32()?);
        }
        if starts.windows(2).any(|w| w[0] >= w[1]) || starts[n - 1] > end {
            return Err(bad("state_ack.starts", "not increasing, or beyond end"));
        }
        // The last run contains `end`, which was received: it must be an ACK run.
        if (n % 2 == 1) != first_ack {
            return Err(bad("state_ack", "the last run must be an ACK run"));
        }
        Ok(StateAck {
            end,
            first_ack,
            starts,
        })
    }

    /// Every (pid range, acked) of this ack, oldest first.
    pub fn runs(&self) -> impl Iterator<Item = (std::ops::RangeInclusive<u32>, bool)> + '_ {
        self.starts.iter().enumerate().map(move |(i, &s)| {
            let last = match self.starts.get(i + 1) {
                Some(&next) => next - 1,
                None => self.end,
            };
            (s..=last, (i % 2 == 0) == self.first_ack)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StateReceiver;

    #[test]
    fn ack_runs_compress_to_starts() {
        // The example: ack(31), nak(33), ack(36) up to 38.
        let mut r = StateReceiver::new();
        for pid in [31u32, 32, 36, 37, 38] {
            r.on_packet(
                0,
                &StatePacket {
                    pid,
                    ank: 31,
                    entries: vec![],
                },
            );
        }
        let a = r.poll_ack().unwrap();
        assert_eq!(
            a,
            StateAck {
                end: 38,
                first_ack: true,
                starts: vec![31, 33, 36]
            }
        );
        let runs: Vec<_> = a.runs().collect();
        assert_eq!(
            runs,
            vec![(31..=32, true), (33..=35, false), (36..=38, true)]
        );
        let mut out = Vec::new();
        a.encode(&mut out);
        assert_eq!(
            crate::wire::Hex(&out).to_string(),
            crate::vectors::STATE_ACK_EXAMPLE
        );
        assert_eq!(StateAck::parse(&mut Reader::new(&out, "t")).unwrap(), a);
        assert!(r.poll_ack().is_none());
    }
}

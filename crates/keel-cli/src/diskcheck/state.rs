//! What the server knows about a run: its parameters and, per block, the
//! newest announced ("about to write") and the newest acknowledged
//! ("durable") generation. Both the server and the single-machine ack file
//! rebuild this from their logs; `verify` compares the disk against it.

use std::collections::HashMap;

/// A run's parameters, fixed when it begins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunMeta {
    pub run_id: u64,
    pub block_bytes: u32,
    pub block_count: u64,
    pub threads: u32,
    /// Client's wall clock at the start, µs since the epoch.
    pub started_us: u64,
    /// The write method's command-line name.
    pub method: String,
    /// The file under test, as the client named it.
    pub file: String,
    /// The client's host name.
    pub host: String,
}

impl RunMeta {
    pub fn size_bytes(&self) -> u64 {
        self.block_count * u64::from(self.block_bytes)
    }
}

/// One write of one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    pub block: u64,
    pub generation: u64,
}

/// Per-block record. Times are the recorder's clock, µs since the epoch.
/// A generation of 0 means "none".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockRecord {
    pub intent_gen: u64,
    pub intent_time_us: u64,
    pub acked_gen: u64,
    pub acked_time_us: u64,
}

impl BlockRecord {
    /// The generation announced after the last acknowledged one, if any:
    /// it may or may not have reached the disk.
    pub fn in_flight(&self) -> Option<u64> {
        (self.intent_gen > self.acked_gen).then_some(self.acked_gen + 1)
    }
}

/// A run's parameters and totals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSummary {
    pub meta: RunMeta,
    pub first_time_us: u64,
    /// Time of the newest record: "the end" errors are dated against.
    pub last_time_us: u64,
    /// Acknowledged writes recorded (not distinct blocks).
    pub acked_writes: u64,
    /// Whether the client reported a clean end.
    pub ended: bool,
}

/// Everything recorded for one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunState {
    pub summary: RunSummary,
    pub blocks: HashMap<u64, BlockRecord>,
}

impl RunState {
    pub fn new(meta: RunMeta, time_us: u64) -> Self {
        RunState {
            summary: RunSummary {
                meta,
                first_time_us: time_us,
                last_time_us: time_us,
                acked_writes: 0,
                ended: false,
            },
            blocks: HashMap::new(),
        }
    }

    pub fn meta(&self) -> &RunMeta {
        &self.summary.meta
    }

    /// Check "about to write" entries without applying them.
    pub fn check_intents(&self, entries: &[Entry]) -> Result<(), String> {
        entries.iter().try_for_each(|e| self.check_entry(e))
    }

    /// Check "acknowledged" entries: each must have been announced first.
    pub fn check_acks(&self, entries: &[Entry]) -> Result<(), String> {
        for e in entries {
            self.check_entry(e)?;
            let announced = self.blocks.get(&e.block).map_or(0, |r| r.intent_gen);
            if e.generation > announced {
                return Err(format!(
                    "acknowledgement of block {} generation {} that was never announced \
                     (announced up to {announced})",
                    e.block, e.generation
                ));
            }
        }
        Ok(())
    }

    /// Record intents. Replays (after a reconnect) are harmless: the newest
    /// generation wins.
    pub fn apply_intents(&mut self, entries: &[Entry], time_us: u64) {
        for e in entries {
            let r = self.blocks.entry(e.block).or_default();
            if e.generation > r.intent_gen {
                r.intent_gen = e.generation;
                r.intent_time_us = time_us;
            }
        }
        self.touch(time_us);
    }

    /// Record acknowledgements (newest generation wins).
    pub fn apply_acks(&mut self, entries: &[Entry], time_us: u64) {
        for e in entries {
            let r = self.blocks.entry(e.block).or_default();
            if e.generation > r.acked_gen {
                r.acked_gen = e.generation;
                r.acked_time_us = time_us;
                r.intent_gen = r.intent_gen.max(e.generation);
                self.summary.acked_writes += 1;
            }
        }
        self.touch(time_us);
    }

    pub fn apply_end(&mut self, time_us: u64) {
        self.summary.ended = true;
        self.touch(time_us);
    }

    fn touch(&mut self, time_us: u64) {
        self.summary.last_time_us = self.summary.last_time_us.max(time_us);
    }

    fn check_entry(&self, e: &Entry) -> Result<(), String> {
        if e.block >= self.meta().block_count {
            return Err(format!(
                "block {} is outside the run's {} blocks",
                e.block,
                self.meta().block_count
            ));
        }
        if e.generation == 0 {
            return Err(format!("block {}: generation 0 is reserved", e.block));
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) fn test_meta(run_id: u64, block_count: u64) -> RunMeta {
    RunMeta {
        run_id,
        block_bytes: 4096,
        block_count,
        threads: 1,
        started_us: 1,
        method: "fdatasync".into(),
        file: "f".into(),
        host: "h".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(block: u64, generation: u64) -> Entry {
        Entry { block, generation }
    }

    #[test]
    fn newest_generation_wins_and_replays_are_harmless() {
        let mut s = RunState::new(test_meta(1, 10), 100);
        s.apply_intents(&[e(3, 1)], 110);
        s.apply_acks(&[e(3, 1)], 120);
        s.apply_intents(&[e(3, 2)], 130);
        s.apply_intents(&[e(3, 1)], 140);
        s.apply_acks(&[e(3, 1)], 150);
        let r = s.blocks[&3];
        assert_eq!((r.intent_gen, r.acked_gen, r.acked_time_us), (2, 1, 120));
        assert_eq!(r.in_flight(), Some(2));
        assert_eq!(s.summary.acked_writes, 1);
        assert_eq!(s.summary.last_time_us, 150);
    }

    #[test]
    fn bad_entries_are_refused() {
        let mut s = RunState::new(test_meta(1, 10), 0);
        assert!(s.check_intents(&[e(10, 1)]).is_err());
        assert!(s.check_intents(&[e(1, 0)]).is_err());
        assert!(s.check_acks(&[e(1, 1)]).is_err());
        s.apply_intents(&[e(1, 1)], 1);
        assert!(s.check_acks(&[e(1, 1)]).is_ok());
        assert!(s.check_acks(&[e(1, 2)]).is_err());
    }
}

//! The gate of commits made without the writer slot: open, it holds the
//! memtable and the table ids they need; whoever takes the slot closes it
//! first. Why and how: `direct.rs`.

use std::sync::{Arc, Mutex};

use crossbeam_utils::CachePadded;

use super::layers::Base;
use super::sync::lock;
use super::writer::WriterState;
use crate::journal::Lsn;
use crate::stripe::STRIPES;

/// The gate direct commits go through (see `direct.rs`).
#[derive(Debug)]
pub(crate) struct DirectGate {
    pub(super) cells: Box<[CachePadded<Mutex<Cell>>]>,
}

/// A stripe of the gate: open (what direct commits need) or closed.
#[derive(Debug, Default)]
pub(super) struct Cell {
    pub(super) open: Option<Arc<Open>>,
    /// The highest LSN a direct commit of this stripe was given.
    pub(super) last_lsn: Lsn,
}

/// What the writer slot's last holder left for direct commits.
#[derive(Debug)]
pub(super) struct Open {
    /// The writer's base: its active memtable is where commits go.
    pub(super) base: Arc<Base>,
    /// Tables known to exist, by name.
    pub(super) ids: Vec<(Box<str>, u32)>,
}

impl Default for DirectGate {
    fn default() -> Self {
        DirectGate {
            cells: (0..STRIPES)
                .map(|_| CachePadded::new(Mutex::new(Cell::default())))
                .collect(),
        }
    }
}

impl DirectGate {
    /// Close the gate: no direct commit is inside when this returns (each
    /// stripe's lock is taken once, after the one inside it left), and
    /// none enters before [`DirectGate::open`]. Returns the highest LSN
    /// direct commits were given.
    pub(crate) fn close(&self) -> Lsn {
        let mut last = 0;
        for cell in self.cells.iter() {
            let mut c = lock(cell);
            c.open = None;
            last = last.max(c.last_lsn);
        }
        last
    }

    /// Open the gate for commits into `w`'s memtable with `w`'s known
    /// tables.
    pub(crate) fn open(&self, w: &WriterState) {
        let open = Arc::new(Open {
            base: Arc::clone(&w.base),
            ids: lock(&w.table_ids).clone(),
        });
        for cell in self.cells.iter() {
            lock(cell).open = Some(Arc::clone(&open));
        }
    }
}

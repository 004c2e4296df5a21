//! The consumer groups a shard serves: one cell per group, opened at a member's first
//! join (the fold of the group's stream) and shared by that group's member connections
//! and its coordinator task (`grouplog`). Nothing here awaits the disk.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use corelog_runtime::sync::Event;

use super::Group;

/// Groups one shard serves at once (a bound on memory and on metric labels).
pub const MAX_GROUPS: usize = 64;
/// Buckets per shard of a group whose first join names none.
pub const DEFAULT_K: u16 = 4;
/// How long a group's sessions last and how long it waits to open a generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// A member that sends nothing for this long leaves its group (`--group-session-ms`).
    pub session_ms: u64,
    /// Joins and leaves within this window open one generation together
    /// (`--group-settle-ms`).
    pub settle_ms: u64,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing { session_ms: 10_000, settle_ms: 200 }
    }
}

/// One group on one shard.
pub struct GroupCell {
    pub name: String,
    /// The group's state; its `prefix` (which streams it reads) is fixed by its first
    /// join.
    pub state: RefCell<Group>,
    /// The newest generation whose `State` event is durable on both nodes: deliveries
    /// under a generation start only once it is (0: none yet).
    pub durable_gen: Cell<u64>,
    /// An append of the group's stream failed: its state in memory may be ahead of the
    /// log. Members end their sessions; the next join folds the stream again.
    pub broken: Cell<bool>,
    /// A generation became durable, a member joined or left, or the cell broke.
    pub changed: Event,
    /// One writer of the group's stream at a time, so that events reach the log in the
    /// order they were applied in memory.
    pub writing: glommio::sync::Semaphore,
    /// Where the newest durable `State` of the group sits in the log (0: not known since
    /// the fold): the coordinator writes a fresh one once the log's last segment starts
    /// above it, so that retention, which deletes whole sealed segments, never takes
    /// the group's last `State`.
    pub state_at: Cell<u64>,
}

impl GroupCell {
    pub fn new(name: &str, group: Group) -> GroupCell {
        GroupCell {
            name: name.to_string(),
            durable_gen: Cell::new(group.gen()),
            state: RefCell::new(group),
            broken: Cell::new(false),
            changed: Event::default(),
            writing: glommio::sync::Semaphore::new(1),
            state_at: Cell::new(0),
        }
    }

    /// A `State` event of the group is durable at `offset`.
    pub fn state_written(&self, offset: u64) {
        self.state_at.set(self.state_at.get().max(offset));
    }

    /// Marks the cell broken and wakes everyone who waits on it.
    pub fn break_off(&self) {
        self.broken.set(true);
        self.changed.notify();
    }
}

/// The groups of one shard, by name.
#[derive(Default)]
pub struct Groups {
    cells: RefCell<BTreeMap<String, Rc<GroupCell>>>,
}

impl Groups {
    pub fn get(&self, name: &str) -> Option<Rc<GroupCell>> {
        self.cells.borrow().get(name).filter(|c| !c.broken.get()).cloned()
    }

    /// Adds a cell (replacing a broken one of the same name). At `MAX_GROUPS` a group
    /// without members and without a generation to open is closed to make room (its
    /// state stays in its stream); false when every group has members.
    pub fn insert(&self, cell: Rc<GroupCell>) -> bool {
        let mut cells = self.cells.borrow_mut();
        cells.retain(|_, c| !c.broken.get());
        if cells.len() >= MAX_GROUPS && !cells.contains_key(&cell.name) {
            let idle = |c: &GroupCell| {
                let g = c.state.borrow();
                g.members().next().is_none() && !g.rebalancing() && c.writing.available() == 1
            };
            let Some(name) = cells.iter().find(|(_, c)| idle(c)).map(|(n, _)| n.clone()) else { return false };
            let closed = cells.remove(&name).expect("found above");
            closed.break_off();
        }
        cells.insert(cell.name.clone(), cell);
        assert!(cells.len() <= MAX_GROUPS, "{} groups on one shard", cells.len());
        true
    }
}

/// The reserved stream that holds a group's events on shard `shard`.
pub fn stream_name(group: &str, shard: u16) -> String {
    format!("$g/{group}/{shard}")
}

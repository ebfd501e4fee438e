//! The simulation's agenda: events in time order, ties in the order they were scheduled.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Something that happens at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// A new request arrives from a client.
    Arrival,
    /// A client sends an attempt (the first or a retry) of request `request`.
    Send { request: u32 },
    /// A client stops waiting for attempt `attempt`.
    Timeout { attempt: u32 },
    /// A paced admission of attempt `attempt` is due.
    Admit { attempt: u32 },
    /// Attempt `attempt` has waited its adaptive limit's queue timeout out.
    QueueTimeout { attempt: u32 },
    /// Worker `worker` finishes its request.
    Complete { worker: u32 },
    /// The lab's sampling tick.
    Tick,
}

#[derive(Debug, PartialEq, Eq)]
struct Scheduled {
    at: u64,
    seq: u64,
    event: Event,
}

impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> Ordering {
        // A max-heap: the earliest (then the first scheduled) compares greatest.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Events by time (nanoseconds from the start of the run).
#[derive(Debug, Default)]
pub(crate) struct Agenda {
    heap: BinaryHeap<Scheduled>,
    seq: u64,
}

impl Agenda {
    pub(crate) fn schedule(&mut self, at: u64, event: Event) {
        self.seq += 1;
        self.heap.push(Scheduled {
            at,
            seq: self.seq,
            event,
        });
    }

    /// The next event and its time.
    pub(crate) fn pop(&mut self) -> Option<(u64, Event)> {
        self.heap.pop().map(|s| (s.at, s.event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_by_order_of_scheduling() {
        let mut agenda = Agenda::default();
        agenda.schedule(20, Event::Tick);
        agenda.schedule(10, Event::Send { request: 1 });
        agenda.schedule(10, Event::Send { request: 2 });
        agenda.schedule(5, Event::Arrival);
        let order: Vec<_> = std::iter::from_fn(|| agenda.pop()).collect();
        assert_eq!(
            order,
            vec![
                (5, Event::Arrival),
                (10, Event::Send { request: 1 }),
                (10, Event::Send { request: 2 }),
                (20, Event::Tick),
            ]
        );
    }
}

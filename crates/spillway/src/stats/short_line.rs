//! The thread's line of a window, found without a slow step: where the entry path's short
//! exits and refusals write.

use super::accumulator::Line;

/// A thread's accumulator line that already holds the window's current bucket (see
/// [`SlidingWindow::short_line`](super::SlidingWindow::short_line)). Writing to it takes no
/// slow step and makes no call, so a path that writes several of them can check them all first
/// and then write: all or nothing.
#[derive(Clone, Copy)]
pub(crate) struct ShortLine<'a> {
    line: &'a Line,
    max_rt_micros: u64,
}

impl<'a> ShortLine<'a> {
    #[inline(always)]
    pub(super) fn new(line: &'a Line, max_rt_micros: u64) -> Self {
        Self {
            line,
            max_rt_micros,
        }
    }

    /// An exit: `count` completions after `rt_micros` (capped at the window's max RT),
    /// `errors` of them errors, and one fewer entry in flight.
    #[inline(always)]
    pub(crate) fn exit(self, rt_micros: u64, count: u64, errors: u64) {
        self.line.add_in_flight(u64::MAX);
        self.line
            .add_completion(rt_micros.min(self.max_rt_micros), count, errors);
    }

    /// A refusal: `count` blocks.
    #[inline(always)]
    pub(crate) fn block(self, count: u64) {
        self.line.bump(super::Event::Block.slot(), count);
    }
}

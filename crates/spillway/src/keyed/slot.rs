//! One key's exact state in a per-key rule's table: its tokens or schedule, its passes over
//! this window and the last, how busy it is, and whether it is being limited.

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Slot {
    /// The key's fingerprint; 0: a free place (a key hashing to 0 is stored as 1).
    pub(super) key: u64,
    /// Reject: tokens left (Sentinel's token counter). Unused by throttle.
    pub(super) tokens: i64,
    /// Reject: when tokens were last added; throttle: the last pass (ms).
    pub(super) last_ms: u64,
    /// Permits passed in the slot's window, and in the window before it.
    pub(super) passed: u32,
    pub(super) passed_before: u32,
    /// Calls since it took its place, halved for each window since (how busy the key is).
    pub(super) busy: u16,
    /// The window of the key's last call (its low 16 bits).
    pub(super) window: u16,
    /// One more than the window in which the key was last refused (low 16 bits; 0: never).
    pub(super) limited: u16,
}

impl Slot {
    /// Counts a call in `window`, aging the counts by the windows since the last.
    pub(super) fn touch(&mut self, window: u16) {
        let since = window.wrapping_sub(self.window);
        self.busy = self.aged(window).saturating_add(1);
        match since {
            0 => {}
            1 => self.passed_before = std::mem::take(&mut self.passed),
            _ => (self.passed, self.passed_before) = (0, 0),
        }
        self.window = window;
    }

    /// How busy the key is, as of `window`.
    pub(super) fn aged(&self, window: u16) -> u16 {
        let since = window.wrapping_sub(self.window);
        self.busy.checked_shr(u32::from(since)).unwrap_or(0)
    }

    /// Whether the key was refused in `window` or the one before (then it keeps its place).
    pub(super) fn protected(&self, window: u16) -> bool {
        self.limited != 0 && window.wrapping_sub(self.limited.wrapping_sub(1)) <= 1
    }

    /// Its passes as of `window`: (in `window`, in the one before).
    pub(super) fn passes(&self, window: u16) -> (u64, u64) {
        match window.wrapping_sub(self.window) {
            0 => (u64::from(self.passed), u64::from(self.passed_before)),
            1 => (0, u64::from(self.passed)),
            _ => (0, 0),
        }
    }
}

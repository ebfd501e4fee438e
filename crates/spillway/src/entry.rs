//! The entry path: ask to run, get an [`Entry`] (or a [`BlockError`](crate::BlockError)), and
//! the entry records the outcome when it ends.

mod builder;
mod caller_wait;
mod flow_check;
mod gate_check;
mod guard;
mod held;
mod owned;
mod pending;
mod pipeline;
mod places;
mod quotas;
mod refusal;
mod traffic;
mod waiting;

pub use builder::EntryBuilder;
pub use guard::Entry;
pub use owned::OwnedEntry;
pub use pending::{OwnedPending, Pending};
pub use traffic::TrafficType;
pub use waiting::{Admission, OwnedAdmission, OwnedWaiting, Waiting};

pub use caller_wait::paced_by_caller;
pub(crate) use caller_wait::CallerTime;
pub(crate) use guard::EntryState;

/// The entry's layout, which the comments on its fields keep: an entry is returned and held by
/// value on every call, so a word more is a copy more on every entry.
#[cfg(all(test, target_pointer_width = "64"))]
mod layout {
    use std::mem::size_of;

    #[test]
    fn an_entrys_state_is_four_words_and_an_entry_five() {
        assert_eq!(size_of::<super::EntryState>(), 4 * 8);
        assert_eq!(size_of::<super::Entry<'static>>(), 5 * 8);
    }

    #[test]
    fn a_gate_stop_is_two_words() {
        assert_eq!(size_of::<super::gate_check::GateStop>(), 2 * 8);
    }
}

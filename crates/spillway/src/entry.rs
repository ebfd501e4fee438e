//! The entry path: ask to run, get an [`Entry`] (or a [`BlockError`](crate::BlockError)), and
//! the entry records the outcome when it ends.

mod builder;
mod check;
mod guard;
mod owned;
mod pending;
mod places;
mod traffic;

pub use builder::{Admission, EntryBuilder, OwnedAdmission};
pub use guard::Entry;
pub use owned::OwnedEntry;
pub use pending::{OwnedPending, Pending};
pub use traffic::TrafficType;

pub(crate) use check::{MAX_COUNTED, MAX_QUEUED};
pub(crate) use guard::EntryState;

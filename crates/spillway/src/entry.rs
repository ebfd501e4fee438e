//! The entry path: ask to run, get an [`Entry`] (or a [`BlockError`](crate::BlockError)), and
//! the entry records the outcome when it ends.

mod builder;
mod flow_check;
mod gate_check;
mod guard;
mod held;
mod later;
mod owned;
mod pending;
mod pipeline;
mod places;
mod refusal;
mod traffic;
mod waiting;

pub use builder::EntryBuilder;
pub use guard::Entry;
pub use owned::OwnedEntry;
pub use pending::{OwnedPending, Pending};
pub use traffic::TrafficType;
pub use waiting::{Admission, OwnedAdmission, OwnedWaiting, Waiting};

pub(crate) use guard::EntryState;

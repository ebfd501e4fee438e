//! System rules on a manual clock with a manual probe, and the Linux probe on fixture files.

mod checks;
mod estimates;
mod linux;
mod rules;

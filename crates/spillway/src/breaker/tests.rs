//! Breakers on a manual clock: every strategy through its states, the sliding window, and
//! half-open probes that are refused, abandoned or lost.

mod probes;
mod rules;
mod strategies;

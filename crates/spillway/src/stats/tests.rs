//! Model-checked tests of the lock-free statistics (run with `RUSTFLAGS="--cfg spillway_loom"`).

mod loom_in_flight;
mod loom_striped;
mod loom_window;

//! Model-checked tests of the lock-free statistics (run with `RUSTFLAGS="--cfg spillway_loom"`).

mod loom_gauge;
mod loom_striped;
mod loom_window;

//! Model-checked reads of a resource's gate (run with `RUSTFLAGS="--cfg spillway_loom"`): a
//! read that races a reload sees the old rules, the new ones or nothing, never a mix.

use super::gate::{DirectGate, GateRule, GateRules};
use loom::sync::Arc;
use loom::thread;

fn rules(count: f64, ring: u8, id: u32, len: usize) -> GateRules {
    let rule = GateRule {
        count,
        whole_count: count as u64,
        ring,
        id,
    };
    GateRules::new(&vec![rule; len]).unwrap()
}

#[test]
fn loom_a_read_racing_a_reload_sees_one_version_or_none() {
    loom::model(|| {
        let old = rules(1.0, 0, 1, 1);
        let new = rules(2.0, 1, 2, 2);
        let gate = Arc::new(DirectGate::new());
        gate.publish(Some(&old));
        let writer = {
            let gate = gate.clone();
            thread::spawn(move || gate.publish(Some(&new)))
        };
        let seen = gate.read();
        assert!(
            seen.is_none() || seen == Some(old) || seen == Some(new),
            "a torn read: {seen:?}"
        );
        writer.join().unwrap();
        assert_eq!(gate.read(), Some(new));
    });
}

#[test]
fn loom_a_read_racing_a_close_sees_the_rules_or_none() {
    loom::model(|| {
        let old = rules(3.0, 2, 3, 1);
        let gate = Arc::new(DirectGate::new());
        gate.publish(Some(&old));
        let writer = {
            let gate = gate.clone();
            thread::spawn(move || gate.publish(None))
        };
        let seen = gate.read();
        assert!(seen.is_none() || seen == Some(old), "a torn read: {seen:?}");
        writer.join().unwrap();
        assert_eq!(gate.read(), None);
    });
}

//! The kinds' list: flags, marks and slots.

use super::*;

/// Each kind's own bit: a kind never reads another's flag.
#[test]
fn every_kind_has_its_own_bit() {
    for (i, a) in FLAGS.iter().enumerate() {
        assert_eq!(a.count_ones(), 1);
        for b in &FLAGS[i + 1..] {
            assert_eq!(a & b, 0);
        }
    }
}

/// The kinds that keep something until the exit each have their own mark, in the entry's
/// high four bits, clear of the system and flow rules' places.
#[test]
fn every_keeping_step_has_its_own_mark_above_the_places() {
    let marks: Vec<u8> = (CLUSTER..BREAKERS).map(mark).collect();
    for (i, a) in marks.iter().enumerate() {
        assert_eq!((a.count_ones(), a & crate::step::PLACES), (1, 0));
        for b in &marks[i + 1..] {
            assert_eq!(a & b, 0);
        }
    }
    assert!(std::mem::size_of::<Kept>() <= 6 && std::mem::align_of::<Kept>() <= 2);
}

/// A breaker counts every completion of its resource; no other kind needs every exit.
#[test]
fn only_breakers_see_every_exit() {
    assert_eq!(EVERY_EXIT, ResourceBreakers::FLAG);
    let slots = Slots::default();
    slots.set::<InstalledAdaptive>(None);
    assert!(!slots.sees_every_exit());
    slots.set::<ResourceBreakers>(Some(Arc::new(ResourceBreakers {
        breakers: Vec::new(),
    })));
    assert!(slots.sees_every_exit());
}

#[test]
fn setting_a_kind_sets_its_flag_and_clearing_clears_it() {
    let slots = Slots::default();
    assert!(!slots.any());
    slots.set::<ResourceCluster>(Some(Arc::default()));
    assert!(slots.has::<ResourceCluster>() && !slots.has::<ResourceKeyed>());
    assert!(slots.load::<ResourceCluster>().is_some());
    slots.set::<ResourceCluster>(None);
    assert!(!slots.any() && slots.load::<ResourceCluster>().is_none());
}

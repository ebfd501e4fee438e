//! The per-key rules' step, after the cluster rules, for an entry with keys: each rule whose
//! key the entry has checks it, all or nothing; a concurrency rule keeps the key's call in
//! flight until the entry ends.

use super::rule_set::InstalledKeyed;
use super::{Keys, ResourceKeyed};
use crate::block::{BlockError, BlockKind};
use crate::flow::{Decision, Grade};
use crate::step::{At, End, Step, Stop};
use std::sync::Arc;
use std::time::Duration;

/// What an entry's per-key rules took: the keys, the rules' bits (by position on the
/// resource), the count, which of them hold a call in flight until the entry ends (and the
/// digest of their key), and the longest wait a pacing rule queued the entry for. Given back
/// through the resource's rules as installed then (as cluster passes are).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Taken {
    keys: Keys,
    digest: u32,
    rules: u8,
    count: u32,
    until_exit: u8,
    /// The longest wait a pacing rule queued the entry for.
    wait: Duration,
}

/// What an entry keeps until it ends: the concurrency rules' bits and the digest of their key,
/// in five bytes (an entry's state is four words).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Kept {
    rules: u8,
    digest: [u8; 4],
}

impl Step for ResourceKeyed {
    type Taken = Taken;
    type Kept = Kept;

    #[inline(always)]
    fn applies(at: &At) -> bool {
        at.keys.any()
    }

    /// Checks `count` for the entry's keys against every rule in order; at the first refusal,
    /// gives back what the earlier ones took.
    fn take(this: &Arc<Self>, at: &At, taken: &mut Taken) -> Result<(), Stop> {
        taken.keys = at.keys;
        taken.count = at.count;
        for (bit, installed) in this.rules.iter().enumerate() {
            // A rule whose key the entry does not have does not apply.
            let Some(key) = at.keys.get(installed.rule.param) else {
                continue;
            };
            if installed.rule.grade == Grade::Concurrency {
                // Validation keeps a resource's concurrency rules on one position.
                taken.digest = super::digest(key);
            }
            match installed.limiter.check(key, at.count, at.now) {
                Decision::Block => {
                    this.give_back(taken);
                    *taken = Taken::default();
                    return Err(Stop::Refused(blocked(at.resource, installed, key)));
                }
                decision => {
                    if let Decision::Wait(wait) = decision {
                        taken.wait = taken.wait.max(wait);
                    }
                    taken.rules |= 1 << bit;
                    taken.until_exit = taken.rules & this.until_exit;
                }
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn wait(taken: &Taken) -> Option<Duration> {
        Some(taken.wait)
    }

    fn holds(taken: &Taken) -> bool {
        taken.rules != 0
    }

    /// Gives back what `taken` says: a reject rule's tokens, a concurrency rule's call in
    /// flight. (A pacing rule's place in a key's schedule is not given back: the key waits a
    /// little longer next time, never less.)
    fn give_back(&self, taken: &Taken) {
        for (bit, installed) in self.rules.iter().enumerate() {
            if taken.rules & (1 << bit) != 0 {
                if let Some(key) = taken.keys.get(installed.rule.param) {
                    installed.limiter.give_back(key, taken.count);
                }
            }
        }
    }

    fn keep(taken: &Taken) -> Option<Kept> {
        (taken.until_exit != 0).then_some(Kept {
            rules: taken.until_exit,
            digest: taken.digest.to_le_bytes(),
        })
    }

    /// The entry's calls in flight under the concurrency rules it kept end.
    fn exit(&self, kept: Kept, _end: &End) {
        let digest = u32::from_le_bytes(kept.digest);
        for (bit, installed) in self.rules.iter().enumerate() {
            if kept.rules & (1 << bit) != 0 {
                installed.limiter.exit_digest(digest);
            }
        }
    }
}

/// The block of a refusal by `installed` of the key `key`: a QPS rule's with its window as
/// the time to retry after, a concurrency rule's with none (a place frees when a call ends).
/// The threshold is the key's limit (its exception's, if it has one).
#[cold]
#[inline(never)]
fn blocked(resource_number: u32, installed: &InstalledKeyed, key: u64) -> BlockError {
    let limit = installed.limiter.key_limit(key) as f64;
    let error = BlockError::new(
        BlockKind::Keyed,
        resource_number,
        // The key's count is not read again for the error: observed is the limit.
        limit,
        limit,
    )
    .with_rule(installed.id_number);
    match installed.rule.grade {
        crate::flow::Grade::Qps => error.with_retry_after(installed.rule.duration),
        crate::flow::Grade::Concurrency => error,
    }
}

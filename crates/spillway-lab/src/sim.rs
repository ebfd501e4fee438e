//! The discrete-event simulation: open-loop clients, spillway's entry path, a service with a
//! fixed number of workers.
//!
//! Every attempt goes through the real entry path (`try_enter_owned` on an inbound entry) on a
//! [`ManualClock`] set to the event's time; an admitted attempt holds its entry until its work is
//! done, so spillway records its RT and in-flight count as it would in a service.

use crate::arrivals::{Arrival, Arrivals, Spacing};
use crate::events::{Agenda, Event};
use crate::load_average::{LoadAverage, LOAD_PERIOD_NANOS};
use crate::mix::{group_name, Claim, Mix};
use crate::mix_result::{group_results, ClaimedAttempt, MixResult};
use crate::params::{LabError, LabParams, RetryPolicy};
use crate::record::{
    nanos, AttemptRecord, Outcome, RunRecord, RunResult, Tick, Traced, BUCKET_NANOS,
};
use crate::scenario::Scenario;
use crate::strategy::{Protection, Strategy, SENTINEL_LOAD_PER_CORE};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spillway::system::SystemProbe;
use spillway::{ManualClock, OwnedAdmission, OwnedEntry, OwnedPending, OwnedWaiting};
use std::collections::VecDeque;
use std::hash::BuildHasher as _;
use std::time::Duration;

/// Where the simulated clock starts (any time works; this one reads well in nanoseconds).
const EPOCH_NANOS: u64 = 1_700_000_000_000_000_000;
/// The random stream of retry jitter (arrivals and work draw from theirs, claims from theirs:
/// see [`Arrivals`]).
const RETRY_STREAM: u64 = 2;
/// The random stream of the factors a service's spread draws ([`LabParams::service_spread`]).
const SPREAD_STREAM: u64 = 4;
/// How often the probe reads load1, as Sentinel's `SystemStatusListener` does.
const PROBE_PERIOD_NANOS: u64 = 1_000_000_000;

/// One request a client wants answered.
#[derive(Debug)]
struct Request {
    /// Its work in ns, before any slowdown; the same for every attempt.
    work: u64,
    /// Attempts sent so far.
    attempts: u32,
    /// What it claims.
    claim: Claim,
}

/// An attempt, and the request it belongs to.
#[derive(Debug)]
struct Attempt {
    request: u32,
    record: AttemptRecord,
}

/// One run of one strategy in one scenario.
pub(crate) struct Run<'p> {
    params: &'p LabParams,
    scenario: Scenario,
    strategy: Strategy,
    clock: ManualClock,
    protection: Protection,
    agenda: Agenda,
    /// The requests to come (identical for every strategy).
    arrivals: Arrivals,
    /// The next of them, scheduled.
    next_arrival: Option<Arrival>,
    jitter: ChaCha8Rng,
    /// The service's spread and the factors it draws, if it has one.
    spread: Option<(f64, ChaCha8Rng)>,
    requests: Vec<Request>,
    attempts: Vec<Attempt>,
    /// Admitted attempts waiting for a worker, in order (a static split's admission over the
    /// limit holds no entry).
    queue: VecDeque<(u32, Option<OwnedEntry>)>,
    /// What each worker holds.
    workers: Vec<Option<(u32, Option<OwnedEntry>)>>,
    idle: Vec<u32>,
    /// Paced admissions, by attempt.
    paced: Vec<(u32, OwnedPending)>,
    /// Attempts waiting in the adaptive limit's queue, by attempt.
    waiting: Vec<(u32, OwnedWaiting)>,
    /// Requests whose client still waits or will retry.
    open_requests: u64,
    load: LoadAverage,
    ticks: Vec<Tick>,
    arrivals_end: u64,
    /// Each attempt's client's timeout: the scenario's deadline, if it has one.
    client_timeout: u64,
    /// A static split's places held by each group now, and its shares.
    split: Option<(Vec<u32>, Vec<f64>)>,
    /// Attempts whose work started after their client gave up.
    wasted: u64,
}

impl<'p> Run<'p> {
    pub(crate) fn new(
        params: &'p LabParams,
        scenario: Scenario,
        strategy: Strategy,
    ) -> Result<Self, LabError> {
        params.validate()?;
        scenario.validate()?;
        let clock = ManualClock::starting_at_nanos(EPOCH_NANOS);
        let protection = strategy.build(params, &clock)?;
        let arrivals = Arrivals::new(params, scenario, Spacing::Poisson)?;
        let mut jitter = ChaCha8Rng::seed_from_u64(params.seed);
        jitter.set_stream(RETRY_STREAM);
        let spread = (params.service_spread > 0.0).then(|| {
            let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
            rng.set_stream(SPREAD_STREAM);
            (params.service_spread, rng)
        });
        let workers = params.workers;
        Ok(Self {
            params,
            scenario,
            strategy,
            clock,
            protection,
            agenda: Agenda::default(),
            arrivals,
            next_arrival: None,
            jitter,
            spread,
            requests: Vec::new(),
            attempts: Vec::new(),
            queue: VecDeque::new(),
            workers: (0..workers).map(|_| None).collect(),
            idle: (0..workers).rev().collect(),
            paced: Vec::new(),
            waiting: Vec::new(),
            open_requests: 0,
            load: LoadAverage::default(),
            ticks: Vec::new(),
            arrivals_end: nanos(scenario.arrivals_end(params)),
            client_timeout: nanos(
                scenario
                    .mix()
                    .and_then(Mix::deadline)
                    .unwrap_or(params.client_timeout),
            ),
            split: match (strategy, scenario.mix()) {
                (Strategy::StaticSplit, Some(mix)) => {
                    let shares = Strategy::split_shares(mix);
                    Some((vec![0; shares.len()], shares))
                }
                _ => None,
            },
            wasted: 0,
        })
    }

    /// Runs until every client has its final answer, and measures.
    pub(crate) fn run(mut self) -> RunResult {
        let end = self.drive();
        self.summarize(end)
    }

    /// Runs until every client has its final answer, and measures, group by group.
    pub(crate) fn run_mix(mut self) -> MixResult {
        let end = self.drive();
        let run = self.summarize(end);
        let mix = self.scenario.mix().unwrap_or(Mix::Deadlines);
        let attempts: Vec<ClaimedAttempt> = (self.attempts.iter())
            .map(|attempt| ClaimedAttempt {
                record: attempt.record,
                request: attempt.request as usize,
                claim: self.requests[attempt.request as usize].claim,
            })
            .collect();
        let groups = group_results(mix, self.params, self.scenario, &attempts, end);
        let baseline = (self.protection.spillway)
            .adaptive_state(crate::strategy::ADAPTIVE_RULE)
            .and_then(|state| state.estimates.baseline);
        MixResult {
            run,
            groups,
            wasted: self.wasted,
            baseline_rtt_ms: baseline.map(|rtt| rtt.as_secs_f64() * 1e3),
        }
    }

    /// Runs until every client has its final answer, and measures, with the run's time series
    /// whatever its scenario.
    pub(crate) fn run_traced(mut self) -> Traced {
        let end = self.drive();
        let attempts: Vec<AttemptRecord> = self.attempts.iter().map(|a| a.record).collect();
        self.record(&attempts, end).traced()
    }

    /// The run's numbers, all requests together.
    fn summarize(&self, end: u64) -> RunResult {
        let attempts: Vec<AttemptRecord> = self.attempts.iter().map(|a| a.record).collect();
        self.record(&attempts, end).summarize()
    }

    /// What the run saw, with `attempts` its attempts' records, ended at `end`.
    fn record<'a>(&'a self, attempts: &'a [AttemptRecord], end: u64) -> RunRecord<'a> {
        RunRecord {
            params: self.params,
            scenario: self.scenario,
            strategy: self.strategy,
            attempts,
            ticks: &self.ticks,
            end,
            skipped: 0,
        }
    }

    /// Plays every event until every client has its final answer: when the last happened.
    fn drive(&mut self) -> u64 {
        self.schedule_arrival();
        self.agenda.schedule(0, Event::Tick);
        let mut end = 0;
        while let Some((at, event)) = self.agenda.pop() {
            if at >= self.arrivals_end && self.open_requests == 0 {
                break;
            }
            end = at;
            self.clock.set_nanos(EPOCH_NANOS + at);
            match event {
                Event::Arrival => self.arrive(at),
                Event::Send { request } => self.send(at, request),
                Event::Timeout { attempt } => self.time_out(at, attempt),
                Event::Admit { attempt } => self.admit_paced(at, attempt),
                Event::QueueTimeout { attempt } => self.stop_waiting(at, attempt),
                Event::Complete { worker } => self.complete(at, worker),
                Event::Tick => self.tick(at),
            }
        }
        end
    }

    /// Schedules the next request's arrival, if one comes.
    fn schedule_arrival(&mut self) {
        self.next_arrival = self.arrivals.next();
        if let Some(next) = self.next_arrival {
            self.agenda.schedule(nanos(next.at), Event::Arrival);
        }
    }

    fn arrive(&mut self, at: u64) {
        let work = self.next_arrival.map_or(0, |arrival| nanos(arrival.work));
        let claim = self
            .next_arrival
            .map_or_else(Claim::default, |arrival| arrival.claim);
        let request = u32::try_from(self.requests.len()).unwrap_or(u32::MAX);
        self.requests.push(Request {
            work,
            attempts: 0,
            claim,
        });
        self.open_requests += 1;
        self.send(at, request);
        self.schedule_arrival();
    }

    fn send(&mut self, at: u64, request: u32) {
        let attempt = u32::try_from(self.attempts.len()).unwrap_or(u32::MAX);
        self.requests[request as usize].attempts += 1;
        let first = self.requests[request as usize].attempts == 1;
        let claim = self.requests[request as usize].claim;
        let mut entry = self.protection.resource.entry().inbound();
        if self.strategy == Strategy::Classes {
            // A fixed hash, so that the same seed gives the same numbers in every process.
            let tenant = FIXED_HASH.hash_one(claim.tenant);
            entry = entry.criticality(claim.class).tenant_fingerprint(tenant);
            if let Some(deadline) = self.scenario.mix().and_then(Mix::deadline) {
                entry = entry.deadline(deadline);
            }
        }
        // A static split decides itself; spillway's entry, when it gives one, times the call.
        let split = self.split_decides(claim);
        let admission = match split {
            Some(false) => Err(()),
            _ => entry.try_enter_owned().map_err(drop),
        };
        let mut record = Attempt {
            request,
            record: AttemptRecord {
                sent: at,
                first,
                outcome: None,
                admitted: false,
                ended: None,
            },
        };
        let over_limit = admission.is_err() && split == Some(true);
        match admission {
            Ok(OwnedAdmission::Ready(entry)) => {
                record.record.admitted = true;
                self.attempts.push(record);
                self.split_take(claim);
                self.start_or_queue(at, attempt, Some(entry));
            }
            // A static split admits a request of a group under its share over the limit.
            Err(_) if over_limit => {
                record.record.admitted = true;
                self.attempts.push(record);
                self.split_take(claim);
                self.start_or_queue(at, attempt, None);
            }
            Ok(OwnedAdmission::Queued(pending)) => {
                record.record.admitted = true;
                self.attempts.push(record);
                self.agenda
                    .schedule(at + nanos(pending.wait()), Event::Admit { attempt });
                self.paced.push((attempt, pending));
            }
            Ok(OwnedAdmission::Waiting(waiting)) => {
                // Not refused: counted as admitted unless it waits the queue's timeout out (the
                // loopback lab's clients cannot tell a wait from work either).
                record.record.admitted = true;
                self.attempts.push(record);
                self.agenda.schedule(
                    at + nanos(waiting.timeout()),
                    Event::QueueTimeout { attempt },
                );
                self.waiting.push((attempt, waiting));
            }
            Err(_) => {
                record.record.outcome = Some(Outcome::Refused);
                self.attempts.push(record);
                self.retry_or_give_up(at, request);
                return;
            }
        }
        self.agenda
            .schedule(at + self.client_timeout, Event::Timeout { attempt });
        // Joining may have handed it a place freed meanwhile, or refused a waiter it took the
        // place of: both are told at once, as the binary's waiters are woken.
        self.admit_granted(at);
    }

    /// The group of `claim` in a static split, if the run has one.
    fn split_group(&self, claim: Claim) -> Option<usize> {
        let mix = self.scenario.mix()?;
        let name = group_name(mix, claim);
        mix.shares().iter().position(|(group, _)| *group == name)
    }

    /// Whether a static split admits a request of `claim` (`None`: the run has none), as
    /// Netflix's partitioned limiter does: any while the calls it admitted are fewer than the
    /// limit; at or over it, one whose group holds fewer than `max(1, ceil(limit x share))`.
    fn split_decides(&self, claim: Claim) -> Option<bool> {
        let (busy, shares) = self.split.as_ref()?;
        let group = self.split_group(claim)?;
        let limit = self.limit().unwrap_or(1.0);
        let in_flight: u32 = busy.iter().sum();
        let share = (limit * shares[group]).ceil().max(1.0);
        Some(f64::from(in_flight) < limit || f64::from(busy[group]) < share)
    }

    /// A static split's group of `claim` takes a place.
    fn split_take(&mut self, claim: Claim) {
        if let Some(group) = self.split_group(claim) {
            if let Some((busy, _)) = &mut self.split {
                busy[group] += 1;
            }
        }
    }

    /// A static split's group of `claim` gives a place back.
    fn split_give_back(&mut self, claim: Claim) {
        if let Some(group) = self.split_group(claim) {
            if let Some((busy, _)) = &mut self.split {
                busy[group] = busy[group].saturating_sub(1);
            }
        }
    }

    fn admit_paced(&mut self, at: u64, attempt: u32) {
        let Some(index) = self.paced.iter().position(|(a, _)| *a == attempt) else {
            return; // its client left, and the slot was given back
        };
        let (_, pending) = self.paced.swap_remove(index);
        self.start_or_queue(at, attempt, Some(pending.enter()));
    }

    /// Admits every waiting attempt a freed place was handed to, and refuses at once every one
    /// the queue refused (another took its place, or its deadline could no longer be met), as
    /// the binary wakes them, rather than at its own timer.
    fn admit_granted(&mut self, at: u64) {
        while let Some(index) = self
            .waiting
            .iter()
            .position(|(_, w)| w.is_granted() || w.is_refused())
        {
            let (attempt, waiting) = self.waiting.swap_remove(index);
            self.resume(at, attempt, waiting);
        }
    }

    /// Goes on with a waiting attempt: admitted once granted, else refused.
    fn resume(&mut self, at: u64, attempt: u32, waiting: OwnedWaiting) {
        let admission = if waiting.is_granted() {
            waiting.resume()
        } else {
            Err(waiting.give_up())
        };
        match admission {
            Ok(OwnedAdmission::Ready(entry)) => self.start_or_queue(at, attempt, Some(entry)),
            // Nothing after the adaptive limit paces or waits again in the lab's strategies.
            Ok(_) | Err(_) => {
                let Attempt { request, record } = &mut self.attempts[attempt as usize];
                if record.outcome.is_none() {
                    record.admitted = false;
                    record.outcome = Some(Outcome::Refused);
                    let request = *request;
                    self.retry_or_give_up(at, request);
                }
            }
        }
    }

    /// Attempt `attempt` has waited the queue's timeout out (unless it was admitted first).
    fn stop_waiting(&mut self, at: u64, attempt: u32) {
        if let Some(index) = self.waiting.iter().position(|(a, _)| *a == attempt) {
            let (attempt, waiting) = self.waiting.swap_remove(index);
            self.resume(at, attempt, waiting);
        }
        self.admit_granted(at);
    }

    fn start_or_queue(&mut self, at: u64, attempt: u32, entry: Option<OwnedEntry>) {
        match self.idle.pop() {
            Some(worker) => self.start(at, worker, attempt, entry),
            None => self.queue.push_back((attempt, entry)),
        }
    }

    fn start(&mut self, at: u64, worker: u32, attempt: u32, entry: Option<OwnedEntry>) {
        let request = self.attempts[attempt as usize].request as usize;
        if self.attempts[attempt as usize].record.outcome == Some(Outcome::TimedOut) {
            self.wasted += 1;
        }
        let factor = self.scenario.slowdown_at(Duration::from_nanos(at));
        let mut work = self.requests[request].work as f64 * factor;
        if let Some((spread, rng)) = &mut self.spread {
            work *= 1.0 + *spread * (2.0 * rng.random::<f64>() - 1.0);
        }
        // At least 1 µs, as every drawn time.
        let work = (work as u64).max(1_000);
        self.workers[worker as usize] = Some((attempt, entry));
        self.agenda.schedule(at + work, Event::Complete { worker });
    }

    fn complete(&mut self, at: u64, worker: u32) {
        let Some((attempt, entry)) = self.workers[worker as usize].take() else {
            return;
        };
        drop(entry); // spillway records the RT and the exit at `at`, and hands its place on
        let request = self.attempts[attempt as usize].request as usize;
        self.split_give_back(self.requests[request].claim);
        self.admit_granted(at);
        let record = &mut self.attempts[attempt as usize].record;
        record.ended = Some(at);
        if record.outcome.is_none() {
            record.outcome = Some(Outcome::Answered);
            self.open_requests -= 1;
        }
        match self.queue.pop_front() {
            Some((next, entry)) => self.start(at, worker, next, entry),
            None => self.idle.push(worker),
        }
    }

    fn time_out(&mut self, at: u64, attempt: u32) {
        let Attempt { request, record } = &mut self.attempts[attempt as usize];
        if record.outcome.is_some() {
            return;
        }
        record.outcome = Some(Outcome::TimedOut);
        let request = *request;
        // A paced attempt not yet admitted gives its slot back; work already admitted goes on.
        if let Some(index) = self.paced.iter().position(|(a, _)| *a == attempt) {
            drop(self.paced.swap_remove(index));
        }
        // So does one waiting for a place; it counts with its wait.
        if let Some(index) = self.waiting.iter().position(|(a, _)| *a == attempt) {
            drop(self.waiting.swap_remove(index));
            self.attempts[attempt as usize].record.ended = Some(at);
        }
        // A place it gave back goes to the next waiting attempt.
        self.admit_granted(at);
        self.retry_or_give_up(at, request);
    }

    fn retry_or_give_up(&mut self, at: u64, request: u32) {
        let sent = self.requests[request as usize].attempts;
        match self.params.retry {
            RetryPolicy::Backoff { retries, backoff } if sent <= retries => {
                let base = backoff.as_nanos() as f64 * f64::from(1u32 << (sent - 1).min(20));
                let wait = base * self.jitter.random_range(0.5..=1.0);
                self.agenda
                    .schedule(at + wait as u64, Event::Send { request });
            }
            _ => self.open_requests -= 1,
        }
    }

    /// Samples the time series; feeds load1 to the probe as Sentinel reads it.
    fn tick(&mut self, at: u64) {
        let in_flight = self.in_service();
        if at > 0 && at % LOAD_PERIOD_NANOS == 0 {
            self.load.update(in_flight);
        }
        if self.protection.reads_load && at % PROBE_PERIOD_NANOS == 0 {
            self.protection.probe.set_load(self.load.value());
        }
        let limit = self.limit();
        let rtt = self.strategy.rtt_estimates(&self.protection.spillway);
        self.ticks.push(Tick {
            at,
            in_flight,
            limit,
            rtt,
        });
        if at < self.arrivals_end || self.open_requests > 0 {
            self.agenda.schedule(at + BUCKET_NANOS, Event::Tick);
        }
    }

    /// Requests in the service: in work, queued, or in a paced wait (each one a thread).
    fn in_service(&self) -> u64 {
        let working = self.workers.iter().filter(|w| w.is_some()).count();
        (working + self.queue.len() + self.paced.len()) as u64
    }

    /// The concurrency the protection admits now, where it has one.
    fn limit(&self) -> Option<f64> {
        let threshold = SENTINEL_LOAD_PER_CORE * f64::from(self.params.workers);
        let gate_open = self.protection.probe.load() > threshold;
        self.strategy
            .admitted_limit(self.params, &self.protection.spillway, gate_open)
    }
}

/// The tenants' hash: fixed (the seed earlier versions gave every key's fingerprint), where a
/// fingerprint's seed is random per process.
const FIXED_HASH: foldhash::quality::FixedState =
    foldhash::quality::FixedState::with_seed(0x5350_494c_4c57_4159);

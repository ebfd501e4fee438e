//! The scenarios with claims (criticality, tenants, deadlines): each strategy's targets at
//! every load, and docs/overload.md's tables, which this run must reproduce exactly (the
//! simulation is deterministic).

use spillway::adaptive::EnvoyGradientConfig;
use spillway_lab::mix::Mix;
use spillway_lab::mix_report::{mix_markdown, queue_for, run_mix_lab, MixReport};
use spillway_lab::{simulate_mix, LabParams, Scenario, Strategy};

fn report() -> MixReport {
    run_mix_lab(&LabParams::default().quick()).unwrap()
}

fn run<'a>(
    report: &'a MixReport,
    scenario: &str,
    load: f64,
    strategy: Strategy,
) -> &'a spillway_lab::mix_report::MixRun {
    report
        .runs
        .iter()
        .find(|r| r.scenario == scenario && r.load == load && r.strategy == strategy.name())
        .unwrap()
}

#[test]
fn classes_meet_their_targets_where_the_others_do_not_and_the_docs_say_so() {
    let report = report();
    // Criticality at every load to 10x; fairness at 2x: the criticality queue meets them.
    for r in report.runs.iter().filter(|r| r.strategy == "classes") {
        if r.scenario != "deadlines" {
            assert_ne!(r.meets_target, Some(false), "{} at {}x", r.scenario, r.load);
        }
    }
    // Without classes every class is shed alike; a static split keeps some of critical's share.
    let mixed = |strategy| run(&report, "mixed_criticality", 3.0, strategy);
    let critical = |strategy| mixed(strategy).result.groups[0].served;
    assert!(
        critical(Strategy::NoClasses) < 0.5,
        "{}",
        critical(Strategy::NoClasses)
    );
    assert!(critical(Strategy::StaticSplit) < 0.9);
    assert!(critical(Strategy::Classes) > 0.99);
    // Default before sheddable.
    let classes = &mixed(Strategy::Classes).result.groups;
    assert!(classes[1].served > 10.0 * classes[2].served, "{classes:?}");
    // A noisy tenant: every quiet one served, the noisy one the rest.
    let noisy = run(&report, "noisy_tenant", 2.0, Strategy::Classes);
    assert!(noisy.result.groups[1..].iter().all(|t| t.served >= 0.95));
    assert!(run(&report, "noisy_tenant", 2.0, Strategy::NoClasses).meets_target == Some(false));
    // Deadlines: no work starts after its deadline, at no cost in goodput.
    let deadlines = run(&report, "deadlines", 3.0, Strategy::Classes);
    assert_eq!(deadlines.result.wasted, 0);
    assert_eq!(deadlines.meets_target, Some(true));
    // docs/overload.md has these very tables.
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/overload.md"
    ))
    .unwrap();
    let tables = mix_markdown(&report);
    assert!(
        docs.contains(&tables),
        "docs/overload.md's tables differ from this run's:\n{tables}"
    );
}

#[test]
fn with_deadlines_an_oldest_first_queue_wastes_the_service() {
    // What mix_intro.md says of the deadlines scenario with the oldest waiter first.
    let params = LabParams {
        adaptive_queue: Some(spillway::adaptive::AdaptiveQueue::default()),
        ..LabParams::default().quick()
    };
    let scenario = Scenario::Mix {
        load: 3.0,
        mix: Mix::Deadlines,
    };
    let run = simulate_mix(&params, scenario, Strategy::NoClasses).unwrap();
    assert!(run.run.goodput < 0.5, "{}", run.run.goodput);
    assert!(run.wasted > 1_000, "{}", run.wasted);
}

#[test]
fn a_scenario_without_claims_is_refused_by_simulate_mix() {
    let params = LabParams::default().quick();
    let err = simulate_mix(&params, Scenario::Sweep { load: 1.0 }, Strategy::Classes).unwrap_err();
    assert!(err.to_string().contains("has no mix"), "{err}");
    // And every mix runs every strategy.
    for mix in Mix::ALL {
        for strategy in Strategy::CLASSES {
            let short = LabParams {
                measure: std::time::Duration::from_secs(1),
                ..params.clone()
            };
            let run = simulate_mix(&short, Scenario::Mix { load: 1.0, mix }, strategy).unwrap();
            assert_eq!(run.groups.len(), mix.shares().len());
        }
    }
}

#[test]
fn with_deadlines_classes_lag_on_seed_1_for_envoy_s_baseline_not_for_the_claims() {
    // What mix_intro.md says of `classes` answering fewer in time than `no_classes` at 2x and 10x.
    let runs = |seed, load| {
        let params = LabParams {
            adaptive_queue: Some(queue_for(Mix::Deadlines)),
            seed,
            ..LabParams::default().quick()
        };
        let scenario = Scenario::Mix {
            load,
            mix: Mix::Deadlines,
        };
        let no_classes = simulate_mix(&params, scenario, Strategy::NoClasses).unwrap();
        let classes = simulate_mix(&params, scenario, Strategy::Classes).unwrap();
        (no_classes, classes)
    };
    // Seed 1: the first minRTT window measured 4.2 ms for `classes` against 5.6 ms at 2x (4.7
    // against 7.1 at 10x), and Envoy's controller keeps it for the whole run.
    for (load, base_no, base_cl, lag) in [(2.0, 5.6, 4.2, 0.1), (10.0, 7.1, 4.7, 0.08)] {
        let (no_classes, classes) = runs(1, load);
        let baseline = |run: &spillway_lab::mix_result::MixResult| run.baseline_rtt_ms.unwrap();
        assert!((baseline(&no_classes) - base_no).abs() < 0.05, "{load}x");
        assert!((baseline(&classes) - base_cl).abs() < 0.05, "{load}x");
        let behind = no_classes.run.goodput - classes.run.goodput;
        assert!(behind > lag, "{load}x: {behind}");
    }
    // Seeds 2 to 6: within 0.035 either way.
    for load in [2.0, 5.0, 10.0] {
        for seed in 2..=6 {
            let (no_classes, classes) = runs(seed, load);
            let diff = classes.run.goodput - no_classes.run.goodput;
            assert!(diff.abs() <= 0.035, "seed {seed} at {load}x: {diff}");
        }
    }
}

/// What docs/config.md says of `start_limit` in these scenarios, overloaded and queued from
/// their first instant: with an open start at 50, classes miss 3 of their 8 targets on seed 1,
/// where Envoy's start misses none (the first test).
#[test]
fn an_open_start_misses_targets_in_scenarios_overloaded_from_their_start() {
    let open = run_mix_lab(&LabParams {
        envoy: EnvoyGradientConfig {
            start_limit: 50,
            ..Default::default()
        },
        ..LabParams::default().quick()
    })
    .unwrap();
    let misses = open
        .runs
        .iter()
        .filter(|r| r.strategy == "classes" && r.meets_target == Some(false))
        .count();
    assert_eq!(misses, 3);
}

use spillway_lab::*;
fn main() {
    let params = LabParams::default().quick();
    for strategy in Strategy::ALL {
        for load in SWEEP_LOADS {
            let t = std::time::Instant::now();
            let r = simulate(&params, Scenario::Sweep { load }, strategy).unwrap();
            println!("{:<20} {:>4} goodput {:.3} p50 {:>8.1} p99 {:>9.1} p999 {:>9.1} {:?} {:?}", r.strategy, load, r.goodput, r.p50_ms, r.p99_ms, r.p999_ms, r.counts, t.elapsed());
        }
    }
    for strategy in Strategy::ALL {
        for scenario in [Scenario::Spike { load: 1.0 }, Scenario::Slowdown { load: 1.0 }] {
            let r = simulate(&params, scenario, strategy).unwrap();
            println!("{:<20} {:<9} goodput {:.3} p99 {:>9.1} rec {:?}", r.strategy, r.scenario, r.goodput, r.p99_ms, r.recovery_s);
        }
    }
}

#!/usr/bin/env python3
"""Turns criterion's estimates into docs/benchmarks.md: medians and ratios to each group's baseline."""

import json
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

# Baseline of each group (the row every other row is divided by), and what the group measures.
GROUPS = {
    "clock": ("std_instant", "One clock read: `SystemClock` (TSC), `std::time::Instant`, `ManualClock`, `CoarseClock`."),
    "counter/1t": ("shared_atomic_add", "Counter add (and read), 1 thread."),
    "counter/2t": ("shared_atomic_add", "Counter add (and read), 2 threads at once: per-call cost."),
    "window": ("add/2x500ms", "Sliding window: add one pass, sum the window, or both (1 thread)."),
    "window/2t": ("add/accumulators", "Sliding window (2 x 500 ms), 2 threads at once: add, and add plus a read of the pass sum (a rule's hot check), with per-thread accumulators or with every thread on the shared ring."),
    "entry/1t": ("handle_system_clock", "spillway entry + exit, no rules, 1 thread: through a resource handle with the default (TSC) clock, the coarse clock (1 ms ticks) and a manual clock, and by name."),
    "entry/2t": ("handle_system_clock", "spillway entry + exit, no rules, 2 threads at once."),
    "flow/1t": ("qps_reject_pass", "spillway entry + exit with one QPS reject rule loaded, passing or blocked, 1 thread; `_shared_ring`: the same on nodes whose second window has no per-thread accumulators (`WindowConfig::with_stripes(0)`); `_coarse_clock`: on an instance reading the coarse clock."),
    "flow/2t": ("qps_reject_pass", "The same, 2 threads at once: per-call cost."),
    "admit/1t": ("shared_atomic", "Admit one call (and release it) with no limit reached, 1 thread: spillway and its peers (`spillway_entry_exit_coarse_clock`: spillway on an instance reading the coarse clock, RT in 1 ms ticks)."),
    "admit/2t": ("shared_atomic", "The same, 2 threads at once: per-call cost."),
    "qps_rule/1t": ("governor_pass", "One QPS limit loaded; a call it passes and a call it refuses, 1 thread: spillway (entry + exit, QPS reject rule; `_coarse_clock`: on an instance reading the coarse clock), governor (`check`), sentinel-core (entry + exit, reject flow rule)."),
    "qps_rule/2t": ("governor_pass", "The same, 2 threads at once: per-call cost."),
    "rate_limiter/1t": ("governor_check_pass", "A standalone rate limiter asked for one permit without waiting, with one to give (pass: spillway at 1e9 permits/s, where each pass publishes a new state, and at an infinite rate, where it publishes nothing) and without (reject), 1 thread: spillway's Guava-style `try_acquire(1, 0)` and governor's `check`."),
    "rate_limiter/2t": ("governor_check_pass", "The same, 2 threads at once: per-call cost."),
    "dubbo/1t": ("tokio_semaphore_try_acquire", "Dubbo's limits on one key, never reached, 1 thread: spillway's `executes` and `actives` acquire + release and TPS check (by name and by key), next to tokio's `Semaphore::try_acquire` + release."),
    "dubbo/2t": ("tokio_semaphore_try_acquire", "The same, 2 threads at once: per-call cost."),
    "adaptive/1t": ("tokio_semaphore_try_acquire", "An adaptive concurrency limit admitting and releasing one call, its sample reaching the algorithm, never at the limit, 1 thread: spillway's `AdaptiveLimiter` with Envoy's gradient controller and with AIMD, next to governor's `check` and tokio's `Semaphore::try_acquire` + release."),
    "adaptive/2t": ("tokio_semaphore_try_acquire", "The same, 2 threads at once: per-call cost."),
    "layer/1t": ("bare", "One request through a tower service that answers at once, alone (`bare`) and behind each middleware, 1 thread: spillway's layer passing (no rules) and blocking (a QPS rule of 0: the 429 with its headers), tower's `ConcurrencyLimit`, tower_governor passing and blocking. A middleware's added cost is its row minus `bare`."),
}


# The sections of docs/benchmarks.md that other harnesses write (in bench/), in their order.
SECTIONS = (
    "count.md",
    "cpus.md",
    "load.md",
    "profile.md",
    "cluster.md",
    "keyed.md",
    "replay.md",
    "per_request.md",
)

def median_ns(bench_dir: Path) -> float:
    estimates = json.loads((bench_dir / "new" / "estimates.json").read_text())
    return estimates["median"]["point_estimate"]


def collect(root: Path):
    results = {}
    for estimates in sorted(root.glob("**/new/estimates.json")):
        bench_dir = estimates.parent.parent
        bench = json.loads((estimates.parent / "benchmark.json").read_text())
        group = bench["group_id"]
        name = bench["function_id"] or ""
        if bench.get("value_str"):
            name = f"{name}/{bench['value_str']}" if name else bench["value_str"]
        results.setdefault(group, {})[name] = median_ns(bench_dir)
    return results


def fmt(ns: float) -> str:
    return f"{ns / 1000:.2f} µs" if ns >= 1000 else f"{ns:.2f} ns"


def command(*args: str) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def paired_section(rows) -> list:
    """The `paired` harness's table: per-round medians and the spread of the per-round ratios."""
    out = ["## `paired`\n"]
    out.append(
        "spillway against governor's `check` in alternating rounds (on 1 thread, 20,000 calls a "
        "side; on 2 threads, both calling the same side at once, 2,000 calls a side each, the "
        "side's time being the slower thread's; 301 rounds, the side that goes first alternating), "
        "so that the VM's noise falls on both sides alike (`cargo bench --manifest-path "
        "bench/Cargo.toml --bench paired`). Medians of the per-round times; the ratio is the median "
        "of the per-round ratios, with their 10th and 90th percentiles. The limiters are those of "
        "the `rate_limiter` and `qps_rule` groups.\n"
    )
    out.append("| spillway | outcome | threads | spillway | governor `check` | ratio | p10 to p90 |")
    out.append("|---|---|---:|---:|---:|---:|---:|")
    for row in rows:
        out.append(
            f"| {row['what']} | {row['outcome']} | {row.get('threads', 1)} | "
            f"{fmt(row['spillway_ns'])} | {fmt(row['governor_ns'])} | {row['ratio']:.3f}x | "
            f"{row['ratio_p10']:.3f} to {row['ratio_p90']:.3f} |"
        )
    out.append("")
    return out


def main() -> None:
    results = {}
    for root in sys.argv[1:]:
        for group, rows in collect(Path(root)).items():
            results.setdefault(group, {}).update(rows)

    out = []
    out.append("# Benchmarks\n")
    out.append("Generated by `bench/run` (criterion medians; every ratio is against the group's")
    out.append("baseline row *from the same run*). Do not edit by hand: rerun the command.\n")
    out.append(f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")
    out.append(f"- CPU: {cpu()}, {command('nproc')} cores")
    out.append(f"- {command('rustc', '--version')}")
    out.append("- this machine is a shared, noisy VM: read ratios, not absolute times\n")
    for group, (baseline, what) in GROUPS.items():
        rows = results.get(group)
        if not rows:
            continue
        base = rows.get(baseline)
        out.append(f"## `{group}`\n")
        out.append(what + "\n")
        out.append(f"| bench | median | ratio to `{baseline}` |")
        out.append("|---|---:|---:|")
        for name, ns in sorted(rows.items(), key=lambda kv: kv[1]):
            ratio = f"{ns / base:.2f}x" if base else "n/a"
            out.append(f"| `{name}` | {fmt(ns)} | {ratio} |")
        out.append("")
    # spillway against governor in alternating rounds (`benches/paired.rs`), from the same run.
    paired = Path(__file__).parent / "target" / "paired.json"
    if paired.exists():
        out.extend(paired_section(json.loads(paired.read_text())))
    # The sections other harnesses write, each with its own date and command, in this order:
    # one call counted under callgrind (`bench/count`); why the paired ratios depend on the
    # CPU (by hand, from runs it names); the wrk load test of the binary (`bench/load`); where
    # the proxy's CPU goes (`bench/profile`); cluster limits on a real Redis (`bench/cluster`);
    # per-key limits beside governor's keyed limiter (`benches/keyed.rs`); `spillway replay`
    # on generated nginx logs (`bench/replay`); one proxied request counted under callgrind
    # (`bench/per_request`).
    for name in SECTIONS:
        section = Path(__file__).parent / name
        if section.exists():
            out.append(section.read_text().rstrip() + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Parses bench/load's runs (wrk's output, open_loop's JSON): the limit to set, the report, and
its place in docs."""

import json
import os
import re
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from report import cpu as cpu_name  # bench/report.py, beside this script

UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def millis(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()
    return float(number) * UNITS[unit]


def parse(path: Path) -> dict:
    text = path.read_text()
    out = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))}
    for pct in ("50", "99"):
        match = re.search(rf"^\s+{pct}%\s+(\S+)", text, re.M)
        if match:
            out[f"p{pct}"] = millis(match.group(1))
    statuses = re.search(r"STATUSES ok=(\d+) limited=(\d+) other=(\d+)", text)
    if statuses:
        out["ok"], out["limited"], out["other"] = map(int, statuses.groups())
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    out["non2xx"] = int(errors.group(1)) if errors else 0
    return out


def open_loop(path: Path) -> dict:
    return json.loads(path.read_text())


def cpu_per_request(path: Path, rate: int, duration: float) -> tuple:
    """Microseconds of user and of system CPU a process spent per request sent in a run."""
    user, system, per_second = (int(x) for x in path.read_text().split())
    return tuple(ticks / per_second * 1e6 / (rate * duration) for ticks in (user, system))


# What the tables call each target.
NAMES = {"nginx": "nginx", "spillway": "spillway", "spillway1": "spillway, one worker",
         "hyper": "a bare hyper proxy"}
# Every target run at fixed rates: the upstream direct, then the proxies.
RUN = ("direct", "nginx", "spillway", "spillway1", "hyper")


def median(values: list) -> float:
    return statistics.median(values)


def report(work: Path, limit: float, duration: float, rates: list, split_rate: int,
           nginx: str, rounds: int, overload_duration: float) -> str:
    runs = range(1, rounds + 1)
    top = {t: [parse(work / f"max_{t}_r{r}.txt")["rps"] for r in runs] for t in RUN}
    top1 = {t: [parse(work / f"max1_{t}_r{r}.txt")["rps"] for r in runs] for t in RUN}
    fixed = {rate: {t: [open_loop(work / f"rate_{rate}_{t}_r{r}.json") for r in runs]
                    for t in RUN}
             for rate in rates}
    split = {t: [open_loop(work / f"split_{t}_r{r}.json") for r in runs] for t in RUN}
    banner = subprocess.run(["wrk", "--version"], capture_output=True, text=True).stdout
    version = re.search(r"(\d+\.\d+\.\d+)", banner)
    wrk = f"wrk {version.group(1)}" if version else "wrk"
    over = parse(work / "overload.txt")
    admitted = over["ok"] / overload_duration
    offered = (over["ok"] + over["limited"] + over["other"]) / overload_duration

    def header(cells: dict) -> list:
        """A latency table's head: a column per target run, then what each proxy added."""
        proxies = [t for t in cells if t != "direct"]
        names = ["direct to the upstream"] + [f"through {NAMES[t]}" for t in proxies]
        names += [f"added by {NAMES[t]}" for t in proxies]
        return ["| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]

    def row(label: str, cells: dict, key: str) -> str:
        """Medians of each target, and the medians of the round-by-round differences (a
        proxy's run and the direct one of the same round share the machine's mood)."""
        medians = [f"{median([run[key] for run in cells[t]]):.3f} ms" for t in cells]
        added = [median([run[key] - direct[key]
                         for run, direct in zip(cells[t], cells["direct"])])
                 for t in cells if t != "direct"]
        return f"| {label} | " + " | ".join(medians + [f"{a:+.3f} ms" for a in added]) + " |"

    def achieved(label: str, cells: dict) -> str:
        rates = [f"{min(run['achieved_rps'] for run in cells[t]):.0f} req/s" for t in cells]
        errors = sum(run["errors"] + run["non_2xx"] for t in cells for run in cells[t])
        blank = [""] * (len(cells) - 2)
        return (f"| {label} (the lowest of the rounds) | " + " | ".join(rates) + " | "
                + " | ".join([f"errors: {errors}"] + blank) + " |")

    def cpu(label: str, cells: dict, name: str, rate: int) -> str:
        """Each target's CPU per request, user + system (medians of the rounds)."""
        spent = [[cpu_per_request(work / f"cpu_{name}_{t}_r{r}.txt", rate, duration)
                  for r in runs] for t in cells]
        text = [f"{median([u + s for u, s in runs_]):.0f} µs "
                f"({median([u for u, _ in runs_]):.0f} + {median([s for _, s in runs_]):.0f})"
                for runs_ in spent]
        return f"| {label} | " + " | ".join(text) + " |" * (len(text) - 1) + " |"

    def versus(label: str, cells: dict, key: str) -> str:
        """Each other proxy's latency minus nginx's in the same round: the median, the range,
        and in how many rounds it was no more than nginx's."""
        out = []
        for t in (t for t in cells if t not in ("direct", "nginx")):
            diffs = [(s[key] - n[key]) * 1000 for s, n in zip(cells[t], cells["nginx"])]
            at_most = sum(d <= 0 for d in diffs)
            out.append(f"{median(diffs):+.0f} µs ({min(diffs):+.0f} to {max(diffs):+.0f}; "
                       f"{at_most} of {len(diffs)})")
        return f"| {label} | " + " | ".join(out) + " |"

    def max_row(label: str, cells: dict) -> str:
        """A max-throughput row: each target's median, and each proxy's median ratio to
        nginx's of the same round."""
        def ratio(target: str) -> float:
            return median([s / n for s, n in zip(cells[target], cells["nginx"])])
        return (f"| {label} | {median(cells['direct']):.0f} req/s | "
                f"{median(cells['nginx']):.0f} req/s | "
                f"{median(cells['spillway']):.0f} req/s | {ratio('spillway'):.2f}x | "
                f"{median(cells['spillway1']):.0f} req/s | {ratio('spillway1'):.2f}x | "
                f"{median(cells['hyper']):.0f} req/s | {ratio('hyper'):.2f}x |")

    def per_round(label: str, cells: dict) -> str:
        """Each round's spillway / nginx ratio, with its default workers and with one."""
        def ratios(target: str) -> str:
            return ", ".join(f"{s / n:.2f}" for s, n in zip(cells[target], cells["nginx"]))
        return (f"Each round's spillway / nginx ratio, {label}: {ratios('spillway')}; with one "
                f"worker: {ratios('spillway1')}.")

    lines = [
        "## Load test: the `spillway` binary beside nginx",
        "",
        f"Generated by `bench/load` ({datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; "
        f"{cpu_name()}; {wrk}; nginx {nginx}, one worker, a pool of 64 kept-alive connections to the upstream; "
        f"spillway with its default workers, one per CPU ({os.cpu_count()} here), and with one "
        "worker like nginx's; a bare proxy on spillway's stack, hyper's server and client on a "
        "tokio runtime per worker with nothing else (`cargo run -p spillway-server --example "
        "hyper_proxy`), as many workers as spillway; "
        f"{rounds} rounds of {duration:g} s per measurement, the targets taking turns within "
        "each round; every number is the median of the rounds). The load generators, both "
        "proxies and a minimal upstream (`cargo run -p spillway-server --example upstream`) "
        f"share this machine's {os.cpu_count()} cores, so every number includes their "
        "contention.",
        "",
        "Latency is measured open loop by `bench/src/bin/open_loop.rs`: requests leave at a fixed "
        f"rate over {fixed[rates[0]]['direct'][0]['connections']} kept-alive connections whatever "
        "the server does, and a request held back by a late answer is timed from when it should "
        "have left (no coordinated omission). The first second of each run is not recorded. "
        "What a proxy adds is the median, over the rounds, of its latency minus the direct "
        "latency of the same round. CPU per request is the process's user and system time over "
        "the run (from `/proc`, in 10 ms ticks) divided by the requests sent, given as the sum "
        "and its two parts; on loopback the sender's system time includes delivering its "
        "segments to the receiver.",
        "",
    ]
    lines += header(fixed[rates[0]])
    for rate in rates:
        lines.append(row(f"p50 at {rate} req/s", fixed[rate], "p50_ms"))
        lines.append(row(f"p99 at {rate} req/s", fixed[rate], "p99_ms"))
        lines.append(achieved(f"achieved at {rate} req/s", fixed[rate]))
        lines.append(cpu(f"CPU per request at {rate} req/s, user + system (the upstream's "
                         "direct, the proxy's through one)", fixed[rate], str(rate), rate))
    others = [t for t in RUN if t not in ("direct", "nginx")]
    lines += [
        "",
        "Against nginx, round by round: each proxy's latency minus nginx's in the same round "
        "(the same as the difference of what each added), as the median over the rounds, the "
        "lowest and highest round, and in how many rounds it added no more than nginx:",
        "",
        "| | " + " | ".join(f"{NAMES[t]} − nginx" for t in others) + " |",
        "|---|" + "---:|" * len(others),
    ]
    for rate in rates:
        lines.append(versus(f"p50 at {rate} req/s", fixed[rate], "p50_ms"))
        lines.append(versus(f"p99 at {rate} req/s", fixed[rate], "p99_ms"))
    lines.append(versus(f"p50 at {split_rate} req/s, split writes", split, "p50_ms"))
    lines.append(versus(f"p99 at {split_rate} req/s, split writes", split, "p99_ms"))
    lines += [
        "",
        "Max throughput, closed loop (wrk with 2 threads and 64 connections, and with 1 thread "
        "and 32; the ratio is the median of each round's ratio):",
        "",
        "| wrk | direct to the upstream | through nginx (one worker) | through spillway | "
        "spillway / nginx | through spillway, one worker | one worker / nginx | "
        "through a bare hyper proxy | bare hyper / nginx |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        max_row("-t2 -c64", top),
        max_row("-t1 -c32", top1),
        "",
        per_round("wrk -t2 -c64", top),
        per_round("wrk -t1 -c32", top1),
        "",
        f"An upstream that writes each response's head and body in two writes (`--split`, as "
        f"Python's `http.server` does), at {split_rate} req/s over "
        f"{split['direct'][0]['connections']} connections: a proxy that left Nagle's algorithm "
        "on toward its clients would add the client's delayed ACK (about 40 ms) to each request.",
        "",
        *header(split),
        row(f"p50 at {split_rate} req/s", split, "p50_ms"),
        row(f"p99 at {split_rate} req/s", split, "p99_ms"),
        achieved("achieved", split),
        cpu(f"CPU per request at {split_rate} req/s, user + system", split, "split", split_rate),
        "",
        f"Overload (one run of {overload_duration:g} s): a QPS flow rule of {limit:g} on "
        "`/limited` (a tenth of spillway's median max throughput), driven at full speed with 64 "
        f"connections: offered {offered:.0f} req/s ({offered / limit:.1f}x the limit), admitted "
        f"{admitted:.0f} req/s ({admitted / limit:.3f} of the limit), refused with 429: "
        f"{over['limited']}, other statuses: {over['other']}. Over its 1 s of two 500 ms "
        "buckets, Sentinel's window admits at most the limit in any two consecutive buckets. "
        "Under steady overload one bucket of each pair takes the whole limit, and a run of T "
        "seconds spans 2T + 1 buckets, so it sees up to T + 1 such buckets (1.1 of the limit for "
        "10 s), 1.05 of the limit on average: the rule working as Sentinel's does.",
        "",
    ]
    return "\n".join(lines)


def splice(fragment: Path, doc: Path, marker: str = "## Load test") -> None:
    """Replaces the section of `doc` that starts with `marker` (up to the next `## ` heading,
    or the end) with `fragment`, or appends it if there is none."""
    text = doc.read_text()
    if marker in text:
        head, rest = text.split(marker, 1)
        after = rest.find("\n## ")
        tail = rest[after + 1:] if after >= 0 else ""
    else:
        head, tail = text, ""
    body = head.rstrip() + "\n\n" + fragment.read_text().rstrip() + "\n"
    if tail:
        body += "\n" + tail.rstrip() + "\n"
    doc.write_text(body)


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "limit":
        work, rounds = Path(sys.argv[2]), int(sys.argv[3])
        print(int(median([parse(work / f"max_spillway_r{r}.txt")["rps"]
                          for r in range(1, rounds + 1)]) / 10))
    elif command == "report":
        print(report(Path(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]),
                     [int(rate) for rate in sys.argv[5].split()], int(sys.argv[6]), sys.argv[7],
                     int(sys.argv[8]), float(sys.argv[9])))
    elif command == "splice":
        marker = sys.argv[4] if len(sys.argv) > 4 else "## Load test"
        splice(Path(sys.argv[2]), Path(sys.argv[3]), marker)

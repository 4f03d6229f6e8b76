"""Benchmark of `yoke.kernel`: cost per decision and fairness quality.

Run `python -m bench.bench_kernel [--quick] [--cpu]`. Prints a markdown section and writes the
same figures as JSON to `bench/results/kernel.json`. Timings are the median of 5 runs (min-max
shown) with the garbage collector off inside timed loops, next to a baseline measured in the same
run: a bare `heapq.heappush` + `heappop` cycle on a heap of the same size. `--cpu` times with this
thread's CPU clock instead of the wall clock: on a shared, oversubscribed machine that removes the
time spent descheduled, which is most of the run-to-run noise. Fairness figures come from a
discrete-time simulation with unit service times (randomness only in the workload, seeded).
"""

from __future__ import annotations

import argparse
import functools
import gc
import heapq
import json
import platform
import random
import statistics
import time
import tracemalloc
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from yoke.kernel import GroupedKernel, Kernel

RUNS = 5
_clock = time.perf_counter_ns  # `--cpu` swaps in time.thread_time_ns


def _timed(fn: Callable[[], int]) -> float:
    """ns per operation of one run; `fn` does the work and returns its operation count."""
    gc.collect()
    gc.disable()
    try:
        t0 = _clock()
        n = fn()
        return (_clock() - t0) / n
    finally:
        gc.enable()


def _median(samples: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(samples), 1),
        "min": round(min(samples), 1),
        "max": round(max(samples), 1),
    }


def baseline(size: int, cycles: int) -> dict[str, float]:
    heap = [(i, i) for i in range(size)]
    heapq.heapify(heap)

    def run() -> int:
        push, pop = heapq.heappush, heapq.heappop
        for i in range(cycles):
            _, x = pop(heap)
            push(heap, (size + i, x))
        return cycles

    return _median([_timed(run) for _ in range(RUNS)])


def cycle(lanes: int, cycles: int, *, caps: bool) -> dict[str, float]:
    """pop_next + release + push at steady state, 2 queued items per backlogged lane."""

    def run() -> int:
        k = Kernel()
        if caps:
            for w in range(8):
                k.set_cap(("workflow", w), 10**9)
        n = 0
        for ln in range(lanes):
            if caps:
                k.set_lane_cap(ln, 2)
            for _ in range(2):
                k.push(n, ln, keys=[("workflow", ln % 8)] if caps else ())
                n += 1
        pop, release, push = k.pop_next, k.release, k.push
        gc.collect()
        gc.disable()
        t0 = _clock()
        for _ in range(cycles):
            item = pop()
            assert item is not None
            release(item.id)
            push(n, item.lane, keys=item.keys)
            n += 1
        dt = _clock() - t0
        gc.enable()
        return dt // cycles

    return _median([float(run()) for _ in range(RUNS)])


def hot_key(lanes: int, cycles: int) -> dict[str, float]:
    """One cap key ("hot", cap 4) shared by every lane, 100% of items under it (the key proxy
    of docs/kernel.md)."""

    def run() -> int:
        k = Kernel()
        k.set_cap("hot", 4)
        n = 0
        for ln in range(lanes):
            for _ in range(2):
                k.push(n, ln, keys=["hot"])
                n += 1
        running: deque[Any] = deque()
        for _ in range(4):
            item = k.pop_next()
            assert item is not None
            running.append(item)
        gc.collect()
        gc.disable()
        t0 = _clock()
        for _ in range(cycles):
            done = running.popleft()
            k.release(done.id)
            k.push(n, done.lane, keys=["hot"])
            n += 1
            item = k.pop_next()
            assert item is not None
            running.append(item)
        dt = _clock() - t0
        gc.enable()
        return dt // cycles

    return _median([float(run()) for _ in range(RUNS)])


def _repri_all(k: Kernel, ids: list[int]) -> int:
    for i in ids:
        k.reprioritize(i, 1)
    return len(ids)


def _cancel_all(k: Kernel, ids: list[int]) -> int:
    for i in ids:
        k.cancel(i)
    return len(ids)


def single_ops(n: int) -> dict[str, dict[str, float]]:
    out: dict[str, list[float]] = {"cancel": [], "reprioritize": []}
    for _ in range(RUNS):
        k = Kernel()
        for i in range(n):
            k.push(i, i % 1000)
        ids = list(range(0, n, 2))
        out["reprioritize"].append(_timed(functools.partial(_repri_all, k, ids)))
        out["cancel"].append(_timed(functools.partial(_cancel_all, k, ids)))
    return {name: _median(v) for name, v in out.items()}


def memory(n: int) -> dict[str, float]:
    gc.collect()
    tracemalloc.start()
    k = Kernel()
    base = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        k.push(i, i % 1000)
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert k.queued == n
    return {"items": n, "bytes_per_item": round(used / n, 1)}


def admission_cycle(tenants: int, sessions: int, cycles: int, *, grouped: bool) -> dict[str, float]:
    """The admission order's steady state: release + push + pop_next with 16 running, every
    session capped at 2 and every start under one of 8 workflow keys; 2 starts queued per
    session. `grouped`: the two-level kernel (group = tenant) executions use; else the flat
    `least_running` kernel with global priority they used before (same caps)."""

    def run() -> int:
        if grouped:
            k: Any = GroupedKernel(lane_cap=2)
        else:
            k = Kernel(policy="least_running", priority_scope="global")
        tenant_of: dict[str, str] = {}
        n = 0
        for t in range(tenants):
            for s_ in range(sessions):
                lane = f"t{t}/s{s_}"
                tenant_of[lane] = f"t{t}"
                if not grouped:
                    k.set_lane_cap(lane, 2)
                for _ in range(2):
                    keys = (("workflow", n % 8),)
                    if grouped:
                        k.push(n, lane, group=tenant_of[lane], keys=keys)
                    else:
                        k.push(n, lane, keys=keys)
                    n += 1
        running: deque[Any] = deque(k.pop_next() for _ in range(16))
        gc.collect()
        gc.disable()
        t0 = _clock()
        if grouped:
            for _ in range(cycles):
                done = running.popleft()
                k.release(done.id)
                k.push(n, done.lane, group=tenant_of[done.lane], keys=done.keys)
                n += 1
                running.append(k.pop_next())
        else:
            for _ in range(cycles):
                done = running.popleft()
                k.release(done.id)
                k.push(n, done.lane, keys=done.keys)
                n += 1
                running.append(k.pop_next())
        dt = _clock() - t0
        gc.enable()
        return dt // cycles

    return _median([float(run()) for _ in range(RUNS)])


def admission_costs(cycles: int) -> dict[str, dict[str, Any]]:
    """Flat and grouped, interleaved run by run so both see the same machine."""
    out: dict[str, dict[str, Any]] = {}
    for tenants, sessions in ((1, 10), (100, 10), (10_000, 10)):
        flat: list[float] = []
        grouped: list[float] = []
        for _ in range(RUNS):
            flat.append(admission_cycle(tenants, sessions, cycles, grouped=False)["median"])
            grouped.append(admission_cycle(tenants, sessions, cycles, grouped=True)["median"])
        ratios = [g / f for g, f in zip(grouped, flat, strict=True)]
        out[f"{tenants}x{sessions}"] = {
            "flat": _median(flat),
            "grouped": _median(grouped),
            "ratio": round(statistics.median(ratios), 2),
        }
    return out


def _core_costs(cycles: int) -> dict[str, dict[str, Any]]:
    from bench import admission_core

    out: dict[str, dict[str, Any]] = {}
    for shape, r in admission_core.measure(RUNS, cycles).items():
        ratios = [g / f for f, g in zip(r["flat"], r["grouped"], strict=True)]
        out[shape] = {
            "flat": _median(r["flat"]),
            "grouped": _median(r["grouped"]),
            "ratio": round(statistics.median(ratios), 2),
            "ratio_range": [round(min(ratios), 2), round(max(ratios), 2)],
        }
    return out


# ------------------------------------------------------------------ fairness


def _admission_kernel(grouped: bool, cap: int) -> Any:
    if grouped:
        return GroupedKernel(global_cap=cap)
    return Kernel(policy="least_running", priority_scope="global", global_cap=cap)


def _push(k: Any, iid: Any, session: str, grouped: bool) -> None:
    if grouped:
        k.push(iid, session, group=session.partition("/")[0])
    else:
        k.push(iid, session)


def splitting_flood(grouped: bool, *, sessions: int = 50, per_session: int = 10,
                    light: int = 20, slots: int = 4) -> dict[str, float]:  # fmt: skip
    """A tenant spreads `sessions` x `per_session` starts over sessions evil/s0...; tenant acme
    then queues `light` starts in one session. Unit task times, `slots` slots; acme's waits in
    task times (tenant-fair ideal: its starts go every other grant, about `light` / 2 *
    2 / slots task times for the last)."""
    k = _admission_kernel(grouped, slots)
    for s_ in range(sessions):
        for i in range(per_session):
            _push(k, ("evil", s_, i), f"evil/s{s_}", grouped)
    for i in range(light):
        _push(k, ("acme", i), "acme", grouped)
    waits: list[int] = []
    running: list[Any] = []
    t = 0
    while len(waits) < light:
        for iid in running:
            k.release(iid)
        running = []
        while (item := k.pop_next()) is not None:
            running.append(item.id)
            if item.id[0] == "acme":
                waits.append(t)
        t += 1
    waits.sort()
    return {
        "p50": float(waits[len(waits) // 2]),
        "max": float(waits[-1]),
        "ideal_max": float(-(-2 * light // slots)),
    }


def tie_flood(grouped: bool, *, slots: int = 4) -> dict[str, float]:
    """One flooding tenant (600 starts) and five light tenants (20 starts each) that end in
    the same time unit they start, so every tenant sits at 0 running: the flood's share of
    the grants made while light work waits (ideal 1/6)."""
    k = _admission_kernel(grouped, slots)
    for i in range(600):
        _push(k, ("flood", i), "flood", grouped)
    for t in range(5):
        for i in range(20):
            _push(k, (f"light{t}", i), f"light{t}", grouped)
    light_left = 100
    flood = total = 0
    while light_left:
        picked = []
        while (item := k.pop_next()) is not None:
            picked.append(item.id)
        for iid in picked:
            total += 1
            if iid[0] == "flood":
                flood += 1
            else:
                light_left -= 1
            k.release(iid)
    return {"flood_share": round(flood / total, 3), "ideal": round(1 / 6, 3)}


POLICIES: list[tuple[str, dict[str, Any]]] = [
    ("sfq credit 0", {"policy": "sfq"}),
    ("sfq credit 1", {"policy": "sfq", "credit": 1}),
    ("rotation", {"policy": "rotation"}),
    ("least_running", {"policy": "least_running"}),
    ("fifo", {"policy": "fifo"}),
]


def flood(cfg: dict[str, Any], steps: int, seed: int = 7) -> dict[str, float]:
    """K=8 slots, unit service. 20 light tenants arrive at 0.1/step each, one heavy tenant at 100x
    one light tenant's rate (10/step), so the heavy tenant's backlog grows without bound."""
    rnd = random.Random(seed)
    k = Kernel(**cfg)
    arrived: dict[Any, int] = {}
    waits: list[int] = []
    running: list[Any] = []
    n = 0
    for t in range(steps):
        for _ in range(10):
            k.push(n, "heavy")
            arrived[n] = t
            n += 1
        for light in range(20):
            if rnd.random() < 0.1:
                k.push(n, f"light{light}")
                arrived[n] = t
                n += 1
        for i in running:
            k.release(i)
        running = []
        while len(running) < 8:
            item = k.pop_next()
            if item is None:
                break
            running.append(item.id)
            if item.lane != "heavy":
                waits.append(t - arrived[item.id])
    waits.sort()
    return {
        "light_p50": float(waits[len(waits) // 2]),
        "light_p99": float(waits[int(len(waits) * 0.99)]),
        "light_max": float(waits[-1]),
        "light_served": len(waits),
    }


def jain(cfg: dict[str, Any], tenants: int, dispatches: int) -> dict[str, float]:
    """All tenants backlogged (equal weights); Jain's index over sliding windows of one round."""
    k = Kernel(**cfg)
    n = 0
    # Arrival order is heavy-first so fifo shows its unfairness: tenant 0 queued everything first.
    for ln in range(tenants):
        for _ in range(dispatches):
            k.push(n, ln)
            n += 1
    seq: list[Any] = []
    for _ in range(dispatches):
        item = k.pop_next()
        assert item is not None
        k.release(item.id)
        seq.append(item.lane)
    out: dict[str, float] = {}
    for name, win in (("round", tenants), ("10 rounds", 10 * tenants)):
        js = []
        for a in range(len(seq) - win + 1):
            counts = [0] * tenants
            for x in seq[a : a + win]:
                counts[x] += 1
            js.append(sum(counts) ** 2 / (tenants * sum(c * c for c in counts)))
        out[f"min J ({name})"] = round(min(js), 3)
        out[f"mean J ({name})"] = round(statistics.fmean(js), 3)
    return out


def weighted(cfg: dict[str, Any], dispatches: int) -> dict[str, float]:
    k = Kernel(**cfg)
    weights = {"w1": 1.0, "w2": 2.0, "w4": 4.0}
    n = 0
    for ln, w in weights.items():
        k.set_weight(ln, w)
        for _ in range(dispatches):
            k.push(n, ln)
            n += 1
    got = dict.fromkeys(weights, 0)
    for _ in range(dispatches):
        item = k.pop_next()
        assert item is not None
        k.release(item.id)
        got[str(item.lane)] += 1
    total = sum(weights.values())
    return {
        ln: round(100 * abs(got[ln] / dispatches - w / total) / (w / total), 2)
        for ln, w in weights.items()
    }


# ------------------------------------------------------------------ report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smaller sizes, for CI smoke runs")
    ap.add_argument("--cpu", action="store_true", help="time with the thread's CPU clock")
    opts = ap.parse_args(argv)
    global _clock
    _clock = time.thread_time_ns if opts.cpu else time.perf_counter_ns
    q = opts.quick
    cycles = 5_000 if q else 50_000
    sizes = (10, 1_000, 100_000)
    res: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.uname().machine,
        "quick": q,
        "clock": "thread CPU time" if opts.cpu else "wall clock",
    }
    res["cycle_ns"] = {}
    for t in sizes:
        res["cycle_ns"][str(t)] = {
            "baseline_heapq": baseline(2 * t, cycles),
            "no_caps": cycle(t, cycles, caps=False),
            "caps": cycle(t, cycles, caps=True),
        }
    res["hot_key_ns"] = {str(t): hot_key(t, cycles // 5) for t in (100, 1_000, 10_000)}
    res["admission_ns"] = admission_costs(cycles // 5)
    res["admission_core_ns"] = _core_costs(cycles // 10)
    res["splitting_flood"] = {
        "flat": splitting_flood(False),
        "grouped": splitting_flood(True),
    }
    res["tie_flood"] = {"flat": tie_flood(False), "grouped": tie_flood(True)}
    res["op_ns"] = single_ops(20_000 if q else 200_000)
    res["memory"] = memory(100_000 if q else 1_000_000)
    steps = 300 if q else 2_000
    res["flood"] = {name: flood(cfg, steps) for name, cfg in POLICIES}
    res["jain"] = {name: jain(cfg, 21, 420 if q else 2_100) for name, cfg in POLICIES}
    res["weighted_error_pct"] = {name: weighted(cfg, 700 if q else 7_000) for name, cfg in POLICIES}
    print(render(res))
    out = Path(__file__).parent / "results" / "kernel.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    return res


def _fmt(m: dict[str, float]) -> str:
    return f"{m['median'] / 1000:.2f} ({m['min'] / 1000:.2f}-{m['max'] / 1000:.2f})"


def render(res: dict[str, Any]) -> str:
    lines = [
        "## yoke.kernel benchmark",
        "",
        f"Python {res['python']} on {res['processor']}{' (quick)' if res['quick'] else ''}."
        f" Times in µs ({res.get('clock', 'wall clock')}), median of 5 runs (min-max),"
        " GC off in timed loops.",
        "",
        "### pop_next + release + push cycle",
        "",
        "| backlogged lanes | heapq baseline | no caps | ratio | lane caps + key cap | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for t, r in res["cycle_ns"].items():
        b = r["baseline_heapq"]["median"]
        lines.append(
            f"| {int(t):,} | {_fmt(r['baseline_heapq'])} | {_fmt(r['no_caps'])}"
            f" | {r['no_caps']['median'] / b:.1f}x | {_fmt(r['caps'])}"
            f" | {r['caps']['median'] / b:.1f}x |"
        )
    lines += ["", "### Hot key (cap 4 shared by all lanes, 100% of items)", ""]
    lines += ["| lanes | release + push + pop |", "|---|---|"]
    lines += [f"| {int(t):,} | {_fmt(m)} |" for t, m in res["hot_key_ns"].items()]
    lines += [
        "",
        "### The admission order: two-level (tenant, then session) against the flat order",
        "",
        "release + push + pop_next, 16 running, 2 queued per session, session cap 2, 8 workflow"
        " keys; flat and grouped interleaved run by run.",
        "",
        "| tenants x sessions | flat | two-level | ratio (median of per-run ratios) |",
        "|---|---|---|---|",
    ]
    for shape, a in res["admission_ns"].items():
        lines.append(f"| {shape} | {_fmt(a['flat'])} | {_fmt(a['grouped'])} | {a['ratio']}x |")
    lines += [
        "",
        "The same, per start in the admission core (a start arrives, is logged, queued, picked,"
        " granted and its execution ends; no store; thread CPU time, 16 running, 2 queued per"
        " session; `bench/admission_core.py`):",
        "",
        "| tenants x sessions | flat | two-level | ratio (min-max) |",
        "|---|---|---|---|",
    ]
    for shape, a in res["admission_core_ns"].items():
        lo, hi = a["ratio_range"]
        lines.append(
            f"| {shape} | {_fmt(a['flat'])} | {_fmt(a['grouped'])} | {a['ratio']}x ({lo}-{hi}) |"
        )
    sf, tf = res["splitting_flood"], res["tie_flood"]
    lines += [
        "",
        "Session-splitting flood (50 sessions x 10 starts of one tenant, then 20 of another in"
        " one session; 4 slots, unit task times): the light tenant's wait in task times,"
        f" p50 / max, flat {sf['flat']['p50']:.0f} / {sf['flat']['max']:.0f}, two-level"
        f" {sf['grouped']['p50']:.0f} / {sf['grouped']['max']:.0f} (tenant-fair max about"
        f" {sf['grouped']['ideal_max']:.0f}).",
        "",
        "Ties (one tenant flooding 600 starts, five light tenants of 20, every start ending in"
        " its time unit): the flood's share of the grants while light work waits, flat"
        f" {tf['flat']['flood_share']}, two-level {tf['grouped']['flood_share']} (ideal"
        f" {tf['grouped']['ideal']}).",
    ]
    lines += ["", "| operation | µs |", "|---|---|"]
    lines += [f"| {op} | {_fmt(m)} |" for op, m in res["op_ns"].items()]
    mem = res["memory"]
    lines += ["", f"Memory: {mem['bytes_per_item']} bytes per queued item at {mem['items']:,}."]
    lines += [
        "",
        "### Fairness: light tenants' wait (task times) under a 100x heavy flood, 8 slots",
        "",
        "| policy | p50 | p99 | max |",
        "|---|---|---|---|",
    ]
    for name, f in res["flood"].items():
        lines.append(f"| {name} | {f['light_p50']} | {f['light_p99']} | {f['light_max']} |")
    lines += ["", "### Jain's index, 21 backlogged tenants (windows of 1 and 10 rounds)", ""]
    keys = list(next(iter(res["jain"].values())))
    lines += ["| policy | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for name, j in res["jain"].items():
        lines.append(f"| {name} | " + " | ".join(str(j[x]) for x in keys) + " |")
    lines += ["", "### Weighted shares 1:2:4, error vs ideal (%)", ""]
    lines += ["| policy | w=1 | w=2 | w=4 |", "|---|---|---|---|"]
    for name, e in res["weighted_error_pct"].items():
        lines.append(f"| {name} | {e['w1']} | {e['w2']} | {e['w4']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

"""Summarise a `scripts/bench` run: medians with spread, and ratios to the baseline measured in
the same run, as the table BENCHMARKS.md reproduces.

    python report.py <results-dir>          # reads results.jsonl and criterion's estimates
    python report.py sum <row> <contender> <concurrency> <rep> < worker-lines
"""

import json
import os
import statistics
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def summed(row, contender, concurrency, rep):
    """Add up the lines of workers that ran in the same window (one line per process)."""
    lines = [json.loads(l) for l in sys.stdin if l.strip().startswith("{")]
    if len(lines) != int(concurrency):
        sys.exit(f"{row} {contender} rep {rep}: {len(lines)} of {concurrency} workers reported")
    ops = sum(l["ops"] for l in lines)
    secs = max(l["secs"] for l in lines)
    out = {"row": row, "contender": contender, "concurrency": int(concurrency),
           "rep": int(rep), "ops": ops, "secs": secs, "per_sec": ops / secs}
    # SQLite workers say which `synchronous` they ran at (checked on their connection): every
    # worker must have run at the one BENCH_SQLITE_SYNCHRONOUS asks for (FULL when unset).
    settings = {l["synchronous"] for l in lines if "synchronous" in l}
    if settings:
        wanted = (os.environ.get("BENCH_SQLITE_SYNCHRONOUS") or "full").lower()
        if settings != {wanted}:
            sys.exit(f"{row} {contender} rep {rep}: workers ran at synchronous {sorted(settings)}, "
                     f"not {wanted}")
        out["synchronous"] = wanted
    print(json.dumps(out))


def spread(values):
    return f"{statistics.median(values):,.0f} [{min(values):,.0f}–{max(values):,.0f}]"


def ratio_line(runs, row, contender, baseline, concurrency, target, higher_is_better=True,
               label=None):
    def per_rep(name):
        return {r["rep"]: r["per_sec"] for r in runs
                if r["row"] == row and r["contender"] == name and r["concurrency"] == concurrency}
    mine, base = per_rep(contender), per_rep(baseline)
    reps = sorted(set(mine) & set(base))
    if not reps:
        return None
    ratios = [mine[r] / base[r] for r in reps]
    ratio = statistics.median(ratios)
    if target is None:  # a diagnostic baseline: a ratio, no target
        goal, met = "—", "—"
    else:
        goal = f"≥ {target}×"
        met = "yes" if (ratio >= target if higher_is_better else ratio <= target) else "no"
    return (f"| {label or row} c={concurrency}: {contender} | {baseline} | "
            f"{spread([mine[r] for r in reps])} /s | {spread([base[r] for r in reps])} /s | "
            f"**{ratio:.2f}×** [{min(ratios):.2f}–{max(ratios):.2f}] | {goal} | {met} |")


def criterion(root, group, name):
    # criterion writes a function id `a/b` to the directory `a_b`.
    path = os.path.join(root, group, name.replace("/", "_"), "new", "estimates.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        e = json.load(f)
    return e["median"]["point_estimate"], e["median_abs_dev"]["point_estimate"]


def hot_path(root):
    out = ["| hot path | median ± MAD | ÷ floor | target | met? | ÷ rmcp | ≤ rmcp? |",
           "|---|---|---|---|---|---|---|"]
    rmcp = criterion(root, "first", "rmcp")
    for group, target in (("first", 3.0), ("replay", 2.0)):
        floor = criterion(root, group, "floor")
        if floor is None:
            continue
        out.append(f"| {group}/floor | {floor[0]:,.0f} ± {floor[1]:,.0f} ns | 1 | | | "
                   f"{floor[0] / rmcp[0]:.2f} | |")
        if group == "first" and rmcp:
            out.append(f"| rmcp dispatch | {rmcp[0]:,.0f} ± {rmcp[1]:,.0f} ns | "
                       f"{rmcp[0] / floor[0]:.2f} | | | 1 | |")
        for cls in ("read", "idempotent_write", "non_idempotent_write", "irreversible"):
            m = criterion(root, group, f"idem/{cls}")
            if m is None:
                continue
            r = m[0] / floor[0]
            rr = m[0] / rmcp[0] if rmcp else float("nan")
            out.append(f"| {group}/idem/{cls} | {m[0]:,.0f} ± {m[1]:,.0f} ns | **{r:.2f}×** | "
                       f"≤ {target:g}× | {'yes' if r <= target else 'no'} | {rr:.2f}× | "
                       f"{'yes' if rr <= 1 else 'no'} |")
    return out


def main(results):
    runs = load(os.path.join(results, "results.jsonl"))
    lines = []
    crit = os.path.join(results, "..", "criterion")
    if os.path.isdir(crit):
        lines += ["### Hot path (criterion, per call)", ""] + hot_path(crit) + [""]
    paired = [r for r in runs if r["row"] == "paired"]
    if paired:
        lines += ["### Hot path, paired (contenders take turns in batches; median of per-round ratios)", "",
                  "| hot path | ns per call, median [p10–p90] | ÷ floor, median [p10–p90] | target | met? | ÷ rmcp | ≤ rmcp? |",
                  "|---|---|---|---|---|---|---|"]
        for r in paired:
            target = 3.0 if r["mode"] == "first" else 2.0
            idem = r["contender"].startswith("idem/")
            met = ("yes" if r["ratio"] <= target else "no") if idem else ""
            faster = ("yes" if r["ratio_rmcp"] <= 1 else "no") if idem else ""
            lines.append(f"| {r['mode']}/{r['contender']} | {r['ns']:,.0f} [{r['ns_p10']:,.0f}–{r['ns_p90']:,.0f}] | "
                         f"**{r['ratio']:.2f}×** [{r['ratio_p10']:.2f}–{r['ratio_p90']:.2f}] | "
                         f"{'≤ %g×' % target if idem else ''} | {met} | {r['ratio_rmcp']:.2f}× | {faster} |")
        lines += ["", f"{paired[0]['rounds']} rounds of {paired[0]['calls']} calls per contender.", ""]
    table = ["| row | baseline | idem, median [min–max] | baseline, median [min–max] | ratio, median of paired runs [min–max] | target | met? |",
             "|---|---|---|---|---|---|---|"]
    # SQLite at each `synchronous` the run measured (both sides at the same one); lines written
    # before the setting was recorded ran at NORMAL.
    for sync in ("full", "normal"):
        at = [r for r in runs if r["row"] == "sqlite" and r.get("synchronous", "normal") == sync]
        for procs in (1, 2):
            table.append(ratio_line(at, "sqlite", "idem", "raw", procs, 0.8,
                                    label=f"sqlite ({sync.upper()})"))
    for c in (1, 16, 64):
        table.append(ratio_line(runs, "redis", "idem", "raw", c, 0.8))
        table.append(ratio_line(runs, "redis", "idem", "powertools", c, 3.0))
        # Diagnostic: the same round trips through idem's own Redis client, without idem.
        table.append(ratio_line(runs, "redis", "idem", "redis-rs", c, None))
        table.append(ratio_line(runs, "redis", "redis-rs", "raw", c, None))
    for c in (1, 16, 64):
        table.append(ratio_line(runs, "redis-cluster", "idem", "raw", c, 0.8))
    for c in (1, 16, 64):
        table.append(ratio_line(runs, "postgres", "idem", "pgbench", c, 0.7))
    table = [t for t in table if t]
    if len(table) > 2:
        lines += ["### Stores (dispatches per second, claim + complete)", ""] + table + [""]
    macro = [r for r in runs if r["row"] == "macro"]
    if macro:
        lines += ["### Macro cost (seconds, dev profile, 100 tools)", "",
                  "| build | idem, median [min–max] | rmcp, median [min–max] | ratio | target | met? |",
                  "|---|---|---|---|---|---|"]
        for kind in ("clean", "incremental"):
            idem = [r["secs"] for r in macro if r["contender"] == "idem" and r["kind"] == kind]
            rmcp = [r["secs"] for r in macro if r["contender"] == "rmcp" and r["kind"] == kind]
            if idem and rmcp:
                ratio = statistics.median(idem) / statistics.median(rmcp)
                lines.append(f"| {kind} | {statistics.median(idem):.2f} [{min(idem):.2f}–{max(idem):.2f}] | "
                             f"{statistics.median(rmcp):.2f} [{min(rmcp):.2f}–{max(rmcp):.2f}] | "
                             f"**{ratio:.2f}×** | ≤ 1× | {'yes' if ratio <= 1 else 'no'} |")
        lines.append("")
    parts = [r for r in runs if r["row"] == "breakdown"]
    if parts:
        lines += ["### Hot path, piece by piece (ns per call, one run)", "",
                  "| work | ns |", "|---|---|"]
        lines += [f"| {p['part']} | {p['ns']:,.0f} |" for p in parts] + [""]
    allocs = [r for r in runs if r["row"] == "allocs"]
    if allocs:
        lines += ["### Allocations per dispatch (memory store; parsing the arguments excluded)", "",
                  "| class | first: allocations | first: bytes | replay: allocations | replay: bytes |",
                  "|---|---|---|---|---|"]
        lines += [f"| {a['class']} | {a['first_allocs']:.0f} | {a['first_bytes']:,.0f} | "
                  f"{a['replay_allocs']:.0f} | {a['replay_bytes']:,.0f} |" for a in allocs] + [""]
    memory = [r for r in runs if r["row"] == "memory"]
    if memory:
        m = memory[-1]
        lines += ["### Memory (MemoryStore, completed records)", "",
                  f"{m['records']:,} records; payload {m['payload_bytes']} B each; "
                  f"live heap {m['live_bytes_per_record']} B/record → **{m['overhead_bytes_per_record']} B** "
                  f"beyond the payload (target ≤ 200 B: {'met' if m['overhead_bytes_per_record'] <= 200 else 'missed'}); "
                  f"`Record` itself is {m['record_struct_bytes']} B; RSS growth {m['rss_bytes_per_record']} B/record.", ""]
    lines += mcp_rows(runs)
    print("\n".join(lines))


def mcp_rows(runs):
    """The mcp row (in process) and the proxy row (stdio): calls per second through idem
    against the plain rmcp server answering the same request, in the same run."""
    out = []
    for row, title in (("mcp", "MCP server, in process (calls per second; ratios of batches run side by side)"),
                       ("proxy", "MCP proxy over stdio (calls per second; ratios of batches run side by side)")):
        at = [r for r in runs if r["row"] == row]
        if not at:
            continue
        cpu = any("cpu_ratio" in r for r in at)
        head = "| contender | baseline | c | calls/s, median [p10–p90] | ÷ baseline, median [p10–p90] | target | met? |"
        rule = "|---|---|---|---|---|---|---|"
        if cpu:
            head += " CPU µs/call | ÷ baseline by CPU time [p10–p90] |"
            rule += "---|---|"
        out += [f"### {title}", "", head, rule]
        for r in at:
            paired = r["contender"] != r["baseline"]
            # The target is idem's against the plain server or the bare upstream; the plain
            # forwarding proxy's lines are diagnostics (the second hop's share, idem's share).
            targeted = (paired and r["contender"].startswith(("idem/", "proxy/"))
                        and r["baseline"].startswith(("rmcp", "upstream")))
            met = ("yes" if r["ratio"] >= 0.9 else "no") if targeted else ""
            ratio = (f"**{r['ratio']:.2f}×** [{r['ratio_p10']:.2f}–{r['ratio_p90']:.2f}]"
                     if paired else "1")
            line = (f"| {r['contender']} | {r['baseline']} | {r['concurrency']} | "
                    f"{r['per_sec']:,.0f} [{r['per_sec_p10']:,.0f}–{r['per_sec_p90']:,.0f}] | "
                    f"{ratio} | {'≥ 0.9×' if targeted else ''} | {met} |")
            if cpu:
                by_cpu = (f"{r['cpu_ratio']:.2f}× [{r['cpu_ratio_p10']:.2f}–{r['cpu_ratio_p90']:.2f}]"
                          if paired else "1")
                line += f" {r['cpu_ns'] / 1000:.1f} | {by_cpu} |"
            out.append(line)
        first = at[0]
        out += ["", f"{first['rounds']} rounds of {first['calls']} calls per batch."]
        loads = [r for r in runs if r["row"] == "load" and r["at"].startswith(row + " ")]
        if loads:
            out.append("Load average (1, 5, 15 min): " +
                       "; ".join(f"{l['at']}: {l['loadavg']}" for l in loads) + ".")
        commits = {(r["commit"], r["dirty"]) for r in runs
                   if r["row"] == "commit" and r.get("of") == row}
        if commits:
            out.append("Commit: " + ", ".join(
                c + (" (with uncommitted changes in the working tree)" if dirty else "")
                for c, dirty in sorted(commits)) + ".")
        out.append("")
    return out


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "sum":
        summed(*sys.argv[2:6])
    else:
        main(sys.argv[1])

"""The suite's summary: one cell per (workload, load, policy), the worst case of each policy
against the best other policy, and issue 18's done-means-1 check. Pure (dicts in, dicts and
markdown out).

A cell takes its latency metrics (TTFT p50/p90/p99, TPOT p90, E2E p90) from the run
*without* SLO headers and its attainment, goodput and TTFT p99 from the run *with* them, as
issue 18 reads them (with ``--slo on`` only, everything comes from the header runs; with
``--slo off`` attainment and goodput are absent).

Worst-case ratio of a policy on a metric: over every (workload, load) cell, its value
divided by the best value among the *other* policies in that cell (reference policies left
out; the lowest for latencies, the highest for attainment and goodput), and the cell where
that ratio is worst (highest for latencies, lowest for attainment and goodput). For
attainment the worst difference in points is given too.

Done-means 1 (issue 18) for ``policy`` (``headroom``) against the best of ``baselines`` in
each cell: TTFT p90 <= 1.05x, TPOT p90 <= 1.10x, E2E p90 <= 1.10x; and at load >= 1.0
TTFT p90 <= 0.7x gie-default's or attainment >= gie-default's + 10 points.

Lab-only reference policies (bench/lab/oracle.py: the greedy TTFT oracles ``oracle-ttft``
and ``oracle-ttft-blind``, and ``oracle-predicted``) are shown as references: never a
baseline of done-means 1 and never "the best other policy" of a worst case. When a greedy
oracle ran, each cell shows the TTFT p90 over gie-default's of the best one that ran in it,
and a failing lead check it does not pass either says so (a greedy oracle is not a lower
bound over all routers: "not reached by the greedy TTFT oracle").
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from bench.lab.compare import fmt_cell
from bench.lab.oracle import (
    GREEDY_ORACLES,
    ORACLE_PREDICTED,
    ORACLE_TTFT,
    ORACLE_TTFT_BLIND,
    is_reference,
)

LATENCY = ("ttft_p50", "ttft_p90", "ttft_p99", "tpot_p90", "e2e_p90")
HIGHER_BETTER = ("attainment", "goodput")
METRICS = LATENCY + HIGHER_BETTER + ("ttft_p99_slo",)
BASELINES = ("gie-default", "least-request", "cache-aware", "llmd-predicted")
TOLERANCE = {"ttft_p90": 1.05, "tpot_p90": 1.10, "e2e_p90": 1.10}
LEAD_TTFT_RATIO = 0.7  # at load >= 1.0: TTFT p90 <= 0.7x gie-default's ...
LEAD_ATTAINMENT = 0.10  # ... or attainment >= gie-default's + 10 points
LEAD_FROM_LOAD = 1.0


def _latency(r: dict) -> dict:
    return {
        "ttft_p50": r["ttft_ms"]["p50"],
        "ttft_p90": r["ttft_ms"]["p90"],
        "ttft_p99": r["ttft_ms"]["p99"],
        "tpot_p90": r["tpot_ms"]["p90"],
        "e2e_p90": r["e2e_ms"]["p90"],
    }


def _with_slo(r: dict) -> dict:
    return {
        "attainment": r["slo"]["attainment"],
        "goodput": r["slo"]["goodput_rps"],
        "ttft_p99_slo": r["ttft_ms"]["p99"],
        "rejected_slo": r["rejected"],
        "sacrificed_share": r.get("sacrificed_share"),  # routed as lost causes (with SLOs)
    }


def cells(results: Sequence[dict]) -> list[dict]:
    """One cell per (workload, load, policy), in the order of first appearance."""
    out: dict[tuple, dict] = {}
    headers_only = not any(not r.get("slo_headers") for r in results)
    for r in results:
        key = (r["workload"], r["load"], r["policy"])
        c = out.setdefault(key, {"workload": key[0], "load": key[1], "policy": key[2],
                                 **dict.fromkeys(METRICS)})  # fmt: skip
        if r.get("slo_headers"):
            c.update(_with_slo(r))
            c["slo_from_headerless"] = r.get("slo_from_headerless", False)
            if headers_only:
                c.update(_latency(r))
        else:
            c.update(_latency(r))
    return list(out.values())


def _index(cs: Sequence[dict]) -> dict[tuple, dict[str, dict]]:
    by: dict[tuple, dict[str, dict]] = {}
    for c in cs:
        by.setdefault((c["workload"], c["load"]), {})[c["policy"]] = c
    return by


def _ratio(v: float, best: float) -> float | None:
    if best == 0:
        return 1.0 if v == 0 else None
    return v / best


def worst_case(cs: Sequence[dict], policies: Sequence[str]) -> dict[str, dict[str, dict]]:
    """{policy: {metric: {ratio, vs, workload, load, value, best[, points]}}}"""
    by = _index(cs)
    out: dict[str, dict[str, dict]] = {}
    for p in policies:
        per: dict[str, dict] = {}
        for m in METRICS:
            higher = m in HIGHER_BETTER
            worst = None
            for (w, load), row in by.items():
                mine = row.get(p, {}).get(m)
                others = [(c[m], q) for q, c in row.items()
                          if q != p and not is_reference(q) and c.get(m) is not None]  # fmt: skip
                if mine is None or not others:
                    continue
                best, vs = max(others) if higher else min(others)
                ratio = _ratio(mine, best)
                if ratio is None:
                    continue
                if worst is None or (ratio < worst["ratio"] if higher else ratio > worst["ratio"]):
                    worst = {"ratio": round(ratio, 4), "vs": vs, "workload": w, "load": load,
                             "value": mine, "best": best}  # fmt: skip
                    if m == "attainment":
                        worst["points"] = round(100 * (mine - best), 2)
            if worst is not None:
                per[m] = worst
        out[p] = per
    return out


def lead_unattainable(gie: dict, floor: dict | None) -> str | None:
    """Why no router can pass the load >= 1.0 lead check against gie-default's cell
    ``gie``, or None when one might: the TTFT floor of the workload (every request alone on
    an idle pod with every earlier block cached) is above LEAD_TTFT_RATIO x gie-default's
    TTFT p90, and gie-default's attainment leaves less than LEAD_ATTAINMENT to gain."""
    t_gie, a_gie = gie.get("ttft_p90"), gie.get("attainment")
    if floor is None or floor.get("p90") is None or t_gie is None or a_gie is None:
        return None
    if floor["p90"] <= LEAD_TTFT_RATIO * t_gie or a_gie + LEAD_ATTAINMENT <= 1.0:
        return None
    return (f"no router can: TTFT floor p90 {floor['p90']:,.1f} ms > {LEAD_TTFT_RATIO:g}x "
            f"gie-default's {t_gie:,.1f} ms, gie-default attainment {100 * a_gie:.1f}%")  # fmt: skip


def lead_not_reached_by_oracle(gie: dict, oracle: dict | None) -> str | None:
    """Why the load >= 1.0 lead check against gie-default's cell ``gie`` is not reached by
    the greedy TTFT oracle's cell ``oracle`` either, or None: its TTFT p90 is above
    LEAD_TTFT_RATIO x gie-default's and gie-default's attainment leaves less than
    LEAD_ATTAINMENT to gain. Not a proof that no router can (the oracle is greedy)."""
    t_gie, a_gie = gie.get("ttft_p90"), gie.get("attainment")
    t_or = None if oracle is None else oracle.get("ttft_p90")
    if t_or is None or not t_gie or a_gie is None:
        return None
    if t_or <= LEAD_TTFT_RATIO * t_gie or a_gie + LEAD_ATTAINMENT <= 1.0:
        return None
    return (f"not reached by the greedy TTFT oracle: its TTFT p90 is {t_or / t_gie:.3f}x "
            f"gie-default's ({t_or:,.1f} vs {t_gie:,.1f} ms), gie-default attainment "
            f"{100 * a_gie:.1f}%")  # fmt: skip


def oracle_cell(row: dict[str, dict]) -> dict | None:
    """The cell of the greedy TTFT oracle with the least TTFT p90 among those that ran in
    ``row`` (a cell's policies; None: none ran)."""
    ran = [row[p] for p in GREEDY_ORACLES if row.get(p, {}).get("ttft_p90") is not None]
    return min(ran, key=lambda c: c["ttft_p90"]) if ran else None


def _oracle_ratio(row: dict[str, dict]) -> float | None:
    """The best greedy TTFT oracle's TTFT p90 over gie-default's in a cell (None: none
    ran)."""
    t_or = (oracle_cell(row) or {}).get("ttft_p90")
    t_gie = row.get("gie-default", {}).get("ttft_p90")
    return None if t_or is None or not t_gie else round(t_or / t_gie, 4)


def done_means_1(
    cs: Sequence[dict], policy: str = "headroom", baselines: Sequence[str] = BASELINES,
    floors: dict[str, dict] | None = None,
) -> dict:  # fmt: skip
    """Issue 18's done-means 1 for ``policy``: every failing cell, with the numbers; with
    ``floors`` (workload -> its TTFT floor) a failing lead check no router could pass says
    why (``unattainable``), and one the greedy TTFT oracle (when run) does not pass either
    says so (``oracle``). Reference policies are never baselines."""
    floors = floors or {}
    baselines = [b for b in baselines if not is_reference(b)]
    by = _index(cs)
    failures: list[dict] = []
    checked = 0
    for (w, load), row in by.items():
        me = row.get(policy)
        base = {b: row[b] for b in baselines if b in row}
        if me is None or not base:
            continue
        checked += 1
        for m, tol in TOLERANCE.items():
            vals = [(c[m], b) for b, c in base.items() if c.get(m) is not None]
            if me.get(m) is None or not vals:
                continue
            best, vs = min(vals)
            if me[m] > tol * best:
                failures.append({"workload": w, "load": load, "check": f"{m} <= {tol:g}x best",
                                 "value": me[m], "best": best, "vs": vs,
                                 "ratio": round(me[m] / best, 3) if best else None})  # fmt: skip
        gie = row.get("gie-default")
        if load >= LEAD_FROM_LOAD and gie is not None:
            t_me, t_gie = me.get("ttft_p90"), gie.get("ttft_p90")
            a_me, a_gie = me.get("attainment"), gie.get("attainment")
            ttft_ok = t_me is not None and t_gie is not None and t_me <= LEAD_TTFT_RATIO * t_gie
            att_ok = a_me is not None and a_gie is not None and a_me >= a_gie + LEAD_ATTAINMENT
            if not (ttft_ok or att_ok):
                failures.append({
                    "workload": w, "load": load,
                    "check": f"ttft_p90 <= {LEAD_TTFT_RATIO:g}x gie-default or attainment >= "
                             f"gie-default + {100 * LEAD_ATTAINMENT:g} pts",
                    "value": t_me, "best": t_gie, "vs": "gie-default",
                    "ratio": round(t_me / t_gie, 3) if t_me is not None and t_gie else None,
                    "points": None if a_me is None or a_gie is None
                    else round(100 * (a_me - a_gie), 2),
                    "unattainable": lead_unattainable(gie, floors.get(w)),
                    "oracle": lead_not_reached_by_oracle(gie, oracle_cell(row)),
                    "oracle_ratio": _oracle_ratio(row),
                })  # fmt: skip
    return {"policy": policy, "baselines": [b for b in baselines], "cells_checked": checked,
            "pass": checked > 0 and not failures, "failures": failures,
            "unattainable": sum(1 for f in failures if f.get("unattainable")),
            "not_reached_by_oracle": sum(1 for f in failures if f.get("oracle"))}  # fmt: skip


def across_seeds(per_seed: dict[int, dict]) -> dict:
    """Done-means 1 of one suite run at several lab seeds (``per_seed``: seed -> its
    :func:`done_means_1`): the failing checks per seed, those a router could pass (not
    marked "no router can") summed over the seeds (what a candidate default is scored by on
    ``train``), and every failing check with the seeds it fails on."""
    seeds = sorted(per_seed)
    rows: dict[tuple, dict] = {}
    counts = {}
    for seed in seeds:
        dm = per_seed[seed]
        fails = dm["failures"]
        counts[str(seed)] = {"failing": len(fails), "unattainable": dm["unattainable"],
                             "attainable": len(fails) - dm["unattainable"],
                             "not_reached_by_oracle": dm["not_reached_by_oracle"]}  # fmt: skip
        for f in fails:
            key = (f["workload"], f["load"], f["check"])
            row = rows.setdefault(key, {"workload": f["workload"], "load": f["load"],
                                        "check": f["check"], "seeds": [], "ratios": [],
                                        "unattainable": False})  # fmt: skip
            row["seeds"].append(seed)
            row["ratios"].append(f.get("ratio"))
            row["unattainable"] = row["unattainable"] or bool(f.get("unattainable"))
    return {"seeds": seeds, "per_seed": counts,
            "attainable_total": sum(c["attainable"] for c in counts.values()),
            "failures": list(rows.values())}  # fmt: skip


def seeds_markdown(a: dict, name: str = "") -> str:
    """``seeds.md`` of a suite run at several seeds (:func:`across_seeds`)."""
    seeds = a["seeds"]
    out = [f"# Lab suite `{name}` at seeds {', '.join(map(str, seeds))}", "",
           "Done-means 1 for `headroom` at each lab seed (each seed's cells: seed-S/summary.md). "
           "*Attainable*: failing checks not marked \"no router can\".", "",
           "| seed | failing checks | no router can | attainable | not passed by the greedy oracle |",
           "|---:|---:|---:|---:|---:|"]  # fmt: skip
    for s in seeds:
        c = a["per_seed"][str(s)]
        out.append(f"| {s} | {c['failing']} | {c['unattainable']} | {c['attainable']} | "
                   f"{c['not_reached_by_oracle']} |")  # fmt: skip
    out += ["", f"Attainable failing checks summed over the seeds: **{a['attainable_total']}**.",
            "", "| workload | load | check | fails on seeds | ratio per seed | no router can |",
            "|---|---:|---|---|---|---|"]  # fmt: skip
    for f in a["failures"]:
        ratios = " / ".join("–" if r is None else f"{r:.2f}" for r in f["ratios"])
        out.append(f"| {f['workload']} | {f['load']:g} | {f['check']} | "
                   f"{', '.join(map(str, f['seeds']))} ({len(f['seeds'])} of {len(seeds)}) | "
                   f"{ratios} | {'yes' if f['unattainable'] else ''} |")  # fmt: skip
    return "\n".join(out) + "\n"


def summarise(results: Sequence[dict], workloads: Sequence[dict], meta: dict) -> dict:
    policies = list(dict.fromkeys(r["policy"] for r in results))
    cs = cells(results)
    floors = {w["name"]: w["floor"] for w in workloads if w.get("floor")}
    dm = done_means_1(cs, floors=floors) if "headroom" in policies else None
    return {**meta, "policies": policies, "workloads": list(workloads), "cells": cs,
            "worst_case": worst_case(cs, policies), "done_means_1": dm}  # fmt: skip


# --- markdown -----------------------------------------------------------------------------
def workloads_markdown(workloads: Sequence[dict]) -> str:
    lines = [
        "| workload | split | family | requests | prompt mean / p90 / max | output mean / p90 "
        "| block repeats | rate req/s | arrival CV | saturation req/s | SLO TTFT / TPOT ms "
        "| TTFT floor p50 / p90 ms |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for w in workloads:
        c, s, slo = w["characterisation"], w["saturation"], w["slo"]
        p, o = c["prompt"], c["output"]
        rep = "–" if c["block_repeat"] is None else f"{100 * c['block_repeat']:.1f}%"
        lines.append(
            f"| {w['name']} | {w['split']} | {w['family']} | {c['requests']:,} "
            f"| {p['mean']:,.0f} / {p['p90']:,.0f} / {p['max']:,} | {o['mean']:,.0f} / "
            f"{o['p90']:,.0f} | {rep} | {fmt_cell(c['rate_rps'], 2)} | {fmt_cell(c['arrival_cv'], 2)} "
            f"| {fmt_cell(s['cluster_rps'], 2)} | {slo['ttft_ms']:g} / {slo['tpot_ms']:g} "
            f"| {_floor(w.get('floor'))} |"
        )
    lines += [
        "",
        "TTFT floor: each request alone on an idle pod whose prefix cache holds every "
        "block an earlier request brought (no router can beat it).",
        "",
        "Parameters:",
        "",
    ]
    for w in workloads:
        spec = w["spec"]
        seed = f" (seed {spec['seed']})" if "seed" in spec else ""
        lines.append(f"- `{w['name']}`{seed}: {spec['description']}")
    return "\n".join(lines) + "\n"


def _floor(f: dict | None) -> str:
    return "–" if not f else f"{fmt_cell(f['p50'], 1)} / {fmt_cell(f['p90'], 1)}"


def cells_markdown(cs: Sequence[dict]) -> str:
    lines = []
    for w in dict.fromkeys(c["workload"] for c in cs):
        lines += [
            f"#### {w}", "",
            "| load | policy | TTFT p50 | TTFT p90 | TTFT p99 | TPOT p90 | E2E p90 "
            "| attainment | goodput rps | TTFT p99 w/ SLO | sacrificed |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]  # fmt: skip
        for c in cs:
            if c["workload"] != w:
                continue
            lines.append(
                f"| {c['load']:g} | {policy_label(c['policy'])} | {fmt_cell(c['ttft_p50'])} | {fmt_cell(c['ttft_p90'])} "
                f"| {fmt_cell(c['ttft_p99'])} | {fmt_cell(c['tpot_p90'], 1)} | {fmt_cell(c['e2e_p90'])} "
                f"| {fmt_cell(c['attainment'], pct=True)} | {fmt_cell(c['goodput'], 2)} "
                f"| {fmt_cell(c['ttft_p99_slo'])} | {fmt_cell(c.get('sacrificed_share'), pct=True)} |"
            )
        lines.append("")
    return "\n".join(lines)


def worst_markdown(wc: dict[str, dict[str, dict]]) -> str:
    shown = ("ttft_p50", "ttft_p90", "ttft_p99", "tpot_p90", "e2e_p90", "attainment", "goodput")
    lines = [
        "| policy | " + " | ".join(shown) + " |",
        "|---|" + "---:|" * len(shown),
    ]
    for p, per in wc.items():
        cols = []
        for m in shown:
            x = per.get(m)
            if x is None:
                cols.append("–")
                continue
            extra = f", {x['points']:+.1f} pts" if "points" in x else ""
            cols.append(f"{x['ratio']:.2f}x{extra} vs {x['vs']} ({x['workload']} @ {x['load']:g})")
        lines.append(f"| {policy_label(p)} | " + " | ".join(cols) + " |")
    return "\n".join(lines) + "\n"


def done_markdown(dm: dict | None) -> str:
    if dm is None:
        return "Done-means 1 not checked (no `headroom` runs).\n"
    head = (
        f"Done-means 1 for `{dm['policy']}` vs the best of {', '.join(dm['baselines'])}: "
        f"{dm['cells_checked']} (workload, load) cells, **{'pass' if dm['pass'] else 'FAIL'}**"
        f" ({len(dm['failures'])} failing checks"
        + (f", {dm['unattainable']} of them no router could pass" if dm.get("unattainable")
           else "")
        + (f", {dm['not_reached_by_oracle']} of them not passed by the greedy TTFT oracle "
           "either" if dm.get("not_reached_by_oracle") else "")
        + ").\n"
    )  # fmt: skip
    if not dm["failures"]:
        return head
    lines = [head, "| workload | load | check | headroom | best | vs | ratio | attainment pts "
             "| why |", "|---|---:|---|---:|---:|---|---:|---:|---|"]  # fmt: skip
    for f in dm["failures"]:
        pts = f.get("points")
        lines.append(
            f"| {f['workload']} | {f['load']:g} | {f['check']} | {fmt_cell(f['value'], 1)} "
            f"| {fmt_cell(f['best'], 1)} | {f['vs']} | {fmt_cell(f['ratio'], 2)} "
            f"| {'–' if pts is None else f'{pts:+.1f}'} | {_why(f)} |"
        )
    return "\n".join(lines) + "\n"


def _why(f: dict) -> str:
    parts = [f.get("unattainable"), f.get("oracle")]
    r = f.get("oracle_ratio")
    if not f.get("oracle") and r is not None and r <= LEAD_TTFT_RATIO:
        parts.append(f"the greedy TTFT oracle reaches it: TTFT p90 {r:.3f}x gie-default's")
    return "; ".join(x for x in parts if x)


def policy_label(policy: str) -> str:
    """A policy's name in the tables (reference policies marked)."""
    return f"{policy} (reference)" if is_reference(policy) else policy


def versus_markdown(cs: Sequence[dict], policy: str = "headroom",
                    baselines: Sequence[str] = BASELINES) -> str:  # fmt: skip
    """Per (workload, load): ``policy``'s TTFT/TPOT/E2E p90 over the best baseline's (which
    one in brackets), its TTFT p90 over gie-default's and its attainment minus
    gie-default's, in points (done-means 1, cell by cell); when the greedy TTFT oracle ran,
    its TTFT p90 over gie-default's (a reference, not a baseline)."""
    by = _index(cs)
    oracle = any(oracle_cell(row) is not None for row in by.values())
    lines = [
        f"| workload | load | {policy} TTFT p90 ms | TTFT p90 / best | TPOT p90 / best "
        "| E2E p90 / best | TTFT p90 / gie-default | attainment | vs gie-default |"
        + (" greedy oracle TTFT p90 / gie-default |" if oracle else ""),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if oracle else ""),
    ]
    baselines = [b for b in baselines if not is_reference(b)]
    for (w, load), row in by.items():
        me = row.get(policy)
        base = {b: row[b] for b in baselines if b in row}
        if me is None or not base:
            continue

        def vs(m: str, me: dict = me, base: dict = base) -> str:
            vals = [(c[m], b) for b, c in base.items() if c.get(m) is not None]
            if me.get(m) is None or not vals:
                return "–"
            best, b = min(vals)
            return f"{me[m] / best:.2f} ({b})" if best else "–"

        gie = row.get("gie-default", {})
        t, tg = me.get("ttft_p90"), gie.get("ttft_p90")
        a, ag = me.get("attainment"), gie.get("attainment")
        to = (oracle_cell(row) or {}).get("ttft_p90")
        lines.append(
            f"| {w} | {load:g} | {fmt_cell(t)} | {vs('ttft_p90')} | {vs('tpot_p90')} "
            f"| {vs('e2e_p90')} | {'–' if t is None or not tg else f'{t / tg:.2f}'} "
            f"| {fmt_cell(a, pct=True)} | {'–' if a is None or ag is None else f'{100 * (a - ag):+.1f} pts'} |"
            + (f" {'–' if to is None or not tg else f'{to / tg:.2f}'} |" if oracle else "")
        )
    return "\n".join(lines) + "\n"


VERSUS_METRICS = ("ttft_p90", "ttft_p99", "tpot_p90", "e2e_p90", "ttft_p99_slo")


def versus_reference(
    cs: Sequence[dict], reference: str, baselines: Sequence[str] = BASELINES,
    floors: dict[str, dict] | None = None,
) -> list[dict]:  # fmt: skip
    """Each policy that is neither a baseline nor a lab reference, against ``reference`` (a
    profile that ran on the same cells, usually the shipped one): its done-means-1 failing
    checks (all, no router can, attainable), the geometric mean over the cells both ran of
    its latency metrics over the reference's (``VERSUS_METRICS``; ``ttft_p99_slo`` from the runs
    with SLO headers, the sacrificed requests' tail), and the mean of its SLO
    attainment minus the reference's, in points. The reference's own row has ratios 1. This
    is what a rule for a candidate reads ("fewer attainable failing checks and TTFT p90 and
    TPOT p90 geomeans within 1.02x")."""
    by = _index(cs)
    policies = list(dict.fromkeys(c["policy"] for c in cs))
    if reference not in policies:
        raise ValueError(f"the reference {reference!r} did not run (policies: {policies})")
    out = []
    for pol in policies:
        if pol in baselines or is_reference(pol):
            continue
        dm = done_means_1(cs, policy=pol, baselines=baselines, floors=floors)
        unattainable = sum(1 for f in dm["failures"] if f.get("unattainable"))
        row: dict = {"policy": pol, "cells": dm["cells_checked"],
                     "failing": len(dm["failures"]), "unattainable": unattainable,
                     "attainable": len(dm["failures"]) - unattainable}  # fmt: skip
        both = [r for r in by.values() if pol in r and reference in r]
        for m in VERSUS_METRICS:
            logs = [math.log(r[pol][m] / r[reference][m]) for r in both
                    if r[pol].get(m) and r[reference].get(m)]  # fmt: skip
            row[m] = round(math.exp(sum(logs) / len(logs)), 3) if logs else None
        att = [r[pol]["attainment"] - r[reference]["attainment"] for r in both
               if r[pol].get("attainment") is not None
               and r[reference].get("attainment") is not None]  # fmt: skip
        row["attainment_pts"] = round(100 * sum(att) / len(att), 2) if att else None
        row["failures"] = dm["failures"]
        out.append(row)
    return out


def versus_failures_markdown(rows: Sequence[dict]) -> str:
    """Each policy's failing checks from :func:`versus_reference`, one line per check:
    the cell, the check, the policy's value against the best baseline's (or gie-default's
    and the attainment points, for a lead check) and why when no router can pass it."""
    lines = ["| policy | workload | load | check | value | best | vs | ratio | points | why |",
             "|---|---|---:|---|---:|---:|---|---:|---:|---|"]  # fmt: skip
    for r in rows:
        for f in r.get("failures", []):
            pts, ratio = f.get("points"), f.get("ratio")
            lines.append(
                f"| {r['policy']} | {f['workload']} | {f['load']:g} | {f['check']} "
                f"| {fmt_cell(f['value'])} | {fmt_cell(f['best'])} | {f['vs']} "
                f"| {'–' if ratio is None else f'{ratio:.3f}'} "
                f"| {'–' if pts is None else f'{pts:+.1f}'} | {f.get('unattainable') or ''} |"
            )
    return "\n".join(lines) + "\n"


CELL_METRICS = ("ttft_p90", "ttft_p99", "tpot_p90", "e2e_p90", "attainment")


def versus_cells(
    cs: Sequence[dict], reference: str, baselines: Sequence[str] = BASELINES
) -> list[dict]:
    """Cell by cell, each candidate (neither a baseline, a lab reference nor ``reference``)
    against ``reference`` on the cells both ran, in the suite's order: ``{workload, load,
    policy, <metric>: {reference, candidate}}`` for TTFT p90 and p99, TPOT p90, E2E p90 (ms)
    and SLO attainment (a share), where both have the metric. The trade of a candidate reads here,
    each gain beside the costs in its own row."""
    by = _index(cs)
    policies = list(dict.fromkeys(c["policy"] for c in cs))
    if reference not in policies:
        raise ValueError(f"the reference {reference!r} did not run (policies: {policies})")
    out = []
    for pol in policies:
        if pol == reference or pol in baselines or is_reference(pol):
            continue
        for (w, load), row in by.items():
            if pol not in row or reference not in row:
                continue
            cell: dict = {"workload": w, "load": load, "policy": pol}
            for m in CELL_METRICS:
                a, b = row[reference].get(m), row[pol].get(m)
                if a is not None and b is not None:
                    cell[m] = {"reference": a, "candidate": b}
            out.append(cell)
    return out


def versus_cells_markdown(rows: Sequence[dict], reference: str) -> str:
    """The rows of :func:`versus_cells` as a markdown table: latencies as ``reference ->
    candidate (ratio)``, attainment in percent and its change in points."""

    def latency(c: dict, m: str) -> str:
        v = c.get(m)
        if v is None:
            return "–"
        a, b = v["reference"], v["candidate"]
        ratio = f" ({b / a:.2f}x)" if a else ""
        return f"{a:,.1f} -> {b:,.1f}{ratio}"

    def attainment(c: dict) -> str:
        v = c.get("attainment")
        if v is None:
            return "–"
        a, b = 100 * v["reference"], 100 * v["candidate"]
        return f"{a:.1f} -> {b:.1f} ({b - a:+.1f} pts)"

    lines = [
        f"| policy | workload | load | TTFT p90 ms ({reference} -> policy) | TTFT p99 ms | "
        "TPOT p90 ms | E2E p90 ms | attainment % |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in rows:
        lines.append(f"| {c['policy']} | {c['workload']} | {c['load']:g} | "
                     f"{latency(c, 'ttft_p90')} | {latency(c, 'ttft_p99')} | "
                     f"{latency(c, 'tpot_p90')} | "
                     f"{latency(c, 'e2e_p90')} | {attainment(c)} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def versus_reference_markdown(rows: Sequence[dict], reference: str) -> str:
    """The rows of :func:`versus_reference` as a markdown table."""
    lines = [
        "| policy | cells | attainable failing checks (no router can) | "
        + " | ".join(f"{m} / {reference}" for m in VERSUS_METRICS)
        + " | attainment - reference (mean, points) |",
        "|---|---:|---:|" + "---:|" * len(VERSUS_METRICS) + "---:|",
    ]
    for r in rows:
        ratios = " | ".join("–" if r[m] is None else f"{r[m]:.3f}" for m in VERSUS_METRICS)
        att = "–" if r["attainment_pts"] is None else f"{r['attainment_pts']:+.2f}"
        lines.append(f"| {r['policy']} | {r['cells']} | {r['attainable']} ({r['unattainable']}) "
                     f"| {ratios} | {att} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def summary_markdown(s: dict) -> str:
    head = (
        f"# Lab suite `{s['suite']}`\n\n"
        f"{s['pods']} pods, {s['profile']}, seed {s['seed']}, streaming {s['streaming']}, "
        f"loads {', '.join(f'{x:g}' for x in s['loads'])} (of each workload's saturation "
        f"estimate), SLO mode {s['slo']}, commit {s.get('commit') or '?'}. Latencies in ms "
        "from the runs without SLO headers; attainment, goodput and TTFT p99 w/ SLO from the "
        "runs with them.\n"
    )
    if any(is_reference(p) for p in s["policies"]):
        head += (
            f"\n`{ORACLE_TTFT}` (reference) is the lab's greedy TTFT oracle "
            "(bench/lab/oracle.py): each request goes to the pod where forking every engine "
            "shows the least TTFT for it, given the requests already dispatched; "
            f"`{ORACLE_TTFT_BLIND}` (reference) the same without foreseeing the engines' "
            f"noise; `{ORACLE_PREDICTED}` (reference) the headroom-learned profile with the "
            "noise-blind oracle's TTFTs as its predictions. Not product policies and never a "
            "baseline or the best other policy; the first two are greedy, so not a lower "
            "bound over all routers.\n"
        )
    return "\n".join([
        head, "## Workloads", "", workloads_markdown(s["workloads"]),
        "## Worst case against the best other policy", "", worst_markdown(s["worst_case"]),
        "## Issue 18 done-means 1", "", done_markdown(s["done_means_1"]),
        "", versus_markdown(s["cells"]) if "headroom" in s["policies"] else "",
        "## Cells", "", cells_markdown(s["cells"]),
    ])  # fmt: skip


def plot(s: dict, out_dir) -> list:
    """``suite_ttft_p90.png`` (runs without SLO headers) and ``suite_attainment.png`` (with
    them): one panel per workload, one line per policy over the loads."""
    import math
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cs, policies = s["cells"], s["policies"]
    names = list(dict.fromkeys(c["workload"] for c in cs))
    written = []
    for metric, fname, label, log in (
        ("ttft_p90", "suite_ttft_p90.png", "TTFT p90 ms (no SLO headers)", True),
        ("attainment", "suite_attainment.png", "SLO attainment (with SLO headers)", False),
    ):
        if not any(c.get(metric) is not None for c in cs):
            continue
        cols = min(3, len(names))
        rows = math.ceil(len(names) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), dpi=100,
                                 squeeze=False)  # fmt: skip
        for ax, w in zip(axes.flat, names, strict=False):
            for p in policies:
                pts = sorted((c["load"], c[metric]) for c in cs
                             if c["workload"] == w and c["policy"] == p
                             and c.get(metric) is not None)  # fmt: skip
                if pts:
                    ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o",
                            label=policy_label(p))  # fmt: skip
            ax.set_title(w, fontsize=9)
            if log:
                ax.set_yscale("log")
            ax.grid(True, alpha=0.3)
            ax.tick_params(labelsize=7)
        for ax in list(axes.flat)[len(names) :]:
            ax.axis("off")
        axes.flat[0].legend(fontsize=6)
        fig.suptitle(f"suite {s['suite']}: {label} vs load", fontsize=10)
        fig.tight_layout()
        path = Path(out_dir) / fname
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written

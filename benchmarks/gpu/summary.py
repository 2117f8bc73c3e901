"""The targets (PASS/FAIL lines) and the Markdown summary of a report."""

from __future__ import annotations

from .common import BUDGET_S, CAPTURED, GPU_KINDS, GRID_METHODS, GRID_MODE, TARGETS, plan


def targets(steps: dict) -> list[dict]:
    def res(name):
        e = steps.get(name)
        return e.get("result") if e and e["status"] == "ok" else None

    def overhead(name, v):
        return {"name": name, "value": f"{v:+.2f}%",
                "target": f"<= {TARGETS['overhead_pct_max']:g}% (paper 5.9%), goal {TARGETS['overhead_pct_goal']:g}%",
                "pass": v <= TARGETS["overhead_pct_max"], "goal": v <= TARGETS["overhead_pct_goal"]}

    def peak(name, v):
        return {"name": name, "value": f"{100 * v:.1f}%",
                "target": f">= {100 * TARGETS['peak_frac_min']:g}%, goal {100 * TARGETS['peak_frac_goal']:g}%",
                "pass": v >= TARGETS["peak_frac_min"], "goal": v >= TARGETS["peak_frac_goal"]}

    out = []
    matmul = res("matmul_peak")
    for step, mode in (("throughput", "eager"), ("captured_step", CAPTURED), ("compiled_step", "compile")):
        t = res(step)
        if not t or "overhead_pct" not in t:
            continue
        out.append(overhead(f"BayesNCL time overhead over NCL, train.graph={mode}", t["overhead_pct"]))
        for m in ("ncl", "bayesncl"):
            frac = peak_frac(t.get(m), matmul)
            if frac is not None:
                out.append(peak(f"{m} achieved / bf16 matmul peak, train.graph={mode}", frac))
    f = res("official_feed")
    if f and "ratio" in f:
        out.append({"name": "ours / official-style feed (NCL)", "value": f"{f['ratio']:.2f}x",
                    "target": f">= {TARGETS['feed_ratio_min']:g}x", "pass": f["ratio"] >= TARGETS["feed_ratio_min"]})
    return out


def peak_frac(rate: dict | None, matmul: dict | None) -> float | None:
    """A step's achieved TFLOP/s over the measured bf16 matmul peak (None where either is missing)."""
    if not rate or not matmul or "achieved_tflops" not in rate:
        return None
    return rate["achieved_tflops"] / matmul["tflops"]


PENDING = "pending: no GPU"


def on_cuda(report: dict) -> bool:
    """Whether the report's figures were measured on a GPU (a CPU's run only shows the steps work)."""
    return str(report["info"]["device"]).startswith("cuda")


def figures(report: dict, budget_s: float | None = None) -> list[dict]:
    """The figures a lent GPU is for, the grid's first (its eager step), each with its goal, its value (measured
    on CUDA, else "pending: no GPU": a CPU's numbers are not these figures; "not measured" where its step did not
    run) and the minute of the check it is planned by on each GPU kind ({kind: minute or "not planned"},
    common.plan, at the report's budget on CUDA, else `budget_s` or the default)."""
    steps = report["steps"]
    cuda = on_cuda(report)
    budget = budget_s or (report["info"].get("budget_s") if cuda else None)
    when = {k: plan(k, budget if budget and budget != float("inf") else BUDGET_S) for k in GPU_KINDS}
    cap = CAPTURED

    def res(name):
        e = steps.get(name)
        return e.get("result") if e and e["status"] == "ok" else None

    def value(step, fn):
        if not cuda:
            return PENDING
        r = res(step)
        if r is None:
            return f"not measured: step {step} {steps.get(step, {}).get('status', 'not run')}"
        try:
            return fn(r)
        except (KeyError, TypeError) as e:
            return f"not measured: {step} has no {e}"

    def rates(t):
        return "; ".join(f"{m} {_fmt(t[m]['img_per_s'], 0)} img/s" for m in t.get("methods", GRID_METHODS))

    def peaks(r):
        t = res("throughput")
        return ", ".join(f"{m} {100 * peak_frac(t[m], r):.1f}%" for m in ("ncl", "bayesncl"))

    def captured(c):
        t = res("throughput")
        return "; ".join(f"{m} {_fmt(c[m]['img_per_s'], 0)} captured / {_fmt(t[m]['img_per_s'], 0)} eager img/s "
                         f"({c[m]['img_per_s'] / t[m]['img_per_s']:.2f}x)" for m in ("ncl", "bayesncl"))

    def tests(r):
        return r.get("note") or f"{r['passed']} of {r['tests']} passed"

    g = TARGETS
    rows = [
        ("cuda_tests", "CUDA-only tests", "all pass", tests),
        ("throughput", f"training images/s, train.graph={GRID_MODE} (the paper grid's), each method", "measured",
         rates),
        ("throughput", f"BayesNCL time overhead over NCL, train.graph={GRID_MODE}", f"<= {g['overhead_pct_goal']:g}%",
         lambda t: f"{t['overhead_pct']:+.2f}%"),
        ("sigterm_resume", f"resume bit-identical to an uninterrupted run, train.graph={GRID_MODE}, "
                           "train.deterministic", "identical",
         lambda r: "identical" if r["identical"] else f"differs ({r.get('max_abs_diff')})"),
        ("grid_estimate", "CPUs per GPU for the ImageNet-100 feed (prepared copy)", f"<= {g['cpus_per_gpu_goal']}",
         lambda r: str(r["imagenet_cpus_per_gpu"])),
        ("grid_estimate", "config/paper.yaml's pretraining GPU-hours at the measured rate", "measured",
         lambda r: f"{_fmt(r['pretrain_gpu_hours'])} ({r.get('rates_from', '')})"),
        ("matmul_peak", f"share of the measured bf16 matmul peak, train.graph={GRID_MODE}",
         f">= {100 * g['peak_frac_goal']:g}%", peaks),
        ("captured_step", f"an option: the step captured (train.graph={cap}) against eager", "captured >= eager",
         captured),
    ]
    return [{"name": name, "goal": goal, "value": value(step, fn),
             "planned": {k: f"{when[k][step]:.1f}" if when[k][step] is not None else "not planned" for k in GPU_KINDS}}
            for step, name, goal, fn in rows]


def _fmt(x, nd=1) -> str:
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    return "-" if x is None else str(x)


def key_figures(name: str, r: dict) -> str:
    if name == "cuda_tests":
        return r.get("note") or f"{r['passed']} of {r['tests']} passed"
    if name in ("sigterm_resume", "captured_resume"):
        if "note" in r:
            return r["note"]
        if "interrupted_at" not in r:
            return f"resumed weights identical: {r.get('identical')} ({r.get('error', '')[:200]})"
        a = r["interrupted_at"]
        return (f"exit {a['exit']} at epoch {a['epoch'] + 1} step {a['step']}; resumed weights identical: "
                f"{r['identical']}")
    if name == "matmul_peak":
        return f"{r['n']}^3 {r['dtype']}: {_fmt(r['tflops'])} TFLOP/s"
    if name in ("throughput", "captured_step"):
        if "note" in r:
            return r["note"]
        parts = [f"{m} {_fmt(r[m]['img_per_s'], 0)} img/s ({_fmt(r[m].get('ms_per_step'), 2)} ms), "
                 f"{_fmt(r[m]['achieved_tflops'])} TFLOP/s, peak {_fmt(r[m]['peak_mem_mb'], 0)} MiB"
                 for m in r.get("methods", ("ncl", "bayesncl"))]
        return f"{r.get('graph', 'eager')}: " + "; ".join(parts) + f"; overhead {r['overhead_pct']:+.2f}%"
    if name == "step_profile":
        d = r["bayesncl_minus_ncl_ms"]
        names = r.get("phases", ("augment", "forward", "backward", "optimizer"))
        s = ("eager ms per step, NCL / BayesNCL: "
             + ", ".join(f"{k} {_fmt(r['ncl'][k], 2)} / {_fmt(r['bayesncl'][k], 2)}" for k in (*names, "total"))
             + "; BayesNCL's extra: " + ", ".join(f"{k} {d[k]:+.2f}" for k in (*names, "total")))
        if f"ncl_{CAPTURED}_ms" in r:
            s += (f"; captured ({CAPTURED}) NCL / BayesNCL {_fmt(r[f'ncl_{CAPTURED}_ms'], 2)} / "
                  f"{_fmt(r[f'bayesncl_{CAPTURED}_ms'], 2)} ms, overhead {r[f'overhead_pct_{CAPTURED}']:+.2f}%")
        return s
    if name == "compiled_step":
        if "note" in r:
            return r["note"]
        return (", ".join(f"{m} {_fmt(r[m]['img_per_s'], 0)} img/s ({_fmt(r[m]['ms_per_step'], 2)} ms, compile "
                          f"{_fmt(r[m].get('compile_s'))} s)" for m in ("ncl", "bayesncl"))
                + f"; overhead {r['overhead_pct']:+.2f}%")
    if name == "official_feed":
        s = f"{_fmt(r['img_per_s'], 0)} img/s with {r['workers']} workers"
        return s + (f"; ours {_fmt(r['ratio'], 2)}x" if "ratio" in r else "")
    if name == "imagenet_input":
        s = (f"JPEG: decode {_fmt(r['decode_img_per_s_1core'], 0)} img/s/core; "
             f"1 worker {_fmt(r['img_per_s_1_worker'], 0)}, "
             f"{r['workers']} workers {_fmt(r['img_per_s_all_workers'], 0)} img/s "
             f"({_fmt(r['img_per_s_per_worker_all'], 0)} per worker)")
        if "prepared_fetch_img_per_s_1core" in r:
            s += (f"; prepared copy: read {_fmt(r['prepared_fetch_img_per_s_1core'], 0)} img/s/core, "
                  f"1 thread {_fmt(r['prepared_img_per_s_1_worker'], 0)}, {r['workers']} threads "
                  f"{_fmt(r['prepared_img_per_s_all_workers'], 0)} img/s, same pixels: {r['prepared_identical']}")
        return s
    if name == "cli_end_to_end":
        return (f"{r['epochs']} epochs in {r['pretrain_seconds']} s, evaluate {r['evaluate_seconds']} s; "
                f"SC {_fmt(r['sc'])}, probe top-1 {_fmt(r['probe_top1'])}")
    if name == "grid_estimate":
        if "note" in r:
            return f"{r['jobs']} jobs priced; {r['note']}"
        s = f"{r['jobs']} jobs, {_fmt(r['pretrain_gpu_hours'])} GPU-h pretraining + {_fmt(r['probe_gpu_hours'])} probe"
        return s + (f"; ImageNet-100: {r['imagenet_cpus_per_gpu']} CPUs/GPU" if "imagenet_cpus_per_gpu" in r else "")
    return ""


def markdown(report: dict) -> str:
    i = report["info"]
    lines = [f"# GPU check: {i.get('gpu', i['device'])}{' (tiny)' if i['tiny'] else ''}", "",
             f"date {i['date']}, commit {i['commit']}"
             + (f" ({i['commit_source']})" if i.get("commit") == "unknown" and i.get("commit_source") else "")
             + f", torch {i['torch']}, timm {i.get('timm')}"
             + (f" (CUDA {i['cuda']})" if "cuda" in i else "") + f", {i['cpus']} CPUs"
             + (f", total {i['total_seconds']} s" if "total_seconds" in i else "")
             + (f"; steps marked (previous run) are from {i['previous_run']['date']}, commit "
                f"{i['previous_run']['commit']}" if i.get("previous_run") else ""), "",
             "| step | status | seconds | figures |", "|---|---|---|---|"]
    for name, e in report["steps"].items():
        if e["status"] == "ok":
            try:
                fig = key_figures(name, e["result"])
            except (KeyError, TypeError) as exc:
                fig = f"(summary failed: {exc})"
        else:
            fig = e.get("error", "")[:300].replace("\n", " ")
        status = e["status"] + (" (previous run)" if e.get("from_previous") else "")
        lines.append(f"| {name} | {status} | {e['seconds']} | {fig.replace('|', '/')} |")
    if i.get("budget_s"):  # what the budget left out, by name
        left = {label: [n for n, e in report["steps"].items() if e["status"] == status]
                for status, label in (("skipped", "not started"), ("stopped", "stopped at its end"))}
        lines += ["", f"Budget: {i['budget_s']:g} s from the process's start, planned for {i.get('plan', '-')}"
                  + (f"; {i['startup_s']:g} s before the first step" if "startup_s" in i else "")
                  + "".join(f"; {label}: {', '.join(names)}" for label, names in left.items() if names) + "."]
    figs = figures(report)
    last = {k: max((float(f["planned"][k]) for f in figs if f["planned"][k] != "not planned"), default=0.0)
            for k in GPU_KINDS}
    lines += ["", "## Figures", "",
              "Planned: every figure within "
              + ", ".join(f"{last[k]:.1f} minutes on one {k.upper()}" for k in GPU_KINDS)
              + " (benchmarks/gpu/common.py, PLANNED_S).", "",
              "| figure | goal | value | " + " | ".join(f"planned on {k.upper()} (minute)" for k in GPU_KINDS) + " |",
              "|---|---|---|" + "---|" * len(GPU_KINDS)]
    lines += [f"| {f['name']} | {f['goal']} | {f['value']} | " + " | ".join(f["planned"][k] for k in GPU_KINDS)
              + " |" for f in figs]
    if not on_cuda(report):
        # a CPU's rates would read as FAILs and as a cluster's GPU-hours: they only show the steps ran
        return "\n".join(lines + ["", "## Targets and the paper grid's estimate", "",
                                   f"{PENDING}: a run on {i['device']} checks that each step of the script works; "
                                   "its rates are not a GPU's, so no target is judged and no GPU-hours are "
                                   "estimated from them."]) + "\n"
    if report["targets"]:
        lines += ["", "## Targets", ""]
        lines += [f"- {'PASS' if t['pass'] else 'FAIL'}{' (goal met)' if t.get('goal') else ''}: {t['name']} "
                  f"{t['value']} (target {t['target']})" for t in report["targets"]]
    g = report["steps"].get("grid_estimate", {})
    if g.get("status") == "ok":
        r = g["result"]
        lines += ["", "## Paper grid (config/paper.yaml), estimated from the measured rate", "",
                  "| dataset | jobs | pretrain GPU-h | probe GPU-h | minutes per run (NCL / BayesNCL) |",
                  "|---|---|---|---|---|"]
        for ds, d in r["per_dataset"].items():
            mins = d.get("minutes_per_run", {})
            lines.append(f"| {ds} | {d['jobs']} | {_fmt(d['gpu_hours'])} | {_fmt(d['probe_gpu_hours'])} | "
                         f"{_fmt(mins.get('ncl'))} / {_fmt(mins.get('bayesncl'))} |")
        p = r["paper_minutes_cifar100"]
        lines += ["", f"Total: {r['jobs']} pretraining jobs, {_fmt(r['pretrain_gpu_hours'])} GPU-hours, plus "
                  f"{_fmt(r['probe_gpu_hours'])} for the paper-protocol linear probes. Paper, CIFAR-100 "
                  f"(200 epochs): {p['ncl']} / {p['bayesncl']} minutes per run (NCL / BayesNCL)."]
        if "imagenet_cpus_per_gpu" in r:
            lines.append(f"ImageNet-100 needs about {_fmt(r['imagenet_img_per_s_needed'], 0)} images/s per GPU: "
                         f"{r['imagenet_cpus_per_gpu']} CPUs per GPU from the prepared copy (reading cores + 1; "
                         f"decoding the JPEGs: {r.get('imagenet_cpus_per_gpu_jpeg', '-')}).")
    return "\n".join(lines) + "\n"

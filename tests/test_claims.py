"""The claims table (bayesncl.report.claims) on constructed runs.csv rows: the verdict rule of METHOD.md
section 9 against a naive reference, every claim row on a full grid, flags (fast; no torch)."""

from __future__ import annotations

import json
import random
import statistics

import pandas as pd
import pytest

from bayesncl.report import claims, summary, tables

MAIN = "table1;table2;figure3"
VARIANTS = {  # the demo's variants (config/config.yaml) -> run settings
    "SimCLR": {"method": "cl"},
    "NCL": {"method": "ncl"},
    "Top-k NCL": {"method": "topk_ncl"},
    "BayesNCL (STE)": {"method": "bayesncl", "gate": "ste"},
    "BayesNCL (Gumbel)": {"method": "bayesncl", "gate": "gumbel"},
    "Soft gate": {"method": "bayesncl", "gate": "soft"},
    "w/o detach": {"method": "bayesncl", "gate": "ste", "detach": 0.0},
    "1-layer head": {"method": "bayesncl", "gate": "ste", "head_depth": 1.0},
    "3-layer head": {"method": "bayesncl", "gate": "ste", "head_depth": 3.0},
}


def row(variant, seed, sets, dataset="synthetic", arch="resnet18", **values):
    settings = {"gate": "ste" if VARIANTS[variant]["method"] == "bayesncl" else "", "detach": 1.0,
                "head_depth": 2.0, "rho": 0.8, "lambda": 3e-5, "proj_dim": 64.0, **VARIANTS[variant]}
    settings.update({k: values.pop(k) for k in list(values) if k in settings})
    rid = f"{dataset}/{arch}/{variant}/" + "/".join(f"{k}~{settings[k]}" for k in ("rho", "lambda", "proj_dim"))
    return {"run_id": f"{rid}/seed~{seed}", "dataset": dataset, "arch": arch, "variant": variant, "sets": sets,
            "seed": seed, "weights_sha": f"{rid}/{seed}", **settings, **values}


def frame(rows) -> pd.DataFrame:
    return summary.prepare(pd.DataFrame(rows))


def full_grid(datasets=("synthetic", "cifar100"), seeds=(0, 1, 2)) -> pd.DataFrame:
    """Every set of the demo grid with plausible values (BayesNCL ahead on SC by a wide margin)."""
    rows = []
    sc = {"SimCLR": 10.0, "NCL": 20.0, "Top-k NCL": 22.0, "BayesNCL (STE)": 40.0, "BayesNCL (Gumbel)": 35.0,
          "Soft gate": 12.0, "w/o detach": 30.0, "1-layer head": 33.0, "3-layer head": 34.0}
    for d in datasets:
        for v in ("SimCLR", "NCL", "Top-k NCL", "BayesNCL (STE)", "BayesNCL (Gumbel)"):
            for s in seeds:
                m = VARIANTS[v]["method"]
                rows.append(row(v, s, MAIN + (";table3;table6;table7" if v in ("NCL", "BayesNCL (STE)") else "")
                                + (";table4" if v in ("BayesNCL (STE)", "BayesNCL (Gumbel)") else ""),
                                dataset=d, sc=sc[v] + s, se_sum=3.0 - sc[v] / 100, se_mean=2.9, se_freq=2.8,
                                act=100.0 if m == "cl" else 25.0 - s, alive=64.0 - s, probe_top1=60.0 + sc[v] / 10 + s / 10,
                                probe_top5=95.0 + s / 10, probe_protocol="fast", ret_K=64.0,
                                **{f"ret_p{k}": 50.0 + sc[v] / 4 - k / 10 + s / 10 for k in (1, 3, 5, 10)},
                                bg_acc=93.3 + s / 10, bg_protocol="fast",
                                bg_dominated_zplus=0.2 + s / 100, bg_dominated_feature=0.1 + s / 100,
                                closed_bg=0.6 if m == "bayesncl" else float("nan"),
                                closed_cls=0.2 if m == "bayesncl" else float("nan"),
                                topk_bound=0.7 if m == "topk_ncl" else float("nan"),
                                dyn_epochs="[10, 20, 30]",
                                dyn_af_gv=json.dumps([0.1, 0.5, 0.6 if v == "NCL" else 0.2]),
                                dyn_gv_sc=json.dumps([0.1, -0.3, -0.5 if v == "NCL" else -0.1]),
                                dyn_af_sc="[0.0, 0.1, 0.2]",
                                gflops=1.416 if m != "bayesncl" else 1.419, params_m=11.2, sec_per_epoch=21.3 + s,
                                img_per_s=12345.0, peak_mem_mb=80123.0,
                                train_minutes=70.95 + s / 10 if m != "bayesncl" else 72.1 + s / 10))
        for v in ("Soft gate", "w/o detach", "1-layer head", "3-layer head"):
            rows.append(row(v, 0, "table4", dataset=d, sc=sc[v], se_sum=2.5, act=30.0, probe_top1=61.0))
        for v in ("NCL", "BayesNCL (STE)"):
            rows.append(row(v, 0, "table5", dataset=d, arch="resnet50", sc=sc[v] + 1, se_sum=2.5, act=20.0,
                            probe_top1=66.0, ret_p10=55.0))
            for D in (32.0, 64.0, 128.0):
                rows.append(row(v, 0, "figure4a", dataset=d, proj_dim=D, sc=sc[v] * D / 64, probe_top1=60.0))
        rows.append(row("BayesNCL (STE)", 0, "figure4b", dataset=d, sweep="rho;lambda", sc=40.0, probe_top1=60.0))
        for rho, s_ in ((0.5, 30.0), (0.65, 36.0), (0.95, 25.0)):
            rows.append(row("BayesNCL (STE)", 0, "figure4b", dataset=d, rho=rho, sweep="rho", sc=s_,
                            probe_top1=60.0))
        for lam, s_ in ((0.0, 33.0), (1e-5, 38.0), (1e-4, 20.0)):
            rows.append(row("BayesNCL (STE)", 0, "figure4b", dataset=d, **{"lambda": lam}, sweep="lambda", sc=s_,
                            probe_top1=60.0))
    return frame(rows)


def comparisons(df, dataset="synthetic") -> dict[str, list]:
    out: dict[str, list] = {}
    for d, comps in claims.claims_rows(df):
        if d == dataset:
            for c in comps:
                out.setdefault(c.claim, []).append(c)
    return out


def one(df, cid, dataset="synthetic"):
    (c,) = comparisons(df, dataset)[cid]
    return c


# --------------------------------------------------------------------------- the verdict rule
def naive_verdict(left: list[float], right: list[float], up: bool) -> str:
    """METHOD.md section 9, written out."""
    if not left or not right:
        return "not run"
    ml, mr = statistics.mean(left), statistics.mean(right)
    agree = ml > mr if up else ml < mr
    if not agree:
        return "does not hold"
    if len(left) >= 2 and len(right) >= 2 and abs(ml - mr) > max(statistics.stdev(left), statistics.stdev(right)):
        return "holds"
    return "same direction, within noise"


def _sc_pair(bayes, ncl, extra=()):
    return frame([row("BayesNCL (STE)", s, "table1", sc=v) for s, v in enumerate(bayes)]
                 + [row("NCL", s, "table1", sc=v) for s, v in enumerate(ncl)] + list(extra))


@pytest.mark.parametrize("bayes, ncl, expected", [
    ([40.0, 41.0, 42.0], [30.0, 31.0, 32.0], "holds"),
    ([33.0, 30.0, 36.0], [30.0, 31.0, 32.0], "same direction, within noise"),  # diff 2 < std 3
    ([40.0], [30.0, 31.0, 32.0], "same direction, within noise"),                # one seed
    ([30.0, 31.0], [30.0, 31.0], "does not hold"),                                # equal means
    ([20.0, 21.0, 22.0], [30.0, 31.0, 32.0], "does not hold"),
    ([], [30.0, 31.0], "not run"),
])
def test_verdict_each_outcome(bayes, ncl, expected):
    c = one(_sc_pair(bayes, ncl), "1a")
    assert c.verdict == expected == naive_verdict(bayes, ncl, up=True)
    assert (c.left.label, c.right.label) == (("BayesNCL (STE)" if bayes else "BayesNCL"), "NCL")
    assert c.left.stat.n == len(bayes) and c.right.stat.n == len(ncl)


def test_verdict_matches_naive_rule_on_random_rows():
    rng = random.Random(0)
    for i in range(300):
        bayes = [round(rng.uniform(20, 40), 2) for _ in range(rng.randint(0, 3))]
        ncl = [round(rng.uniform(20, 40), 2) for _ in range(rng.randint(1, 3))]
        up = bool(i % 2)
        got = claims.verdict(tables.stat(bayes, 2), tables.stat(ncl, 2), "up" if up else "down")
        assert got == naive_verdict(bayes, ncl, up=up), (bayes, ncl, up)
        if i < 15:  # the same through runs.csv rows and the table (SC: higher, SE: lower)
            assert one(_sc_pair(bayes, ncl), "1a").verdict == naive_verdict(bayes, ncl, up=True), (bayes, ncl)
            se = frame([row("BayesNCL (STE)", s, "table1", se_sum=v) for s, v in enumerate(bayes)]
                       + [row("NCL", s, "table1", se_sum=v) for s, v in enumerate(ncl)])
            assert one(se, "1c").verdict == naive_verdict(bayes, ncl, up=False), (bayes, ncl)


def test_tolerance_claims():
    def bg(bayes, ncl):
        return frame([row("BayesNCL (STE)", s, "table6", bg_acc=v) for s, v in enumerate(bayes)]
                     + [row("NCL", s, "table6", bg_acc=v) for s, v in enumerate(ncl)])
    assert one(bg([93.0, 94.0], [93.5, 93.9]), "8").verdict == "holds"          # |diff| 0.2
    assert one(bg([92.0, 92.2], [93.0, 93.2]), "8").verdict == "holds"          # |diff| 1.0 exactly
    assert one(bg([95.0, 95.2], [93.0, 93.2]), "8").verdict == "does not hold"  # 2 points apart
    assert one(bg([93.4], [93.3]), "8").verdict == "same direction, within noise"  # one seed each
    assert one(bg([93.4], []), "8").verdict == "not run"

    def cost(bayes_min, ncl_min, bayes_gf=1.419, ncl_gf=1.416):
        return frame([row("BayesNCL (STE)", s, "table7", train_minutes=v, gflops=bayes_gf) for s, v in enumerate(bayes_min)]
                     + [row("NCL", s, "table7", train_minutes=v, gflops=ncl_gf) for s, v in enumerate(ncl_min)])
    df = cost([75.12, 75.2], [70.95, 71.0])  # the paper's: +5.9%
    assert one(df, "12a").verdict == "holds" and one(df, "12b").verdict == "holds"
    df = cost([80.0, 80.1], [70.95, 71.0], bayes_gf=1.5)  # +12.7% time, +5.9% FLOPs
    assert one(df, "12a").verdict == "does not hold" and one(df, "12b").verdict == "does not hold"


def test_dynamics_claim_reads_the_last_epoch():
    def dyn(v, s, af_gv, gv_sc):
        return row(v, s, "table3", dyn_epochs="[10, 20]", dyn_af_gv=json.dumps(af_gv), dyn_gv_sc=json.dumps(gv_sc))
    # The first epoch says the opposite: only the last recorded epoch counts.
    df = frame([dyn("NCL", s, [-0.9, 0.6 + s / 10], [0.9, -0.5 - s / 10]) for s in range(2)]
               + [dyn("BayesNCL (STE)", s, [0.9, 0.1 + s / 100], [-0.9, -0.1]) for s in range(2)])
    assert one(df, "7a").verdict == "holds" and one(df, "7b").verdict == "holds"
    assert one(df, "7c").verdict == "holds" and one(df, "7d").verdict == "holds"
    assert one(df, "7a").left.stat.mean == pytest.approx(0.65)
    # BayesNCL flips the sign but keeps the strength: not a weakening (absolute values).
    flipped = frame([dyn("NCL", s, [0.0, 0.6], [0.0, -0.5]) for s in range(2)]
                    + [dyn("BayesNCL (STE)", s, [0.0, -0.6 - s / 100], [0.0, 0.5]) for s in range(2)])
    assert one(flipped, "7c").verdict == "does not hold"
    # A missing (NaN) value at the last epoch is not replaced by an earlier epoch's.
    undefined = frame([dyn("NCL", s, [0.6, None], [-0.5, None]) for s in range(2)])
    assert one(undefined, "7a").verdict == "not run"


def test_inverted_u_and_widths():
    def sweep(points, param="lambda"):
        return frame([row("BayesNCL (STE)", 0, "figure4b", sweep=param, sc=sc, **{param: x}) for x, sc in points])
    u = sweep([(0.0, 10.0), (1e-5, 20.0), (3e-5, 15.0), (1e-4, 5.0)])
    c = one(u, "11a")
    assert c.verdict == "same direction, within noise"  # one seed per point
    assert (c.left.stat.mean, c.right.stat.mean) == (20.0, 10.0)  # best inner point vs the better end
    assert one(sweep([(0.0, 10.0), (1e-5, 20.0), (3e-5, 25.0), (1e-4, 30.0)]), "11a").verdict == "does not hold"
    assert one(sweep([(0.0, 10.0), (1e-5, 20.0)]), "11a").verdict == "not run"  # no inner point
    assert one(u, "11b").verdict == "not run"  # no rho sweep
    # The sweep column decides: the default point (rho 0.8, lambda 3e-5) as a point of the rho sweep only,
    # as when the lambda sweep's values leave out the default, is no lambda point.
    lam = [row("BayesNCL (STE)", 0, "figure4b", sweep="lambda", sc=sc, **{"lambda": x})
           for x, sc in ((0.0, 10.0), (1e-5, 20.0), (1e-4, 5.0))]
    rho = [row("BayesNCL (STE)", 0, "figure4b", sweep="rho", sc=sc, rho=x) for x, sc in ((0.5, 30.0), (0.8, 50.0))]
    c = one(frame(lam + rho), "11a")
    assert "inner $\\lambda$ = 1e-05" in c.text and (c.left.stat.mean, c.right.stat.mean) == (20.0, 10.0)

    widths = frame([row(v, s, "figure4a", proj_dim=D, sc=base * D / 32 + s)
                    for v, base in (("NCL", 10.0), ("BayesNCL (STE)", 20.0)) for D in (32.0, 64.0) for s in range(2)])
    comps = comparisons(widths)
    assert [c.verdict for c in comps["10a"]] == ["holds"]
    assert len(comps["10b"]) == 2 and all(c.verdict == "holds" for c in comps["10b"])
    assert comps["10a"][0].left.stat.mean == pytest.approx(40.5) and comps["10a"][0].right.stat.mean == pytest.approx(20.5)


# --------------------------------------------------------------------------- the whole table
EVERY_ROW = ["1a", "1b", "1c", "2a", "2b", "3", "4", "5", "6a", "6b", "6c", "7a", "7b", "7c", "7d", "8", "9",
             "10a", "10b", "10b", "10b", "11a", "11b", "12a", "12b"]


def test_every_claim_row_on_a_full_grid(tmp_path):
    df = full_grid()
    blocks = claims.claims_rows(df)
    assert [d for d, _ in blocks] == ["synthetic", "cifar100"]
    for _, comps in blocks:
        assert [c.claim for c in comps] == EVERY_ROW
        assert all(c.verdict != "not run" for c in comps), [(c.claim, c.verdict) for c in comps]
    v = {c.claim: c.verdict for c in blocks[0][1]}
    assert v["1a"] == v["12a"] == v["8"] == "holds" and v["5"] == "same direction, within noise"  # 1 soft-gate seed
    written = claims.write_claims(df, tmp_path)
    assert sorted(p.name for p in written) == ["claims.md", "claims.tex"]
    md = (tmp_path / "claims.md").read_text()
    for cid in set(EVERY_ROW):
        assert sum(line.split("|")[1].strip() == cid for line in md.splitlines() if line.startswith("|")) == \
            2 * EVERY_ROW.count(cid)
    assert "| *Synthetic*" in md and "36.14 vs 14.93" in md
    tex = (tmp_path / "claims.tex").read_text()
    assert r"\begin{table*}" in tex and r"$\geq$" in tex


def test_claims_not_run_anywhere_are_listed():
    df = frame([row("NCL", 0, "table1", sc=1.0)])
    blocks = claims.claims_rows(df)
    assert [d for d, _ in blocks] == ["synthetic", ""]
    every = [c.claim for _, comps in blocks for c in comps]
    assert sorted(set(every)) == sorted(set(EVERY_ROW))
    assert all(c.verdict == "not run" for _, comps in blocks for c in comps)
    assert "Not run on any dataset" in claims.render_claims(df, "md")


# --------------------------------------------------------------------------- flags
def _topk_grid(topk_bound):
    return frame([row("NCL", s, "table1", sc=20.0 + s) for s in range(2)]
                 + [row("Top-k NCL", s, "table1", sc=20.0 + s, topk_bound=b) for s, b in enumerate(topk_bound)]
                 + [row("BayesNCL (STE)", s, "table1", sc=30.0 + s) for s in range(2)])


def test_topk_run_whose_mask_never_bound_is_flagged():
    df = _topk_grid([0.0, 0.0])
    tex, md = tables.render_table(df, "table1"), tables.render_table(df, "table1", "md")
    assert r"Top-k NCL$^\ddagger$ &" in tex
    assert "identical to NCL: the top-k mask never bound" in tex and "identical to NCL" in md
    assert "Top-k NCL‡" in md
    # A flagged row is no result of its own: never bold, even where it would be best.
    best = _topk_grid([0.0, 0.0])
    best.loc[best["variant"] == "Top-k NCL", "se_sum"] = 0.1
    best.loc[best["variant"] != "Top-k NCL", "se_sum"] = 0.5
    assert r"\mathbf" not in [line for line in tables.render_table(best, "table1").splitlines()
                               if line.startswith("Top-k")][0]
    c = one(df, "1b")
    assert c.right.repeats.startswith("identical to NCL") and "^\\ddagger" in claims.render_claims(df)
    # Partly bound: flagged with the count; bound in every run: not flagged.
    assert "never bound in 1 of 2 runs" in tables.render_table(_topk_grid([0.0, 0.4]), "table1")
    for kind in ("tex", "md"):
        assert "ddagger" not in tables.render_table(_topk_grid([0.3, 0.4]), "table1", kind)
        assert "‡" not in tables.render_table(_topk_grid([0.3, 0.4]), "table1", kind)


def test_rows_with_identical_weights_are_flagged():
    rows = [row("BayesNCL (STE)", s, "table4", sc=30.0 + s) for s in range(2)]
    twins = [dict(r, variant="w/o detach", detach=0.0, run_id=r["run_id"] + "x") for r in rows]  # same weights
    other = [row("Soft gate", s, "table4", sc=10.0) for s in range(2)]
    tex = tables.render_table(frame(rows + twins + other), "table4")
    assert r"w/o detach$^\ddagger$ &" in tex and "identical to BayesNCL (STE) (same trained weights)" in tex
    assert r"BayesNCL (STE) &" in tex  # the first of the twins is the result
    # Different weights in one seed: no flag.
    twins[1]["weights_sha"] = "other"
    assert "ddagger" not in tables.render_table(frame(rows + twins + other), "table4")

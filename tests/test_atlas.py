"""The feature atlas: per-dimension selection against naive loops, sheets with and without a gate, file-backed
images read by index, the CLI on constructed and on really trained runs, and the workflow's run choice."""

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from bayesncl.settings import config as C
from bayesncl.cli.main import main
from bayesncl.measures.arrays import EPS
from bayesncl.report import atlas

ROOT = Path(__file__).resolve().parents[1]


def _features(n=60, d=12, classes=4, backgrounds=3, seed=0):
    """Non-negative z+ with many exact zeros and ties, labels, backgrounds and a hard gate."""
    rng = np.random.default_rng(seed)
    z = rng.integers(0, 4, size=(n, d)).astype(np.float32) * (rng.random((n, d)) < 0.5)
    z[:, 0] = 0.0                      # a dead dim
    z[:3, 1] = [2.0, 0.0, 1.0]         # fires on two images only
    z[:, 1][3:] = 0.0
    z[:, 2] = 1.0                      # always on, all tied
    y = rng.integers(0, classes, size=n)
    bg = rng.integers(0, backgrounds, size=n)
    gate = (rng.random((n, d)) < 0.6).astype(np.uint8)
    return z, y, bg, gate


def _naive_top(z, j, k):
    order = sorted(range(z.shape[0]), key=lambda i: (-float(z[i, j]), i))
    return [i for i in order if z[i, j] > EPS][:k]


def test_top_images_match_a_naive_per_dimension_sort():
    z, *_ = _features()
    dims = list(range(z.shape[1]))
    for k in (1, 3, 8, 100):
        got = atlas.top_images(z, dims, k)
        for j in dims:
            assert got[j].tolist() == _naive_top(z, j, k), (j, k)
    assert atlas.top_images(z, [0], 5)[0].size == 0        # a dead dim shows no image
    assert atlas.top_images(z, [2], 4)[0].tolist() == [0, 1, 2, 3]  # ties: index order


def _naive_stats(z, y, bg, gate):
    n, d = z.shape
    out = []
    for j in range(d):
        fire = [i for i in range(n) if z[i, j] > EPS]
        if not fire:
            out.append(None)
            continue
        cls = [int(y[i]) for i in fire]
        bgs = [int(bg[i]) for i in fire]
        best_c = max(set(cls), key=lambda c: (cls.count(c), -c))
        best_b = max(set(bgs), key=lambda b: (bgs.count(b), -b))
        out.append({"count": len(fire), "sc": cls.count(best_c) / len(fire), "cls": best_c,
                    "bg_sc": bgs.count(best_b) / len(fire), "bg": best_b,
                    "closed": sum(gate[i, j] == 0 for i in fire) / len(fire)})
    return out


def test_dim_stats_and_ranking_match_naive_loops():
    z, y, bg, gate = _features()
    s = atlas.dim_stats(z, y, 4, gate, bg, 3)
    ref = _naive_stats(z, y, bg, gate)
    for j, r in enumerate(ref):
        if r is None:
            assert s.count[j] == 0 and np.isnan(s.sc[j]) and np.isnan(s.closed[j])
            continue
        assert s.count[j] == r["count"] and s.cls[j] == r["cls"] and s.bg[j] == r["bg"]
        assert s.sc[j] == pytest.approx(r["sc"]) and s.bg_sc[j] == pytest.approx(r["bg_sc"])
        assert s.closed[j] == pytest.approx(r["closed"])
    assert s.base_cls == pytest.approx(np.bincount(y).max() / len(y))
    # Lift rule (METHOD.md section 4): background-dominated when lift_bg > lift_cls and lift_bg > 0.
    b_cls, b_bg = np.bincount(y).max() / len(y), np.bincount(bg).max() / len(bg)
    for j, r in enumerate(ref):
        if r is not None:
            lift_c, lift_b = (r["sc"] - b_cls) / (1 - b_cls), (r["bg_sc"] - b_bg) / (1 - b_bg)
            assert bool(s.bg_dom[j]) == (lift_b > lift_c and lift_b > 0), j

    for k in (1, 3, 10):
        for key in ("sc", "closed"):
            naive = sorted((j for j, r in enumerate(ref) if r is not None),
                           key=lambda j: (ref[j]["count"] < k, -ref[j][key], -ref[j]["count"], j))
            got = atlas.rank_dims(getattr(s, key), s.count, 5, k).tolist()
            assert got == naive[:5], (key, k)
    # The dim firing on two images (SC 1 by chance) never heads the sheet while others have k images.
    assert 1 not in atlas.rank_dims(s.sc, s.count, 5, 3).tolist()


def _run(name, z, y, gate=None, bg=None, images=None):
    return atlas.AtlasRun(name=name, run_dir=Path("."), zplus=z, labels=y, num_classes=4, gate=gate,
                          backgrounds=bg, num_backgrounds=None if bg is None else 3, images=images,
                          class_names=["a", "b", "c", "d"], background_names=["x", "y", "z"])


def test_a_run_without_gate_gets_sheets_without_gate_fields():
    z, y, bg, gate = _features()
    ncl = atlas.build_sheets(_run("NCL", z, y, bg=bg), n=4, k=5)
    assert len(ncl) == 1 and "consistent" in ncl[0].title
    for row in ncl[0].rows:
        assert row.closed is None and "closed" not in row.fields
        assert {"dim", "SC", "active", "class", "background"} <= set(row.fields)
    bayes = atlas.build_sheets(_run("BayesNCL (STE)", z, y, gate=gate, bg=bg), n=4, k=5)
    assert len(bayes) == 2 and "closes most often" in bayes[1].title
    s = atlas.dim_stats(z, y, 4, gate, bg, 3)
    assert [r.dim for r in bayes[1].rows] == atlas.rank_dims(s.closed, s.count, 4, 5).tolist()
    for sheet in bayes:
        for row in sheet.rows:
            assert "closed" in row.fields
            assert row.closed.tolist() == (gate[row.images, row.dim] == 0).tolist()
    # Without a background label there is no background field.
    assert all("background" not in r.fields for r in atlas.build_sheets(_run("NCL", z, y), 3, 4)[0].rows)


class _CountingFiles(torch.utils.data.Dataset):
    """A file-backed set stand-in that records which images were read."""

    def __init__(self, n, size=40):
        self.n, self.size, self.read = n, size, []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.read.append(int(i))
        return torch.full((3, self.size, self.size), i % 256, dtype=torch.uint8), 0, -1


def test_file_backed_images_are_read_by_index_only(tmp_path):
    from bayesncl.data import ImageSet

    z, y, bg, gate = _features()
    files = _CountingFiles(len(y))
    ds = ImageSet(images=None, dataset=files, labels=torch.as_tensor(y), backgrounds=None, num_classes=4,
                  num_backgrounds=0, mean=(0.5,) * 3, std=(0.5,) * 3, crop_size=32, name="fake")
    files.stored_size = 40
    run = _run("BayesNCL (STE)", z, y, gate=gate, images=ds)
    paths = atlas.render_atlas([run], tmp_path / "atlas_fake", n=3, k=4, formats=("png",))
    shown = {int(i) for sheet in atlas.build_sheets(run, 3, 4) for row in sheet.rows for i in row.images}
    assert set(files.read) == shown and len(files.read) <= 2 * 3 * 4 < len(y)
    assert paths[0].read_bytes().startswith(b"\x89PNG")


# --------------------------------------------------------------------------- run folders and the CLI
def _run_dir(tmp_path, name, cfg, gate=True, seed=0):
    """A run folder as pretrain + evaluate leave it, with constructed features of the real test split."""
    from bayesncl.data import load_split

    test = load_split(cfg["data"], "test")
    rng = np.random.default_rng(seed)
    n, d = len(test), cfg["model"]["proj_dim"]
    z = (rng.random((n, d)) * (rng.random((n, d)) < 0.3)).astype(np.float32)
    z[:, 0] += 2.0 * (test.labels.numpy() == 1)  # a class dim
    run = tmp_path / name
    (run / "eval").mkdir(parents=True)
    (run / "config.resolved.yaml").write_text(C.dump_yaml(cfg))
    arrays = {"labels": test.labels.numpy(), "backgrounds": test.backgrounds.numpy(), "feature": z, "zplus": z}
    if gate:
        arrays["gate"] = (rng.random((n, d)) < 0.7).astype(np.uint8)
    np.savez(run / "eval" / "features.npz", **arrays)
    return run


def test_cli_draws_ncl_and_bayesncl_side_by_side(tmp_path, tiny_sets, capsys):
    ncl = _run_dir(tmp_path, "ncl", C.resolve(sets=tiny_sets + ["method.name=ncl"]), gate=False)
    bayes = _run_dir(tmp_path, "bayes", C.resolve(sets=tiny_sets + ["method.name=bayesncl"]), seed=1)
    out = tmp_path / "figs" / "atlas_synthetic"
    assert main(["atlas", "--run", str(ncl), str(bayes), "--out", str(out), "--dims", "3", "--images", "5"]) == 0
    for ext in ("pdf", "png"):
        data = (tmp_path / "figs" / f"atlas_synthetic.{ext}").read_bytes()
        assert len(data) > 5000 and data[:4] in (b"%PDF", b"\x89PNG")
    assert "atlas_synthetic.png" in capsys.readouterr().out
    # One NCL run alone, default output beside its evaluation.
    assert main(["atlas", "--run", str(ncl), "--dims", "2", "--images", "3"]) == 0
    assert (ncl / "eval" / "atlas.png").stat().st_size > 0


def test_cli_errors_name_the_file_and_the_fix(tmp_path, tiny_sets, capsys):
    cfg = C.resolve(sets=tiny_sets + ["method.name=ncl"])
    run = _run_dir(tmp_path, "ncl", cfg, gate=False)
    (run / "eval" / "features.npz").unlink()
    assert main(["atlas", "--run", str(run)]) == 2
    err = capsys.readouterr().err
    assert "features.npz: not found" in err and "bayesncl evaluate" in err and len(err.splitlines()) == 1

    run = _run_dir(tmp_path, "short", cfg, gate=False)
    with np.load(run / "eval" / "features.npz") as f:
        arrays = {k: f[k][:-1] for k in f.files}
    np.savez(run / "eval" / "features.npz", **arrays)
    assert main(["atlas", "--run", str(run)]) == 2
    assert "do not match" in capsys.readouterr().err

    assert main(["atlas", "--run", str(tmp_path / "missing")]) == 2
    assert "config.resolved.yaml: not found" in capsys.readouterr().err


def test_a_trained_run_gets_its_atlas(tmp_path, tiny_sets):
    """pretrain -> evaluate (features) -> atlas, the way the workflow runs them."""
    from bayesncl.evaluation.runner import evaluate
    from bayesncl.training.train import pretrain

    cfg = C.resolve(sets=tiny_sets + ["method.name=bayesncl", "train.epochs=1", "train.max_steps_per_epoch=1"])
    pretrain(cfg, tmp_path / "run", progress=False)
    evaluate(tmp_path / "run" / "model.pt", tmp_path / "run" / "eval", only=["features"], progress=False)
    assert main(["atlas", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "atlas_synthetic")]) == 0
    assert (tmp_path / "atlas_synthetic.png").stat().st_size > 0


def test_workflow_draws_ncl_and_bayesncl_ste_at_the_lowest_seed():
    from bayesncl.grid.expand import expand_grid

    wf = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    wf = copy.deepcopy(wf)
    wf["seeds"] = [3, 1]
    runs = expand_grid(wf)
    picked = atlas.atlas_runs(runs)
    assert list(picked) == ["synthetic"]
    ncl, bayes = (runs[r] for r in picked["synthetic"])
    assert ncl.config["method"]["name"] == "ncl" and ncl.config["seed"] == 1
    assert bayes.config["method"]["name"] == "bayesncl" and bayes.config["method"]["gate"] == "ste"
    assert bayes.config["seed"] == 1 and "table1" in bayes.sets

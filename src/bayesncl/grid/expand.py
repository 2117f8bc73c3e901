"""Expand the workflow config (config/*.yaml) into distinct runs, each with its resolved bayesncl config.

Snakemake (workflow/rules/common.smk) calls `expand_grid`; nothing else knows the grid. A run that several
tables use is one run: runs are keyed by their resolved training config. Run ids are readable paths:
`<dataset>/<method>/<key~value>/.../seed~N`, listing the settings that tell the run apart.
"""

from __future__ import annotations

import copy
import json
import warnings
from dataclasses import dataclass, field

from ..settings.config import ID_ORDER, RUNTIME_KEYS, flatten, keys_added, refuse_undeclared, resolve, topk_k
from ..core.errors import BayesNCLError, ConfigError
from ..settings.registry import DATASETS, METHODS, SECTION_SETTINGS, is_plugin, plugin_code
from ..core.yamlio import nest
import os
from typing import Sequence


def read_grid_files(paths: Sequence[str | os.PathLike], flag: str = "--grid") -> dict:
    """The workflow config given as one file or as a grid and its overlays (`--grid config/config.yaml
    config/sweeps.yaml`): each a YAML mapping, merged in order as Snakemake merges `--configfile A B`
    (merged). Not yet checked: see bayesncl.cli.workflow.check_grid."""
    from ..core.yamlio import load_yaml_file

    parts = []
    for path in paths:
        part = load_yaml_file(path, flag, "expected the workflow config, a YAML text file (results, seeds, "
                                          "defaults, datasets, variants, sets), e.g. config/config.yaml")
        if not isinstance(part, dict):
            raise ConfigError(f"{flag} {path}: expected a mapping (results, seeds, defaults, datasets, ...)")
        parts.append(part)
    return merged(*parts)


# How a run id names a setting where its key's last part is not the name.
SHORT = {"model.proj_dim": "D", "method.head_depth": "depth", "method.topk_k": "k", "train.dynamics_every": "dyn"}
# The smoke run (workflow config `smoke: true`): every job of the grid, each shrunk to minutes, so that every
# code path meets the user's data and cluster before the real run. Laid over every run config (and the base
# its id is read against, so ids stay those of the real grid); sets that record dynamics record them every epoch.
SMOKE = {"train": {"epochs": 1, "warmup_epochs": 0, "max_steps_per_epoch": 2},
         "eval": {"probe_epochs": 1, "max_images": 256}}
# Minutes each job of the smoke run asks of a scheduler (SLURM's --time; a run's evaluation submission asks the sum
# over its sections), whatever the rules and the profile ask for the real grid (the Snakefile sets it).
SMOKE_MINUTES = 10
# The tables and figures a set can feed (bayesncl.report renders each).
SETS = ("table1", "table2", "table3", "table4", "table5", "table6", "table7", "figure3", "figure4a", "figure4b",
        "saturation")


class GridWarning(UserWarning):
    """The grid is valid but probably not what was meant (two variants that are one run)."""


@dataclass
class Run:
    run_id: str
    config: dict
    # {set: the name the run's rows take there}: the set's own variant that gives this run (an imported checkpoint's
    # name; an untrained twin's, the name of the run it initialises in that set). Decided here, once, set by set:
    # every reader (runs.csv, the tables, claims and figures) takes it from here.
    labels: dict[str, str] = field(default_factory=dict)
    sets: list[str] = field(default_factory=list)
    # {set: the settings (a swept key's last part) that set sweeps with this run as one of its points}: decided here,
    # set by set, as labels are; a run shared by two sets may be a point of one's sweep and the default of another's.
    sweeps: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the grid should hear about this run (GridWarning)
    imported: dict = field(default_factory=dict)  # weights imported, not trained: {checkpoint, args, sha256}
    init_of: list[str] = field(default_factory=list)  # the sets whose runs' initialisation this run is (plan_init_runs)
    twin: str = ""  # the run id of its untrained twin, where it has one (plan_init_runs)
    pilot_of: list[str] = field(default_factory=list)  # the sets whose pilot seeds this run is (a grown grid; pilot_sets)


def merged(*parts: dict) -> dict:
    """``parts`` merged in order, each over the ones before it key by key: a mapping into a mapping, anything else
    replaced (Snakemake's rule for `--configfile A B`). The parts are not changed."""
    out: dict = {}
    for p in parts:
        out = _deep_update(out, copy.deepcopy(p or {}))
    return out


def _deep_update(a: dict, b: dict) -> dict:
    for k, v in b.items():
        if not isinstance(v, dict):
            a[k] = v
        elif v:  # a mapping over anything else replaces it
            a[k] = _deep_update(a[k] if isinstance(a.get(k), dict) else {}, v)
        else:  # an empty mapping changes nothing (as in Snakemake)
            a.setdefault(k, {})
    return a


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _identity(cfg: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in flatten(cfg).items() if not k.startswith(RUNTIME_KEYS)))


def run_id(cfg: dict, base: dict) -> str:
    """Readable id: dataset/method, then every identity setting that differs from the dataset's base."""
    flat, flat_base = flatten(cfg), flatten(base)
    method = cfg["method"]["name"]
    spec = METHODS[method]
    named = [k for k in flat if not k.startswith(RUNTIME_KEYS) and k not in ("seed", "method.name", "data.dataset")
             and (flat[k] != flat_base.get(k) or k in spec.always_named) and read_by(spec, k)]
    named.sort(key=lambda k: (ID_ORDER.index(k) if k in ID_ORDER else len(ID_ORDER), k))
    flat["method.topk_k"] = topk_k(cfg)  # the k in use, also when left to its default
    parts = [f"{SHORT.get(k, k.split('.')[-1])}~{_fmt(flat[k])}" for k in named]
    return "/".join([cfg["data"]["dataset"], method, *parts, f"seed~{cfg['seed']}"])


def read_by(spec, key: str) -> bool:
    """Whether a run of the method `spec` reads the dotted config key: method settings it ignores never tell its
    runs apart (run ids, rerun triggers); its own declared settings (MethodSpec.settings) it reads."""
    name = key[len("method."):]
    return not key.startswith("method.") or key == "method.name" or name in spec.reads or name in dict(spec.settings)


def trigger_config(cfg: dict, job: str = "pretrain", section: str | None = None) -> dict:
    """What decides a job's outputs, as its rerun trigger (workflow/rules/common.smk) and as what `bayesncl stale`
    compares with a run's recorded config. pretrain: the run config less where things run and how it is evaluated
    (config.RUNTIME_KEYS); evaluate: eval.* and the data settings that are not locations, less the settings of
    plugin sections other than `section`. Either way less the method settings the run's method does not read and
    every key at the value it had before the key existed (config.keys_added): adding a key whose old behaviour is
    its default changes no trigger; changing a default changes the trigger of exactly the runs that take it."""
    spec = METHODS[cfg["method"]["name"]]
    flat = flatten(cfg)
    added = keys_added(cfg)
    if job == "pretrain":
        keep = [k for k in flat if not k.startswith(RUNTIME_KEYS)]
    else:
        keep = [k for k in flat if (k.startswith("eval.") and _section_key(k, section))
                or (k.startswith("data.") and not k.startswith(RUNTIME_KEYS))]
    return nest({k: flat[k] for k in keep if read_by(spec, k) and not (k in added and flat[k] == added[k])})


def _section_key(key: str, section: str | None) -> bool:
    """Whether an eval.* key is read by the evaluation section `section` (None: by some section): a plugin section's
    own settings (eval.<name>.*) are read by that section alone."""
    owner = key.split(".")[1]
    return section is None or owner not in SECTION_SETTINGS or owner == section


def section_code(section: str) -> dict[str, str]:
    """{"section NAME": what identifies its code} for a plugin's evaluation section (plugins.code_identity); {} for
    the package's own."""
    from ..evaluation.sections import SECTIONS
    from ..settings.plugins import code_identity

    s = SECTIONS[section]
    return {f"section {section}": code_identity(s.module, s.version)} if is_plugin(s.module) else {}


def job_trigger(cfg: dict, job: str = "pretrain", section: str | None = None) -> str:
    """A job's rerun trigger as the workflow gives it (common.smk): trigger_config, and, where the job runs a
    plugin's code, what identifies that code (a pretraining job: its plugin method's and dataset's,
    registry.plugin_code; a plugin's evaluation section: its own). The package's own jobs' triggers are
    trigger_config alone, as they were before plugins had a code identity."""
    trig = trigger_config(cfg, job, section)
    code = plugin_code(cfg) if job == "pretrain" else section_code(section) if section else {}
    return json.dumps({**trig, "plugin_code": code} if code else trig, sort_keys=True)


def trigger_diff(recorded: dict, today: dict, job: str = "pretrain") -> list[tuple[str, object, object]]:
    """(key, recorded value, today's) for every trigger key where a run's recorded config (config.as_recorded)
    and today's differ; a key the record lacks and today's code does not declare as added reads "absent"."""
    a, b = flatten(trigger_config(recorded, job)), flatten(trigger_config(today, job))
    added = keys_added(today)

    def value(flat, k):  # a key left out at its old behaviour has that value
        return flat[k] if k in flat else added.get(k, "absent")

    return [(k, value(a, k), value(b, k)) for k in sorted(set(a) | set(b)) if value(a, k) != value(b, k)]


def prepared_copies(runs: dict[str, Run]) -> tuple[dict[str, tuple[list[str], dict]], dict[str, list[str]]]:
    """The prepared copies of file-backed datasets the runs read (DatasetSpec.prepared; `bayesncl prepare`, the
    workflow's rule prepare_data), each named by a tag, the hash of its folder: ({tag: (its manifests, the data
    settings that name it: those below and the dataset's own block data.<dataset>.*, where it has one)}, {run id:
    the tags of the copies it reads}). The workflow's marker of a copy is <results>/prepared/<tag>.txt."""
    import hashlib
    import os

    manifests = {rid: DATASETS[run.config["data"]["dataset"]].manifests(run.config["data"]) for rid, run in runs.items()}
    copies: dict[str, tuple[list[str], dict]] = {}
    of: dict[str, list[str]] = {}
    for rid, m in manifests.items():
        of[rid] = []
        if m:
            data = runs[rid].config["data"]
            tag = hashlib.sha256(os.path.dirname(m[0]).encode()).hexdigest()[:16]
            copies[tag] = (m, {k: v for k, v in data.items() if k in (
                "dataset", "root", "classes", "imagenet_stored_size", "cache_dir", data["dataset"])})
            of[rid] = [t for t, (ms, _) in copies.items() if ms == m]
    return copies, of


def smoke_results(results: str) -> str:
    """Where a smoke run writes: beside the real results, never into them (a folder already named so stays)."""
    results = results.rstrip("/")
    return results if results.endswith("-smoke") else results + "-smoke"


def _smoke(wf: dict, *parts: dict | None) -> dict | None:
    """The smoke overlay of a run made of `parts`: SMOKE and its dataset's own cut (DatasetSpec.smoke: ImageNet-100
    reads a subset of its classes, so its preparation decodes a tenth of the images)."""
    if not wf.get("smoke"):
        return None
    data = merged(*parts).get("data") or {}
    spec = DATASETS[data["dataset"]] if data.get("dataset") in DATASETS else None
    return merged(SMOKE, {"data": spec.smoke_data(data)} if spec is not None else None)


def seed_list(value, key: str) -> list[int]:
    """A seed list as integers. `snakemake --config seeds=[5,6,7]` hands the items over as strings."""
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{key}: expected a list of seeds such as [0, 1, 2], got {value!r}")
    out = []
    for v in value:
        if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, str) and v.strip().isdigit())):
            raise ConfigError(f"{key}: {v!r} is not a seed (a non-negative integer)")
        out.append(int(v))
    if len(set(out)) != len(out):
        raise ConfigError(f"{key}: {value!r} repeats a seed")
    return out


def set_seeds(wf: dict, set_name: str) -> list[int]:
    """The seeds of a set: its own `seeds` list, else the first `n_seeds` of the global list, else all of it.

    `n_seeds` keeps a set's seeds a prefix of the global list, so one `--config seeds=[...]` swaps the
    seeds of every set at once (the stability check: the same grid on another seed list). `n_seeds: null` is no
    n_seeds: how an overlay (`bayesncl plan`'s) gives such a set its own list."""
    spec = {k: v for k, v in wf["sets"][set_name].items() if not (k == "n_seeds" and v is None)}  # null: unset
    glob = seed_list(wf["seeds"], "seeds")
    if "seeds" in spec and "n_seeds" in spec:
        raise ConfigError(f"sets.{set_name}: give seeds or n_seeds, not both")
    if "n_seeds" in spec:
        n = spec["n_seeds"]
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"sets.{set_name}.n_seeds: {n!r} is not a positive integer")
        if n > len(glob):
            raise ConfigError(f"sets.{set_name}.n_seeds: {n} seeds asked for, but the global seed list has "
                              f"{len(glob)} ({glob}); lengthen `seeds` or lower n_seeds")
        return glob[:n]
    seeds = seed_list(spec["seeds"], f"sets.{set_name}.seeds") if "seeds" in spec else glob
    if not seeds:
        where = f"sets.{set_name}.seeds" if "seeds" in spec else "seeds"
        raise ConfigError(f"{where}: empty seed list; give at least one seed")
    return seeds


def _points(wf: dict):
    """Every point of the grid, a seed each: (set, dataset, variant, (swept key, its value), raw run config, its
    dynamics_every). Mappings are read in the order of their keys' names (sets, datasets, swept keys), lists in their
    own: the grid is the same whatever order its files or their merge gave the keys (Snakemake's config and the JSON
    handed to the report)."""
    for set_name, spec in sorted(wf["sets"].items()):
        if set_name not in SETS:
            raise ConfigError(f"sets.{set_name}: unknown set; the report renders {', '.join(SETS)}")
        datasets = spec.get("datasets", sorted(wf["datasets"]))
        seeds = set_seeds(wf, set_name)
        # Each swept key alone, the others at their defaults; no sweep is one point.
        sweeps = [(k, v) for k, vs in sorted((spec.get("sweep") or {}).items()) for v in vs] or [(None, None)]
        for ds in datasets:
            if ds not in wf["datasets"]:
                raise ConfigError(f"sets.{set_name}.datasets: unknown dataset {ds!r}; defined: "
                                  f"{', '.join(wf['datasets'])}")
            for variant in spec["variants"]:
                if variant not in wf["variants"]:
                    raise ConfigError(f"sets.{set_name}.variants: unknown variant {variant!r}; defined: "
                                      f"{', '.join(wf['variants'])}")
                for key, value in sweeps:
                    for seed in seeds:
                        parts = (wf["defaults"], wf["datasets"][ds], wf["variants"][variant],
                                 spec.get("overrides"), nest({key: value}) if key else None)
                        raw = merged(*parts, _smoke(wf, *parts), {"seed": seed})
                        dyn = spec.get("dynamics_every", 0)
                        yield set_name, ds, variant, (key, value), raw, min(dyn, 1) if _smoke(wf) else dyn


def expand_grid(wf: dict) -> dict[str, Run]:
    """Workflow config -> {run_id: Run}. Raises ConfigError naming the offending key.

    Recording gradient dynamics is part of a run's identity (it decides what the run writes), but a run that
    table3 needs with dynamics and table1 without is trained once, with them: the sets' requests are united
    before the run ids are made.
    """
    from ..settings.plugins import load_grid

    load_grid(wf)  # its methods and datasets, before any run config is validated
    missing = [k for k in ("seeds", "defaults", "datasets", "variants", "sets") if not isinstance(wf.get(k), (dict, list))]
    if missing:
        raise ConfigError(f"{missing[0]}: the workflow config has none; see config/config.yaml for the keys a grid "
                          "needs (seeds, defaults, datasets, variants, sets)")
    points: dict[tuple, dict] = {}  # training identity without dynamics_every -> what the sets ask of it
    for set_name, ds, variant, (key, value), raw, dyn in _points(wf):
        where = f"datasets.{ds} / variants.{variant} / sets.{set_name}"
        try:
            cfg = resolve(base=raw)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        refuse_undeclared(wf["variants"][variant], cfg["method"]["name"], lambda k: f"variants.{variant}.{k}")
        refuse_undeclared(nest({key: value}) if key else {}, cfg["method"]["name"],
                          lambda k: f"sets.{set_name}.sweep.{k}")
        ident = _identity({**cfg, "train": {**cfg["train"], "dynamics_every": 0}})
        p = points.setdefault(ident, {"cfg": cfg, "ds": ds, "labels": {}, "sets": [], "sweeps": {},
                                      "dyn": 0, "where": where, "notes": []})
        label = p["labels"].setdefault(set_name, variant)  # a set's rows show one name per run: its first variant
        if variant != label:
            note = (f"{where}: variant {variant!r} resolves to the same run config as {label!r} in sets.{set_name}; "
                    f"the run is trained once and its rows there show {label!r}")
            p["notes"].append(note)
            warnings.warn(note, GridWarning, stacklevel=2)
        if dyn and p["dyn"] and dyn != p["dyn"]:
            raise ConfigError(f"sets.{set_name}.dynamics_every: {dyn} conflicts with {p['dyn']} asked for the same "
                              f"run by {p['where']}; use one value")
        p["dyn"] = p["dyn"] or dyn
        if set_name not in p["sets"]:
            p["sets"].append(set_name)
        if key:  # the run is a point of this set's sweep of the key
            swept = p["sweeps"].setdefault(set_name, [])
            if key.split(".")[-1] not in swept:
                swept.append(key.split(".")[-1])
    runs: dict[str, Run] = {}
    bases: dict[str, dict] = {}  # run id -> the base its id is read against
    for p in points.values():
        cfg = p["cfg"]
        cfg["train"]["dynamics_every"] = p["dyn"]
        parts = (wf["defaults"], wf["datasets"][p["ds"]], {"method": {"name": cfg["method"]["name"]}})
        base = resolve(base=merged(*parts, _smoke(wf, *parts)))
        rid = run_id(cfg, base)
        if rid in runs:
            raise ConfigError(f"{p['where']}: two different configs map to run {rid!r}")
        runs[rid] = Run(rid, cfg, p["labels"], p["sets"], p["sweeps"], p["notes"])
        bases[rid] = base
    plan_init_runs(runs, bases)  # the grid's own runs only: imported weights have no initialisation of ours
    pilot = pilot_seeds(wf)
    if pilot:
        for run in runs.values():
            run.pilot_of = pilot_sets(pilot, run)
    runs.update(imported_runs(wf, runs))
    for run in runs.values():
        evaluation_sections(run)  # a set that needs a section its runs cannot have fails here
    return runs


def pilot_seeds(wf: dict) -> dict[str, list[int]]:
    """A grid grown by `bayesncl plan` (its overlay's `plan: {pilot: {set: [seeds]}}`): the seeds each set had in
    the pilot, whose verdicts were the first look (docs/METHOD.md section 9, "Planning"); {} for any other grid."""
    plan = wf.get("plan") or {}
    if not isinstance(plan, dict) or not isinstance(plan.get("pilot") or {}, dict):
        raise ConfigError("plan.pilot: expected {set: [seeds]}, as `bayesncl plan` writes it")
    out = {}
    for set_name, seeds in (plan.get("pilot") or {}).items():
        if set_name not in (wf.get("sets") or {}):
            raise ConfigError(f"plan.pilot.{set_name}: the grid has no set {set_name!r}; the plan was written for "
                              "another grid (rerun `bayesncl plan` with this grid's --grid)")
        out[set_name] = seed_list(seeds, f"plan.pilot.{set_name}")
    return out


def pilot_sets(pilot: dict[str, list[int]], run: Run) -> list[str]:
    """The sets (of the run's own, and of those it initialises) for which the run is pilot evidence: all of them where
    the pilot ran it (its seed among the pilot's seeds of one of its sets; a set the plan does not name is all pilot,
    it was not grown), none otherwise. A run is evidence of the stage in which it was first used, for every set: one
    that was pilot for one set and added for another would make the second look depend on the first."""
    seed = run.config.get("seed")
    sets = list(dict.fromkeys([*run.sets, *run.init_of]))
    return sets if any(s not in pilot or seed in pilot[s] for s in sets) else []


def variant_names(wf: dict) -> list[str]:
    """The names rows and claims may take: the grid's variants and the imported checkpoints' names."""
    return [*(wf.get("variants") or {}), *(e.get("name") for e in wf.get("imported") or [] if isinstance(e, dict))]


def imported_runs(wf: dict, grid_runs: dict[str, Run]) -> dict[str, Run]:
    """The workflow config's `imported:` checkpoints (the released code's, bayesncl.runs.released) as runs that
    are evaluated and reported beside the grid's, never trained: each takes the data, training and evaluation
    settings of its dataset, the model and method its checkpoint describes, and `overrides` for what the
    checkpoint leaves open. Its id: <dataset>/<method>/imported~<name>/seed~<seed>."""
    import re

    runs: dict[str, Run] = {}
    if not wf.get("imported"):
        return runs
    from ..runs.released import import_checkpoint  # torch: only for a grid that imports weights

    for i, entry in enumerate(wf.get("imported") or []):
        where = f"imported[{i}]"
        ds = entry["dataset"]
        if ds not in wf["datasets"]:
            raise ConfigError(f"{where}.dataset: unknown dataset {ds!r}; defined: {', '.join(wf['datasets'])}")
        bad = [s for s in entry["sets"] if s not in SETS]
        if bad:
            raise ConfigError(f"{where}.sets: unknown set {bad[0]!r}; the report renders {', '.join(SETS)}")
        if entry["name"] in wf["variants"]:
            raise ConfigError(f"{where}.name: {entry['name']!r} is a variant of the grid; give the imported "
                              "weights a name of their own (their rows must not mix with the grid's runs)")
        base = merged(wf["defaults"], wf["datasets"][ds], _smoke(wf),
                       {"seed": entry.get("seed", 0), "train": {"dynamics_every": 0}})
        try:
            imp = import_checkpoint(entry["checkpoint"], args=entry.get("args"), base=base,
                                    overrides=entry.get("overrides"))
        except BayesNCLError as e:  # a config or a checkpoint error: the user's to fix, named by its entry
            raise ConfigError(f"{where}: {e}") from None
        cfg = imp.config
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", entry["name"]).strip("_") or "weights"
        rid = f"{cfg['data']['dataset']}/{cfg['method']['name']}/imported~{slug}/seed~{cfg['seed']}"
        if rid in runs or rid in grid_runs:
            raise ConfigError(f"{where}: run {rid!r} already exists; give each imported checkpoint its own name")
        runs[rid] = Run(rid, cfg, dict.fromkeys(entry["sets"], entry["name"]), list(entry["sets"]), {},
                        [f"{where}: {flag}" for flag in imp.flags],
                        {"checkpoint": str(entry["checkpoint"]), "args": entry.get("args"), "sha256": imp.sha256})
    return runs


# The sets whose claims compare trained networks on a metric that exists before training (docs/METHOD.md section 9,
# "Controls"; report/claims.py reads them): SC, entropies, activation ratio, probe, retrieval, background probe.
# Table 3 (gradient dynamics), Table 7 (cost) and Figure 4b (a sweep of training settings) have none.
INIT_SETS = ("table1", "table2", "table4", "table5", "table6", "figure4a")


def init_config(cfg: dict, base: dict) -> dict:
    """The untrained twin of a run config (``base``: the one its id is read against), in its canonical form: the same
    seed builds the same network (training/train.py seeds before it builds the model), no step is taken (train.epochs 0
    saves the initialisation) and it records no dynamics; what only changes training is left at the grid's defaults (its
    method's MethodSpec.loss_only at ``base``'s values, a MethodSpec.init_same value at one of its equals; a method
    MethodSpec.init_as another becomes a run of that one, without its own settings). So variants that differ in such
    settings alone share one twin, and the twin's id and rerun trigger hold neither their values nor a loss-only
    plugin's code."""
    spec = METHODS[cfg["method"]["name"]]
    out = copy.deepcopy(cfg)
    out["train"]["epochs"] = 0
    out["train"]["dynamics_every"] = 0
    if spec.init_as:
        out, base, spec = _as_method(out, spec.init_as), _as_method(base, spec.init_as), METHODS[spec.init_as]
    for key in spec.loss_only:
        out["method"][key] = copy.deepcopy(base["method"][key])
    for key, values in spec.init_same:
        if out["method"][key] in values:
            out["method"][key] = base["method"][key] if base["method"][key] in values else values[0]
    return out


def _as_method(cfg: dict, name: str) -> dict:
    """``cfg`` as a run of method ``name``: validation drops the settings only the old method declares and lays in
    the new one's at their defaults."""
    return resolve(base=merged(cfg, {"method": {"name": name}}))


def plan_init_runs(runs: dict[str, Run], bases: dict[str, dict]) -> None:
    """Add to ``runs`` (in place) the untrained twin (init_config) of every run an INIT_SETS set reads, as an
    evaluation-only run: its pretrain job only saves the initialisation. Twins are keyed by their config like any
    run, so one initialisation serves every run that shares it (Tables 1, 2 and 6 read the same runs; variants that
    differ only in how they train) and an epochs-0 run the grid already has (the saturation set's) is reused. Each such
    run names its twin (``Run.twin``); nothing else changes: existing runs keep their ids, configs and sets (``init_of``
    and ``twin`` are part of no rerun trigger), so adding the twins reruns nothing."""
    by_identity = {_identity(r.config): r for r in runs.values()}
    for run in list(runs.values()):
        wanted = [s for s in run.sets if s in INIT_SETS]
        if not wanted:
            continue
        base = bases[run.run_id]
        cfg = init_config(run.config, base)
        twin = by_identity.get(_identity(cfg))
        if twin is None:
            if cfg["method"]["name"] != run.config["method"]["name"]:
                base = _as_method(base, cfg["method"]["name"])
            rid = run_id(cfg, base)
            if rid in runs:
                raise ConfigError(f"the untrained twin of run {run.run_id} maps to run {rid!r}, another config")
            twin = runs[rid] = by_identity[_identity(cfg)] = Run(rid, cfg)
        twin.init_of.extend(s for s in wanted if s not in twin.init_of)
        for s in wanted:  # named in each set as the run it initialises there
            twin.labels.setdefault(s, run.labels[s])
        run.twin = twin.run_id


# The evaluation sections a set's rows read beyond the ones every run gets (features, interpretability,
# retrieval, linear_probe); dynamics follow from train.dynamics_every, which the set turns on.
SET_SECTIONS = {"table6": ("background_probe",), "table7": ("cost",)}
PLAIN_RUN = ("features", "interpretability", "retrieval", "linear_probe")  # what no set or setting adds
EVERY_RUN = (*PLAIN_RUN, "dynamics")


def evaluation_sections(run: Run) -> list[str]:
    """The evaluation sections (bayesncl.evaluation.sections.SECTIONS) this run's sets need and its config allows."""
    from ..evaluation.sections import SECTIONS

    every = [*EVERY_RUN, *(name for name, s in SECTIONS.items() if s.every_run)]
    out = [name for name in every if SECTIONS[name].skip(run.config) is None]
    for set_name in dict.fromkeys([*run.sets, *run.init_of]):  # an untrained twin is evaluated as its runs are
        for name in SET_SECTIONS.get(set_name, ()):
            why = SECTIONS[name].skip(run.config)
            if why is not None:
                raise ConfigError(f"sets.{set_name}: run {run.run_id} needs the {name} section, but {why}")
            out.append(name)
    return [name for name in SECTIONS if name in out]


def evaluation_jobs(sections: dict[str, list[str]]) -> dict[str, tuple[list[str], list[str]]]:
    """With the grid's `evaluation_jobs: per_run` (one machine), a run's evaluation is one job (its sections one after
    another in one process, the model and splits loaded once): {rule name: (its sections, the runs that have exactly
    those)}, one rule per distinct list of sections (`sections`: run id -> evaluation_sections), named by
    evaluation_job. Else every section is a job of its own (workflow/rules/evaluate.smk)."""
    jobs: dict[str, tuple[list[str], list[str]]] = {}
    for rid, names in sections.items():
        jobs.setdefault(evaluation_job(names), (list(names), []))[1].append(rid)
    return jobs


def evaluation_job(names: list[str]) -> str:
    """The rule that runs the sections `names` of a run as one job (evaluation_jobs), named for how the list differs
    from PLAIN_RUN: `evaluate`, `evaluate_with_cost`, `evaluate_without_retrieval`, ..."""
    extra = [s for s in names if s not in PLAIN_RUN]
    lacking = [s for s in PLAIN_RUN if s not in names]
    return "_".join(["evaluate", *(["with", *extra] if extra else []), *(["without", *lacking] if lacking else [])])

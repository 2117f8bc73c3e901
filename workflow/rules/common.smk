# Everything the workflow's files share, defined here only: the grid expanded into distinct runs (bayesncl.grid.expand),
# the results paths and target lists, the grid config's name, the GPU resources, the prepared ImageNet-100 copies
# and the pages of the HTML report. The Snakefile includes this file first. Each rule file defines or imports
# everything else it uses and names on its first line what it takes from here (`from_common(...)`, checked when
# it is included; tests/test_workflow_rules.py checks that the list is exact).
import json
import logging
import os
import shlex
import shutil
import sys
from pathlib import Path

from snakemake.common import NOTHING_TO_BE_DONE_MSG
from snakemake.logging import LogEvent, logger as snakemake_logger

from bayesncl.cli.local_jobs import end_forkservers, one_wakeup_timer, own_forkserver_folder, script_folder, visible_gpus

from bayesncl.core.errors import BayesNCLError, ConfigError
from bayesncl.grid.expand import evaluation_sections, job_trigger, prepared_copies
from bayesncl.report import names as report_names
from bayesncl.report.atlas import atlas_runs
from bayesncl.report.document import PDFLATEX_HINT, builds_pdf, report_pages
from bayesncl.planning.time_requests import STOP_MARGIN_S, trains
from bayesncl.cli.workflow import load_workflow


def from_common(*names):
    """Declares the names a file of rules takes from common.smk; each must be defined by now."""
    missing = [n for n in names if n not in globals()]
    if missing:
        raise WorkflowError(f"workflow/rules/common.smk defines no {', '.join(missing)}; include it first "
                            "(the Snakefile does)")


def config_error(e):
    """A bad workflow config: one line naming the key, what is wrong and the fix; exit 2 before any job."""
    print(f"invalid workflow config: {e}", file=sys.stderr)
    sys.exit(2)


# The grid read as every command reads it (bayesncl.cli.workflow.load_workflow): the switches' spellings, its plugins
# (docs/EXTENDING.md: modules beside the workflow config, imported here and, through the environment, by every job),
# the schema in one line and its defaults set, a smoke run's results folder (`--config smoke=true`: every job shrunk,
# bayesncl.grid.expand.SMOKE, into <results>-smoke), the runs and the declared claims. `config` is changed in place, so
# the rules (summarize is handed it) read the same.
try:
    WF = load_workflow(workflow.configfiles, config,
                       plugin_dirs=[os.path.dirname(os.path.abspath(f)) for f in workflow.configfiles],
                       where=" or ".join(map(str, workflow.overwrite_configfiles or [])) or "the workflow config",
                       schema=workflow.source_path("../schemas/config.schema.yaml"))
except BayesNCLError as e:
    config_error(e)
for note in WF.notes:
    print(f"warning: {note}", file=sys.stderr)
SMOKE = bool(config.get("smoke"))
RUNS = WF.runs
EVAL_SECTIONS = {rid: evaluation_sections(run) for rid, run in RUNS.items()}

RESULTS = config["results"]
# The runs of imported weights (the workflow config's `imported:`; bayesncl.grid.expand.imported_runs):
# rules/imported.smk makes their model.pt from the checkpoint instead of training it. {run id: {checkpoint, args,
# sha256, config}}
IMPORTED = {rid: {**run.imported, "config": run.config} for rid, run in RUNS.items() if run.imported}
BENCHMARKS = f"{RESULTS}/benchmarks"  # each job's wall time and memory (`benchmark:`), summary/jobs.csv
# The extended benchmark record also names the rule, the wildcards and the resources a job was given (its GPUs,
# for the GPU-hours as run): what `bayesncl jobs` reads. Snakemake's --benchmark-extended, set for every run.
try:
    workflow.output_settings.benchmark_extended = True
except AttributeError:  # a Snakemake without it: jobs.csv then has no GPUs (NA)
    pass
TABLE_NAMES = [f"table{i}" for i in range(1, 8)] + ["claims"]
FIGURE_NAMES = list(report_names.FIGURE_NAMES)
TABLES = expand(f"{RESULTS}/tables/{{name}}.{{ext}}", name=TABLE_NAMES, ext=["tex", "md"])
FIGURES = expand(f"{RESULTS}/figures/{{name}}.{{ext}}", name=FIGURE_NAMES, ext=["pdf", "png"])
ATLAS_RUNS = atlas_runs(RUNS)  # {dataset: [NCL run, BayesNCL (STE) run]}, for rules/atlas.smk
ATLAS = expand(f"{RESULTS}/figures/atlas_{{ds}}.{{ext}}", ds=list(ATLAS_RUNS), ext=["pdf", "png"])
EVAL_OUTPUTS = [f"{RESULTS}/runs/{rid}/eval/{name}.json" for rid, names in EVAL_SECTIONS.items() for name in names]
JOBS = [f"{RESULTS}/summary/jobs.csv", f"{RESULTS}/summary/jobs.md"]
# The seeds each claim needs from this grid's runs, and the overlay that adds them (bayesncl.planning.plan;
# rules/report.smk).
PLAN = [f"{RESULTS}/summary/plan.md", f"{RESULTS}/summary/plan.yaml"]
# The grid config file(s) this run read, a grid and its overlays in order: named, with their hash, in every generated
# file (`--grid` takes them all).
GRID_FILES = [os.path.relpath(f) for f in workflow.configfiles] or ["config/config.yaml"]


# --------------------------------------------------------------------------- GPUs
# A pretrain/evaluate job needs one unless its run config says train.device: cpu. On a cluster
# the scheduler gives each job its GPU. On one machine, Snakemake enforces the
# `gpu` resource only against a limit, so the limit is set here to the GPUs this machine shows
# (`--resources gpu=N` overrides it; with none, every job's need is capped to 0 and it runs on the CPU),
# and each GPU job takes a free GPU of its own through workflow/scripts/gpu_slot.py (CUDA_VISIBLE_DEVICES).


GPU_SLOT_SCRIPT = os.path.normpath(os.path.join(str(workflow.current_basedir), "..", "scripts", "gpu_slot.py"))
# Local: this process runs the jobs itself (no cluster executor, which sets `nodes` from --jobs).
LOCAL = workflow.is_main_process and workflow.nodes is None
LOCAL_GPUS = visible_gpus() if LOCAL else []
if LOCAL and "gpu" not in workflow.resource_settings.resources:
    workflow.register_resource("gpu", len(LOCAL_GPUS))
# A run's evaluation as one job (the grid's `evaluation_jobs: per_run`, rules/evaluate.smk): on one machine only; a
# cluster's submission already joins a run's sections (group eval_<run>) and asks time for each.
ONE_EVALUATION_JOB = config["evaluation_jobs"] == "per_run"
if ONE_EVALUATION_JOB and not LOCAL and workflow.is_main_process:
    config_error("evaluation_jobs: per_run runs a run's evaluation as one job on one machine; on a cluster a run's "
                 "sections are already one submission: set it to per_section")


# On a cluster that does not take --gpus (`--config gpu_request=gres`), a GPU job asks --gres=gpu:N instead: the
# plugin's `gres` resource, `gpu` 0. Every section of a run's evaluation submission then asks the run's GPU (a
# group's string resources must agree); the submission asks one GPU either way.
GRES = not LOCAL and config.get("gpu_request") == "gres"


def run_gpus(wildcards):
    return 0 if GRES or RUNS[wildcards.run].config["train"]["device"] == "cpu" else 1


def run_gres(wildcards):
    """Resource function: the run's GPU as SLURM's --gres (gpu_request: gres), else none."""
    return "gpu:1" if GRES and RUNS[wildcards.run].config["train"]["device"] != "cpu" else ""


def section_gpus(section):
    """Resource function: one GPU where the evaluation section runs the network and the run is not CPU-only."""
    from bayesncl.evaluation.sections import SECTIONS

    def gpus(wildcards):
        return int(SECTIONS[section].gpu(RUNS[wildcards.run].config)) * run_gpus(wildcards)

    return gpus


def gpu_slot(wildcards, resources):
    """Command prefix that runs a local GPU job on a GPU of its own ('' elsewhere)."""
    if not LOCAL_GPUS or getattr(resources, "gpu", 0) < 1:
        return ""
    return f"{shlex.quote(sys.executable)} {shlex.quote(GPU_SLOT_SCRIPT)} --gpus {','.join(LOCAL_GPUS)} -- "


# --------------------------------------------------------------------------- time requests (SLURM's --time)
# On a cluster each job asks for the time bayesncl.planning.time_requests decides (its docstring says how; `bayesncl
# estimate` prints the sums): priced at the measured rate of the workflow config's `requests: {gpu: NAME}` (default
# h200) or `requests: {measured: gpu_check.json}`, learned from the grid's finished jobs (RESULTS/benchmarks), with
# the profile's `time_limit` and `stop_margin_s` under set-resources: pretrain. `runtime` under set-resources still
# wins for its rule. Locally (and inside a submitted job) nothing is priced: no job asks for time, the sections keep
# their declared runtime.
PRICED = not LOCAL and workflow.is_main_process
_PLANNER = []


def profile_resource(rule, name, default=None):
    """What the profile's set-resources give `rule` for resource `name` (the rules cannot read it otherwise)."""
    given = (workflow.resource_settings.overwrite_resources or {}).get(rule)
    value = getattr(given.get(name), "value", given.get(name)) if given is not None else None  # a Resources
    return default if value is None else value


def planner():
    """The grid's bayesncl.planning.time_requests.Planner, made on first use (a dry run or a cluster run only)."""
    from bayesncl.planning.estimate import measured_rates, planner as grid_planner

    if not _PLANNER:
        want = config.get("requests") or {}
        try:
            rates = measured_rates(want.get("gpu", "h200"), want.get("measured"))
        except ConfigError as e:
            config_error(f"requests: {e}")
        _PLANNER.append(grid_planner(RUNS, rates, RESULTS, strict=False, remaining=True,
                                     time_limit_min=profile_resource("pretrain", "time_limit"),
                                     margin_s=profile_resource("pretrain", "stop_margin_s", STOP_MARGIN_S)))
    return _PLANNER[0]


def pretrain_minutes(wildcards, attempt):
    """Resource function: a pretraining job's time request (none locally: no scheduler asks)."""
    asked = planner().minutes(wildcards.run, "pretrain", attempt) if PRICED else None
    return profile_resource("pretrain", "time_limit") if asked is None else asked  # None: no request


def section_minutes(section, declared):
    """Resource function: an evaluation section's time request; its `declared` runtime locally or unpriced."""

    def minutes(wildcards, attempt):
        asked = planner().minutes(wildcards.run, section, attempt) if PRICED else None
        return declared if asked is None else asked

    return minutes


def pretrain_group(wildcards):
    """Group function: a run of train.epochs 0 (an untrained twin) saves its initialisation inside its evaluation
    submission (eval_<run>); a run that trains is a submission of its own."""
    return None if trains(RUNS[wildcards.run].config) else f"eval_{wildcards.run}"


# --------------------------------------------------------------------------- how a job starts
# Every `bayesncl` job writes its start-up seconds (process start to the start of its work: interpreter, imports,
# loading) beside its benchmark record, as <benchmark>.start.json; `bayesncl jobs` reads them into jobs.csv.
# Locally, CPU jobs run in children of the fork server (bayesncl/cli/forkserver/), which imports torch once for the
# whole run instead of once per job (about 3 s of a 5-15 s job); `--config forkserver=false`: a plain process each.
FORKSERVER = LOCAL and config.get("forkserver", True) is True and sys.platform.startswith("linux")  # fork + /proc
# The run's servers are its own: started by its first job in a folder of this workflow's (unless
# BAYESNCL_FORKSERVER_DIR names one) and ended with the run (onsuccess/onerror below); a killed run's idle out.
FORKSERVER_RUN_DIR = own_forkserver_folder(FORKSERVER and workflow.is_main_process)
# Locally, where PATH finds a version manager's shim for `bayesncl` (pyenv's, asdf's: a shell script under
# .../shims/, a tenth of a second per job), the script this interpreter installed goes first on PATH instead.
LOCAL_BIN = script_folder() if LOCAL else None
# Snakemake's scheduler wakes on one timer, not one more per finished job (local_jobs.one_wakeup_timer).
if workflow.is_main_process:
    one_wakeup_timer()


ALLOCATION_SCRIPT = os.path.normpath(os.path.join(str(workflow.current_basedir), "..", "scripts",
                                                 "allocation.py"))


def within_allocation(wildcards, resources):
    """Command prefix of a pretraining job on a cluster: stopped resources.stop_margin_s before its allocation
    ends, then its job requeued (workflow/scripts/allocation.py); '' locally and for a run that only saves its
    initialisation."""
    if LOCAL or not trains(RUNS[wildcards.run].config):
        return ""
    return f"{shlex.quote(sys.executable)} {shlex.quote(ALLOCATION_SCRIPT)} --margin {resources.stop_margin_s} -- "


def benchmark_file(rule, wildcard=None):
    """A rule's `benchmark:` file: <rule>/{<wildcard>}.tsv under BENCHMARKS, <rule>.tsv for a one-off rule (the
    layout `bayesncl jobs` reads)."""
    return f"{BENCHMARKS}/{rule}/{{{wildcard}}}.tsv" if wildcard else f"{BENCHMARKS}/{rule}.tsv"


def launch(rule, wildcard=None):
    """Params function: the command prefix of a job of `rule` (its start-up record beside benchmark_file)."""

    def prefix(wildcards, resources):
        record = benchmark_file(rule, wildcard).format(**{k: wildcards[k] for k in wildcards.keys()})
        env = f"BAYESNCL_TIMING={shlex.quote(record[: -len('.tsv')] + '.start.json')} "
        if FORKSERVER and getattr(resources, "gpu", 0) < 1:
            env += "BAYESNCL_FORKSERVER=1 "
        if LOCAL_BIN:
            env += f'PATH={shlex.quote(LOCAL_BIN)}:"$PATH" '
        return env + gpu_slot(wildcards, resources)

    return prefix


# --------------------------------------------------------------------------- ImageNet-100, prepared once
# `bayesncl prepare-imagenet`: every image of train/ and val/ decoded into the
# cache the loader reads (data.cache_dir, else $BAYESNCL_CACHE, else ~/.cache/bayesncl; on a cluster, a
# filesystem the GPU nodes see), so no pretraining or evaluation job decodes a JPEG. The rules that read the
# images (pretrain, features, linear_probe) take the rule's marker, {RESULTS}/prepared/<hash>.txt, as an
# ancient input: a later preparation never reruns them. A job that finds no valid copy still runs, decoding
# the JPEGs (the same pixels, slower, with a warning); after clearing the cache, prepare again with
# `snakemake --forcerun prepare_data ...`.
try:
    _COPIES = prepared_copies(RUNS)
except BayesNCLError as e:
    raise WorkflowError(f"invalid workflow config: {e}")
PREPARED = _COPIES[0]  # marker tag -> (the prepared folder's manifests, the data settings that name it)
# run -> its marker (flagged ancient), or none
PREPARED_OF = {rid: [ancient(f"{RESULTS}/prepared/{tag}.txt") for tag in tags] for rid, tags in _COPIES[1].items()}


# --------------------------------------------------------------------------- the report's pages
# The pages of Snakemake's HTML report (bayesncl.report.document.report_pages) and the reproduction report's
# files: the rules document, report and atlas make them; `rule all` asks for DOCUMENT.
FIGURE_STEMS = [Path(f).stem for f in FIGURES + ATLAS if f.endswith(".pdf")]
PAGES = {p.name: p for p in report_pages([(r.config["data"]["dataset"], r.sets) for r in RUNS.values()],
                                         FIGURE_STEMS)}
DOCUMENT_DIR = f"{RESULTS}/report"
PDF = f"{RESULTS}/report.pdf"
# The report's pages as files: a table's HTML (rule document), a figure's PNG (rule report; the atlas marks
# its own, by wildcard, in atlas.smk).
PAGE_FILES = {
    name: f"{DOCUMENT_DIR}/html/{name}.html" if p.category in ("Claims", "Tables") else f"{RESULTS}/figures/{name}.png"
    for name, p in PAGES.items()
    if p.category != "Atlas"
}
HTML_PAGES = [path for path in PAGE_FILES.values() if path.endswith(".html")]
DOCUMENT = HTML_PAGES + ([PDF] if builds_pdf() else [])  # for `rule all`; else PDFLATEX_HINT (the pre-flight's)
# Each page marked for the report. Its caption is the file `bayesncl document` writes (absolute: Snakemake
# reads captions relative to the rule file, and these lie under the results folder).
REPORTED = {
    path: report(path, caption=os.path.abspath(f"{DOCUMENT_DIR}/captions/{name}.rst"),
                 category=PAGES[name].category, labels=PAGES[name].labels)
    for name, path in PAGE_FILES.items()
}


wildcard_constraints:
    run="[^/].*?",


# Rerun triggers. Snakemake reruns a job when a param changes, except params whose function takes `output` (or
# input, threads, resources): those are "derived" and never compared. So each rule's command carries the whole
# config through a derived param, and its trigger is a param of its own: bayesncl.grid.expand.job_trigger, what
# decides the job's outputs (a new key at its old behaviour, a location, an unread method setting: none of them;
# the code of a plugin the job runs: yes).
def pretrain_trigger(wildcards):
    return job_trigger(RUNS[wildcards.run].config, "pretrain")


def evaluate_trigger(section):
    """Params function: the trigger of the run's `section` job (its plugin settings and code only its own)."""

    def trigger(wildcards):
        return job_trigger(RUNS[wildcards.run].config, "evaluate", section)

    return trigger


def evaluate_triggers(sections):
    """Params function: the triggers of a job that runs several of the run's `sections`, by section."""

    def triggers(wildcards):
        return {s: evaluate_trigger(s)(wildcards) for s in sections}

    return triggers


def run_config_text(wildcards, output):
    """What pretraining needs: the run config without eval.* (evaluation options never retrain a run)."""
    cfg = {k: v for k, v in RUNS[wildcards.run].config.items() if k != "eval"}
    return json.dumps(cfg, sort_keys=True)


def evaluate_command(sections):
    """`bayesncl evaluate --only <sections>` on a run, with the grid's eval.* and data.* settings and each section's
    trigger, which its file records (what `bayesncl stale` compares with today's)."""

    def command(wildcards, output):
        cfg = RUNS[wildcards.run].config
        model, out = f"{RESULTS}/runs/{wildcards.run}/model.pt", f"{RESULTS}/runs/{wildcards.run}/eval"
        settings = json.dumps({"eval": cfg["eval"], "data": cfg["data"]}, sort_keys=True)
        triggers = json.dumps({s: json.loads(t) for s, t in evaluate_triggers(sections)(wildcards).items()},
                              sort_keys=True)
        return (f"bayesncl evaluate --checkpoint {shlex.quote(model)} --out {shlex.quote(out)} "
                f"--only {' '.join(sections)} --config-json {shlex.quote(settings)} "
                f"--trigger-json {shlex.quote(triggers)} --quiet")

    return command


# --------------------------------------------------------------------------- the pre-flight
# Before any job, every dataset root that a job to be done reads must pass its check (bayesncl.grid.preflight): one line
# per bad root, and Snakemake ends (exit 2) before any job is queued; a dry run reports and still plans. A refusal
# is the only thing printed: Snakemake prints its banner, "Building DAG of jobs..." and the job table after it has
# read this file and before `onstart`, where the DAG says which jobs are to be done. So where a root of the grid
# fails its check now, Snakemake's lines are held back (HeldLines) until `onstart` has judged: refused, they are
# dropped; else they are printed as they came. (Its "Using workflow specific profile ..." line comes before this
# file is read, from the command line; nothing quiets it but dropping the profile, which picks the scheduler.)
PREFLIGHT_CHECKED = {}  # the roots checked in this process, each read through once (bayesncl.grid.preflight)


def preflight(todo, dry_run):
    """Every dataset root a run still to be done reads must pass its check: one line per bad root; it ends
    Snakemake (exit 2) before any job is queued, Snakemake's held lines dropped; a dry run reports and still plans."""
    from bayesncl.grid.preflight import missing_data

    problems = missing_data(config, RUNS, todo, PREFLIGHT_WHERE, PREFLIGHT_CHECKED)
    if problems and not dry_run:
        HELD.drop()
    for line in problems:
        print(f"pre-flight{' (dry run)' if dry_run else ''}: {line}", file=sys.stderr)
    if problems and not dry_run:
        sys.exit(2)


class HeldLines(logging.Filter):
    """Snakemake's log records from the start of a run (its first line, or its banner) to its job table, held back
    until released, then printed in order, or dropped. Any other record releases them first: a warning or an error,
    a job starting, "Nothing to be done" (a run that never reaches `onstart`). Records of anything but a run (a
    report, --unlock) pass: they never start holding."""

    HELD = (None, LogEvent.WORKFLOW_STARTED, LogEvent.RESOURCES_INFO, LogEvent.RUN_INFO, LogEvent.RULEGRAPH)
    RUN_STARTS = "Assuming unrestricted shared filesystem usage"  # a local run's first line, before its banner

    def __init__(self, armed):
        super().__init__()
        self.held, self.state = [], "armed" if armed else "off"
        if armed:
            snakemake_logger.addFilter(self)

    def filter(self, record):
        event = getattr(record, "event", None)
        if self.state == "armed" and (event == LogEvent.WORKFLOW_STARTED
                                      or str(record.msg).startswith(self.RUN_STARTS)):
            self.state = "holding"
        if self.state != "holding":
            return True
        if record.levelno < logging.WARNING and event in self.HELD and record.getMessage() != NOTHING_TO_BE_DONE_MSG:
            self.held.append(record)
            return False
        self.release()
        return True

    def release(self, keep=True):
        if self.state != "off":
            self.state = "off"
            snakemake_logger.removeFilter(self)
            for record in self.held if keep else ():
                snakemake_logger.handle(record)
            self.held = []

    def drop(self):
        self.release(keep=False)


PREFLIGHT_WHERE = " or ".join(map(str, workflow.overwrite_configfiles or [])) or "the workflow config"
if workflow.is_main_process and workflow.output_settings.dryrun:  # no DAG to ask yet: judge by the files
    from bayesncl.grid.preflight import todo_from_files

    HELD = HeldLines(False)
    preflight(todo_from_files(RUNS, RESULTS, ATLAS_RUNS, config), dry_run=True)
    if not builds_pdf():
        print(PDFLATEX_HINT, file=sys.stderr)
else:  # a root of the grid that fails its check holds Snakemake's lines until `onstart` judges (above)
    from bayesncl.grid.preflight import missing_data

    _EVERY_JOB = {rid: {"pretrain", "atlas", *names} for rid, names in EVAL_SECTIONS.items()}
    HELD = HeldLines(workflow.is_main_process and bool(
        missing_data(config, RUNS, _EVERY_JOB, PREFLIGHT_WHERE, PREFLIGHT_CHECKED)))


onsuccess:
    HELD.release()
    end_forkservers(FORKSERVER_RUN_DIR)


onerror:
    HELD.release()
    end_forkservers(FORKSERVER_RUN_DIR)


onstart:
    # The DAG is built and nothing is queued yet: what it plans to run is what needs data.
    if not workflow.touch:
        from bayesncl.grid.preflight import todo_from_jobs

        preflight(todo_from_jobs(workflow.dag.needrun_jobs(), RUNS, ATLAS_RUNS), dry_run=False)
    HELD.release()
    if not builds_pdf():
        print(PDFLATEX_HINT, file=sys.stderr)

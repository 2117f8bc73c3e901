# GPUs: a pretrain/evaluate job needs one unless its run config says train.device: cpu. On a cluster
# the scheduler gives each job its GPU. On one machine, Snakemake enforces the
# `gpu` resource only against a limit, so the limit is set here to the GPUs this machine shows
# (`--resources gpu=N` overrides it; with none, every job's need is capped to 0 and it runs on the CPU),
# and each GPU job takes a free GPU of its own through workflow/scripts/gpu_slot.py (CUDA_VISIBLE_DEVICES).
import shlex
import subprocess
import sys


def visible_gpus() -> list[str]:
    """GPU ids as CUDA_VISIBLE_DEVICES lists them (ids before the first negative one), else nvidia-smi's."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids = []
        for gpu in (g.strip() for g in env.split(",")):
            if not gpu or gpu.startswith("-"):
                break
            ids.append(gpu)
        return ids
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    return out.stdout.split() if out.returncode == 0 else []


GPU_SLOT_SCRIPT = os.path.normpath(os.path.join(str(workflow.current_basedir), "..", "scripts", "gpu_slot.py"))
# Local: this process runs the jobs itself (no cluster executor, which sets `nodes` from --jobs).
LOCAL = workflow.is_main_process and workflow.nodes is None
LOCAL_GPUS = visible_gpus() if LOCAL else []
if LOCAL and "gpu" not in workflow.resource_settings.resources:
    workflow.register_resource("gpu", len(LOCAL_GPUS))


def run_gpus(wildcards):
    return 0 if RUNS[wildcards.run].config["train"]["device"] == "cpu" else 1


def section_gpus(section):
    """Resource function: one GPU where the evaluation section runs the network and the run is not CPU-only."""
    from bayesncl.evaluation.sections import SECTIONS

    def gpus(wildcards):
        return int(SECTIONS[section].gpu(RUNS[wildcards.run].config)) * run_gpus(wildcards)

    return gpus


def gpu_slot(wildcards, resources):
    """Command prefix that runs a local GPU job on a GPU of its own ('' elsewhere)."""
    if not LOCAL_GPUS or resources.gpu < 1:
        return ""
    return f"{shlex.quote(sys.executable)} {shlex.quote(GPU_SLOT_SCRIPT)} --gpus {','.join(LOCAL_GPUS)} -- "

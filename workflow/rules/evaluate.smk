# Evaluation: the sections of bayesncl.evaluation.sections.SECTIONS (a plugin's too), each writing eval/<section>.json,
# rules made by the loops at the end from what each section registered: the files it reads, the files it writes beside
# its JSON and one job's resources. `features` embeds the test (and, where needed, train) split once on the GPU; the
# CPU sections read its cache. Which sections a run gets: bayesncl.grid.expand.evaluation_sections (common.smk,
# EVAL_OUTPUTS).
#
# With the grid's `evaluation_jobs: per_run` (one machine; the demo's), a run's evaluation is one job, made by one
# rule per distinct list of sections (bayesncl.grid.expand.evaluation_jobs names them `evaluate`, `evaluate_with_cost`,
# ...). Its sections run one after another in one process, which loads the model and the splits once; for small runs a
# job of its own per section starts a process for a fraction of a second's work. Each section's file still records its
# own trigger; the job runs again where any of its sections' would (bayesncl.grid.stale lists it so).
#
# On a cluster every section is a job of its own, and a run's sections are one submission: they share the group
# eval_{run}, whose pieces (the sections that read features, and dynamics and cost, which read only model.pt) the
# SLURM profile joins with --group-components (an untrained twin's initialisation, its pretrain job, joins them).
# Inside the submission they run one after another (the `serial` resource below), so it asks for the largest of its
# jobs' GPUs, CPUs and memory and the sum of their runtimes: bayesncl.planning.time_requests shares the submission's
# one request among them. A failed or preempted section reruns alone, without retraining and without redoing the
# sections that ended:
# - within one Snakemake invocation, a retried submission restores the sections that ended in an earlier attempt
#   (hard links kept under eval/.attempt/, written only after a section succeeded) instead of running them again;
# - in the next invocation, only the sections whose output is missing are planned (slurm/config.yaml keeps the
#   outputs of a failed submission's finished sections: keep-incomplete; every output here is written atomically,
#   so a section that failed has none).
import os
import re
import shlex

from_common("EVAL_SECTIONS", "LOCAL", "ONE_EVALUATION_JOB", "PREPARED_OF", "RESULTS", "benchmark_file",
            "evaluate_command", "evaluate_trigger", "evaluate_triggers", "launch", "run_gres", "section_gpus",
            "section_minutes")


MODEL = f"{RESULTS}/runs/{{run}}/model.pt"
PREPARED_INPUT = lambda wc: PREPARED_OF[wc.run]  # the ImageNet-100 prepared copy where a run reads it (common.smk)
EVAL_DIR = f"{RESULTS}/runs/{{run}}/eval"
FEATURES = f"{EVAL_DIR}/features.json"

from bayesncl.evaluation.sections import SECTIONS  # noqa: E402 - after the declaration above, as every rule file
from bayesncl.planning.time_requests import RESTORED  # noqa: E402 - a restored section: not measured
from bayesncl.grid.expand import evaluation_jobs  # noqa: E402
from bayesncl.grid.status import EVALUATE_LOG  # noqa: E402

# What a section reads (Section.reads), as the rule's inputs.
READS = {"model": MODEL, "features": FEATURES, "prepared": PREPARED_INPUT}
# section: its inputs, the outputs beside eval/<section>.json, and what one job needs on a cluster (SLURM reads
# these; locally only `gpu` is enforced, see common.smk).
EVAL_RULES = {
    name: dict(input={r: READS[r] for r in s.reads}, output=dict(s.outputs), cpus=s.cpus, mem_mb=s.mem_mb,
               runtime=s.runtime)
    for name, s in SECTIONS.items()
}
# section: the files it writes, eval/<section>.json first
SECTION_OUTPUTS = {name: [f"{EVAL_DIR}/{name}.json", *(f"{EVAL_DIR}/{f}" for f in spec["output"].values())]
                   for name, spec in EVAL_RULES.items()}

# On a cluster, members of a group may not share a layer: where it is submitted, the group asks for its largest
# member, not the sum; inside the submission, its members run one at a time. `local`: counted per submission,
# not across the queue. Locally (no groups) it does not apply.
if not LOCAL and "serial" not in workflow.global_resources:
    workflow.register_resource("serial", 1)


resource_scopes:
    serial="local",


def attempt_guard(section, outputs):
    """Shell before and after the section's command on a cluster: restore on a retry, keep links on success."""
    keep, log = f"{EVAL_DIR}/.attempt/{section}", f"{EVAL_DIR}/{section}.log"
    names = [os.path.basename(o) for o in outputs]

    def before(wildcards, resources):
        if LOCAL:
            return ""
        k = shlex.quote(keep.format(run=wildcards.run))
        restore = " && ".join(f"ln -f {k}/{n} {shlex.quote(o.format(run=wildcards.run))}"
                              for n, o in zip(names, outputs))
        note = shlex.quote(f"{section}: {RESTORED} {resources.attempt - 1} of this invocation")
        return (f"if [ {resources.attempt} -gt 1 ] && [ -d {k} ] && {restore}; then "
                f"echo {note} > {shlex.quote(log.format(run=wildcards.run))}; exit 0; fi; rm -rf {k}; ")

    def after(wildcards):
        if LOCAL:
            return ""
        k = shlex.quote(keep.format(run=wildcards.run))
        files = " ".join(shlex.quote(o.format(run=wildcards.run)) for o in outputs)
        return f"; mkdir -p {k}.tmp && ln -f {files} {k}.tmp/ && mv {k}.tmp {k}"

    return before, after


if ONE_EVALUATION_JOB:
    for _name, (_sections, _runs) in evaluation_jobs(EVAL_SECTIONS).items():

        rule:
            name:
                _name
            input:
                # what the sections read, but the features the job computes itself
                **{r: READS[r] for s in _sections for r in SECTIONS[s].reads
                   if not (r == "features" and "features" in _sections)},
            output:
                [f for s in _sections for f in SECTION_OUTPUTS[s]],
            log:
                f"{EVAL_DIR}/{EVALUATE_LOG}",
            benchmark:
                benchmark_file(_name, "run")
            wildcard_constraints:
                run="|".join(map(re.escape, _runs)),  # the runs with exactly these sections
            params:
                cmd=evaluate_command(_sections),  # derived (takes output): not a rerun trigger
                trigger=evaluate_triggers(_sections),
                launch=launch(_name, "run"),
            resources:
                gpu=lambda wc, sections=_sections: max(section_gpus(s)(wc) for s in sections),  # the most any needs
            conda:
                "../envs/bayesncl.yaml"
            shell:
                "{params.launch}{params.cmd} > {log} 2>&1"

else:
    for _section, _spec in EVAL_RULES.items():
        _outputs = SECTION_OUTPUTS[_section]
        _before, _after = attempt_guard(_section, _outputs)

        rule:
            name:
                _section
            input:
                **_spec["input"],
            output:
                json=_outputs[0],
                **{k: f"{EVAL_DIR}/{f}" for k, f in _spec.get("output", {}).items()},
            log:
                f"{EVAL_DIR}/{_section}.log",
            benchmark:
                benchmark_file(_section, "run")
            group:
                "eval_{run}"
            params:
                cmd=evaluate_command([_section]),  # derived (takes output): not a rerun trigger
                trigger=evaluate_trigger(_section),
                launch=launch(_section, "run"),
                before=_before,
                after=_after,
            resources:
                gpu=section_gpus(_section),
                gres=run_gres,
                cpus_per_task=_spec["cpus"],
                mem_mb=_spec["mem_mb"],
                runtime=section_minutes(_section, _spec["runtime"]),  # on a cluster: from the estimate (common.smk)
                serial=1,
                attempt=lambda wc, attempt: attempt,
            conda:
                "../envs/bayesncl.yaml"
            shell:
                "{params.before}{params.launch}{params.cmd} > {log} 2>&1{params.after}"

# ImageNet-100, prepared once (`bayesncl prepare-imagenet`): every image of train/ and val/ decoded into the
# cache the loader reads (data.cache_dir, else $BAYESNCL_CACHE, else ~/.cache/bayesncl; on a cluster, a
# filesystem the GPU nodes see), so no pretraining or evaluation job decodes a JPEG. A job without it still
# runs, decoding the JPEGs (the same pixels, slower). The rules that read the images (pretrain, features,
# linear_probe) take PREPARED_OF[run] as input only while their own output is missing, so preparing again
# (a cleared cache) reruns no finished job.
import re

from bayesncl.data.imagenet import prepared_manifests
from bayesncl.errors import BayesNCLError

try:
    PREPARED_OF = {rid: prepared_manifests(run.config["data"]) for rid, run in RUNS.items()}  # run -> manifests
except BayesNCLError as e:
    raise WorkflowError(f"invalid workflow config: {e}")
# prepared folder -> the data settings that name it
PREPARED = {
    os.path.dirname(m[0]): {
        k: RUNS[rid].config["data"][k] for k in ("dataset", "root", "classes", "imagenet_stored_size", "cache_dir")
    }
    for rid, m in PREPARED_OF.items()
    if m
}


rule prepare_imagenet100:
    output:
        "{folder}/train.json",  # manifests, written last: the decoded images lie beside them
        "{folder}/test.json",
    log:
        "{folder}/prepare.log",
    wildcard_constraints:
        folder="|".join(re.escape(f) for f in PREPARED) or "(?!)",
    params:
        config=lambda wc: json.dumps({"data": PREPARED[wc.folder]}, sort_keys=True),
    threads: 16
    resources:
        cpus_per_task=16,  # JPEG decoding, ~120 images/s per core: 131,689 images in about 18 core-minutes
        mem_mb=16000,
        runtime=240,
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "bayesncl prepare-imagenet --config-json {params.config:q} --workers {threads} --quiet > {log} 2>&1"

# A file-backed dataset (ImageNet-100, an image folder), prepared once (`bayesncl prepare`): every image of train/
# and val/ decoded into the
# cache the loader reads (data.cache_dir, else $BAYESNCL_CACHE, else ~/.cache/bayesncl; on a cluster, a
# filesystem the GPU nodes see), so no pretraining or evaluation job decodes a JPEG. The rules that read the
# images (pretrain, features, linear_probe) take the rule's marker, {RESULTS}/prepared/<hash>.txt, as an
# ancient input: a later preparation never reruns them. A job that finds no valid copy still runs, decoding
# the JPEGs (the same pixels, slower, with a warning); after clearing the cache, prepare again with
# `snakemake --forcerun prepare_data ...`.
import json

from_common("PREPARED", "RESULTS", "benchmark_file")


rule prepare_data:
    output:
        f"{RESULTS}/prepared/{{tag}}.txt",  # lists the manifests, which the loader checks
    log:
        f"{RESULTS}/prepared/{{tag}}.log",
    benchmark:
        benchmark_file("prepare_data", "tag")
    wildcard_constraints:
        tag="[0-9a-f]{16}",
    params:
        config=lambda wc: json.dumps({"data": PREPARED[wc.tag][1]}, sort_keys=True),
        manifests=lambda wc: PREPARED[wc.tag][0],
    threads: 16
    resources:
        cpus_per_task=16,  # JPEG decoding, ~120 images/s per core: 131,689 images in about 18 core-minutes
        mem_mb=16000,
        runtime=240,
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "bayesncl prepare --config-json {params.config:q} --workers {threads} --quiet > {log} 2>&1"
        " && printf '%s\\n' {params.manifests:q} > {output}"

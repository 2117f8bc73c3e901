# Entry point: `snakemake --cores 2 all` (demo) or `snakemake --profile profiles/slurm --configfile config/paper.yaml all`.
include: "workflow/Snakefile"

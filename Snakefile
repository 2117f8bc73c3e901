# Entry point, so that `snakemake` works from the repository root; the workflow is workflow/Snakefile.
#   snakemake --cores 2                                   the demo grid (config/config.yaml)
#   snakemake --profile slurm all                         the paper grid on SLURM (config/paper.yaml; slurm/)
from snakemake.utils import min_version

min_version("9.0")


include: "workflow/Snakefile"


# Snakemake takes the default target from the top-level file only.
rule default:
    input:
        rules.all.input,
    default_target: True

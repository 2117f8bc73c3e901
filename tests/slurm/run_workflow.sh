#!/usr/bin/env bash
# Run a Snakemake workflow through its SLURM profile on a throwaway one-node
# cluster (tests/slurm/local_cluster.sh), then stop the cluster, pass or fail.
#
#   run_workflow.sh [--state DIR] [--profile DIR] [--snakefile F] [--configfile F]
#                   [--directory DIR] [--timeout SECS] [--] [TARGET|SNAKEMAKE-ARG ...]
#
# The profile is used as is; only cluster-specific settings are overridden on
# the command line for the local node: partition, account (none), GPUs (none),
# memory/threads small enough for the node, squeue status checks.
# Exit status: snakemake's (124 on timeout). On failure the SLURM job logs
# (.snakemake/slurm_logs/**) and the daemon log tails are printed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cluster=$here/local_cluster.sh

state=""
profile=$repo/profiles/slurm
snakefile=""
configfile=""
workdir=$PWD
limit=${SLURM_TEST_TIMEOUT:-240}
partition=${SLURM_LOCAL_PARTITION:-debug}
snakemake=${SNAKEMAKE:-snakemake}
extra=()
while (($#)); do
    case $1 in
        --state) state=$2; shift 2 ;;
        --profile) profile=$2; shift 2 ;;
        --snakefile) snakefile=$2; shift 2 ;;
        --configfile) configfile=$2; shift 2 ;;
        --directory) workdir=$2; shift 2 ;;
        --timeout) limit=$2; shift 2 ;;
        --) shift; extra+=("$@"); break ;;
        *) extra+=("$1"); shift ;;
    esac
done

t0=$(date +%s)
log() { echo "[run_workflow +$(($(date +%s) - t0))s] $*" >&2; }

abspath() { (cd "$(dirname "$1")" && echo "$(pwd)/$(basename "$1")"); }
[[ -d $profile ]] || { log "ERROR: profile dir not found: $profile"; exit 2; }
profile=$(cd "$profile" && pwd)
workdir=$(cd "$workdir" && pwd)
[[ -z $snakefile ]] || snakefile=$(abspath "$snakefile")
[[ -z $configfile ]] || configfile=$(abspath "$configfile")
if [[ -z $state ]]; then
    state=$(mktemp -d /tmp/bayesncl-slurm.XXXXXX)
fi
mkdir -p "$state"
state=$(cd "$state" && pwd)

sm_pid=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    # An interrupted run: stop snakemake first. SIGINT makes it scancel its
    # jobs (on SIGTERM it waits for them); stop_cluster cancels any left.
    if [[ -n $sm_pid ]] && kill -0 "$sm_pid" 2>/dev/null; then
        kill -INT "$sm_pid" 2>/dev/null || true
        for _ in $(seq 1 40); do kill -0 "$sm_pid" 2>/dev/null || break; sleep 0.5; done
        kill -KILL "$sm_pid" 2>/dev/null || true
    fi
    bash "$cluster" stop "$state" || rc=1
    log "done, exit $rc"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bash "$cluster" start "$state"
eval "$(bash "$cluster" env "$state")"
log "cluster ready"

# Node size, for the resource overrides.
read -r node_cpus node_mem < <(scontrol -o show node | tr ' ' '\n' | awk -F= '
    $1=="CPUTot"{c=$2} $1=="RealMemory"{m=$2} END{print c, m}')
mem_cap=$((node_mem / (node_cpus > 0 ? node_cpus : 1)))
((mem_cap > 4000)) && mem_cap=4000

base=("$snakemake" --profile "$profile" --directory "$workdir")
[[ -z $snakefile ]] || base+=(--snakefile "$snakefile")
[[ -z $configfile ]] || base+=(--configfile "$configfile")

# Merge the profile (and the workflow profile, which Snakemake applies on top)
# into the CLI lists: command-line lists replace the profile's whole lists, so
# keep its entries minus the cluster-specific ones, then add the local ones.
mapfile -d '' overrides < <(python3 - "$profile" "$snakefile" "$workdir" "$partition" \
    "$mem_cap" "$node_cpus" "$state/slurm_logdir" <<'PY'
import glob, os, re, sys, yaml
profile, snakefile, workdir, partition, mem_cap, cpus, logdir_file = sys.argv[1:]
mem_cap, cpus = int(mem_cap), int(cpus)
CLUSTER = {"slurm_partition", "slurm_account", "slurm_extra", "slurm_cluster", "cluster",
           "clusters", "constraint", "qos", "gpu", "gpu_model", "gres", "cpus_per_gpu",
           "tasks_per_gpu", "nodes", "mem_mb_per_cpu"}

def load(d):
    p = os.path.join(d, "config.yaml")
    return (yaml.safe_load(open(p)) or {}) if os.path.exists(p) else {}

conf = load(profile)
sf = snakefile or next((os.path.join(workdir, c) for c in ("Snakefile", "snakefile", "workflow/Snakefile",
                                                           "workflow/snakefile")
                        if os.path.exists(os.path.join(workdir, c))), "")
# The workflow profile is found the way Snakemake 9 finds it (cli.parse_args):
# ./default, ./profiles/default, else <snakefile dir>/profiles/default.
if sf:
    for wp in ("default", "profiles/default", os.path.join(os.path.dirname(sf), "profiles", "default")):
        wp = os.path.join(workdir, wp)
        if os.path.exists(wp):
            print(f"workflow profile: {wp}", file=sys.stderr)
            conf.update(load(wp))
            break

# Rule names, for per-rule overrides (a rule's own resources beat default-resources).
# Read from the sources: `snakemake --list-rules` costs a whole Snakemake start-up,
# and extra names in --set-resources are ignored.
rules = {"all"}
srcs = [sf] if sf else []
if sf:
    for ext in ("smk", "snakefile", "Snakefile"):
        srcs += glob.glob(os.path.join(os.path.dirname(sf), "**", "*" + ext), recursive=True)
for src in set(srcs):
    text = open(src, errors="replace").read()
    rules |= set(re.findall(r"^\s*(?:rule|checkpoint)\s+([A-Za-z_]\w*)\s*:", text, re.M))
    rules |= set(re.findall(r"^\s*use\s+rule\s+.*?\s+as\s+([A-Za-z_]\w*)", text, re.M))
rules = sorted(rules)
print("per-rule overrides for: " + " ".join(rules), file=sys.stderr)

def pairs(v):  # list of "k=v" or {k: v}
    if isinstance(v, dict):
        return [(str(k), str(x)) for k, x in v.items()]
    return [tuple(str(s).split("=", 1)) for s in (v or [])]

def fit(k, v):
    if k == "mem_mb" and v.isdigit():
        return str(min(int(v), mem_cap))
    if k == "cpus_per_task" and v.isdigit():
        return str(min(int(v), cpus))
    return v

dres = [(k, fit(k, v)) for k, v in pairs(conf.get("default-resources")) if k not in CLUSTER]
dres.append(("slurm_partition", partition))
sres = conf.get("set-resources") or {}
if isinstance(sres, dict):
    sres = [f"{r}:{k}={v}" for r, d in sres.items() for k, v in (d or {}).items()]
sres = [s for s in map(str, sres) if s.split(":", 1)[1].split("=", 1)[0] not in CLUSTER]
sres = [f"{s.split('=', 1)[0]}={fit(s.split(':', 1)[1].split('=', 1)[0], s.split('=', 1)[1])}"
        for s in sres]
for r in rules:  # after the profile's entries, so these win
    sres += [f"{r}:slurm_partition={partition}", f"{r}:gpu=0", f"{r}:mem_mb={mem_cap}"]
args = ["--default-resources", *[f"{k}={v}" for k, v in dres],
        "--set-resources", *sres,
        "--max-threads", str(cpus),
        "--slurm-status-command", "squeue",
        "--slurm-init-seconds-before-status-checks", "5"]
for key in ("slurm-qos", "slurm-reservation"):
    if conf.get(key):
        print(f"note: profile sets {key}; overriding with '' for the local cluster",
              file=sys.stderr)
        args += ["--" + key, ""]
# Where the plugin writes job logs (its --slurm-logdir is relative to the workdir).
with open(logdir_file, "w") as f:
    f.write(os.path.join(workdir, str(conf.get("slurm-logdir") or ".snakemake/slurm_logs")))
sys.stdout.write("".join(a + "\0" for a in args))
PY
)
((${#overrides[@]})) || { log "ERROR: could not compute overrides"; exit 1; }

cmd=(timeout -s INT -k 30 "$limit" "${base[@]}" "${overrides[@]}" "${extra[@]}")
log "running: $(printf '%q ' "${cmd[@]}")"
sm_rc=0
# In the background so a TERM/INT to this script is handled at once.
(cd "$workdir" && exec "${cmd[@]}") > >(tee "$state/snakemake.out") 2>&1 &
sm_pid=$!
wait "$sm_pid" || sm_rc=$?
sm_pid=""
sleep 0.5  # let tee drain
log "snakemake exited $sm_rc"

if ((sm_rc != 0)); then
    ((sm_rc == 124)) && log "ERROR: snakemake timed out after ${limit}s"
    # Failed jobs keep their SLURM logs; successful ones are deleted by the plugin.
    # Only this run's (newer than its slurm.conf): the workdir may hold old ones.
    mapfile -t logs < <(find "$(cat "$state/slurm_logdir")" -type f -name '*.log' \
        -newer "$state/slurm.conf" 2>/dev/null | sort)
    echo "===== SLURM job logs (${#logs[@]}) =====" >&2
    for f in "${logs[@]}"; do
        echo "----- ${f#"$workdir"/} -----" >&2
        tail -n 200 "$f" >&2
    done
    # The rules' own log: files (e.g. `> {log} 2>&1`) hold the real error; Snakemake
    # names them in its error report.
    mapfile -t rule_logs < <(sed -n 's/^ *log: \(.*\) (check log file(s) for error details)$/\1/p' \
        "$state/snakemake.out" | tr ',' '\n' | sed 's/^ *//; s/ *$//' | sort -u)
    for f in "${rule_logs[@]}"; do
        [[ $f == /* ]] || f=$workdir/$f
        [[ -f $f ]] || continue
        printf '%s\n' "${logs[@]}" | grep -qxF -- "$f" && continue
        echo "----- rule log ${f#"$workdir"/} (last 100 lines) -----" >&2
        tail -n 100 "$f" >&2
    done
    echo "===== squeue --states=all =====" >&2
    squeue --states=all -o '%i %j %T %r %M' >&2 2>/dev/null || true
    for f in "$state"/log/slurmctld.log "$state"/log/slurmd.log; do
        echo "----- $f (last 20 lines) -----" >&2
        tail -n 20 "$f" >&2 2>/dev/null || true
    done
fi
exit "$sm_rc"

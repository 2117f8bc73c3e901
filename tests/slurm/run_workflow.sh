#!/usr/bin/env bash
# Run a Snakemake command line through its SLURM profile on a throwaway one-node
# cluster (tests/slurm/local_cluster.sh), then stop the cluster, pass or fail.
#
#   run_workflow.sh [--state DIR] [--directory DIR] [--timeout SECS] [--watch PID]
#                   -- SNAKEMAKE-ARGS ...
#
# Runs `snakemake SNAKEMAKE-ARGS ...` from DIR (default: here), exactly as given
# (e.g. `--profile slurm all`: Snakemake itself resolves the profile name), then
# appends what this one node needs instead of the profile's cluster-specific
# settings: partition, account (none), GPUs (none), memory/threads small enough
# for the node, squeue status checks. Later arguments win, so the profile is
# used as is otherwise. The command line run is written to DIR/snakemake.argv
# (one argument per line) and printed.
#
# Stopping: the daemons are stopped when this script exits, however it exits
# (EXIT/INT/TERM traps). A watchdog, in its own session, also ends snakemake
# and the cluster if this script or the process named by --watch (default: the
# parent, e.g. pytest) disappears, so even a SIGKILL leaves no daemon behind.
#
# Exit status: snakemake's (124 on timeout). On failure the SLURM job logs
# (.snakemake/slurm_logs/**) and the daemon log tails are printed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cluster=$here/local_cluster.sh

# --- watchdog mode (started below; not for direct use) ----------------------
# starttime: field 22 of /proc/PID/stat, so a recycled PID does not count as alive.
starttime() { local s; s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; s=${s##*) }; set -- $s; echo "${20}"; }
alive() {  # pid starttime
    local s
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    s=${s##*) }
    [[ ${s%% *} != Z ]] || return 1
    [[ $(starttime "$1") == "$2" ]]
}
if [[ ${1:-} == --watchdog ]]; then
    state=$2 harness=$3 harness_t=$4 watch=$5 watch_t=$6
    echo $$ >"$state/watchdog.pid"
    while alive "$harness" "$harness_t" && alive "$watch" "$watch_t"; do sleep 1; done
    echo "[watchdog $(date +%T)] $(alive "$watch" "$watch_t" && echo "run_workflow.sh ($harness)" ||
        echo "watched process $watch") is gone: stopping snakemake and the cluster"
    # Not the script's own traps: with its reader gone, its first log line would kill it (SIGPIPE)
    # half-way through. Everything from here logs to the watchdog's file.
    if alive "$harness" "$harness_t"; then kill -KILL "$harness" 2>/dev/null || true; fi
    sm=""
    [[ -s $state/snakemake.pid ]] && read -r sm sm_t <"$state/snakemake.pid"
    if [[ -n $sm ]] && alive "$sm" "$sm_t"; then
        kill -INT "$sm" 2>/dev/null || true  # snakemake cancels its jobs on SIGINT
        for _ in $(seq 1 30); do alive "$sm" "$sm_t" || break; sleep 0.5; done
        kill -KILL "$sm" 2>/dev/null || true
    fi
    exec bash "$cluster" stop "$state"
fi

# --- normal mode --------------------------------------------------------------
state=""
workdir=$PWD
limit=${SLURM_TEST_TIMEOUT:-240}
watch=$PPID
partition=${SLURM_LOCAL_PARTITION:-debug}
snakemake=${SNAKEMAKE:-$(command -v snakemake || true)}
while (($#)); do
    case $1 in
        --state) state=$2; shift 2 ;;
        --directory) workdir=$2; shift 2 ;;
        --timeout) limit=$2; shift 2 ;;
        --watch) watch=$2; shift 2 ;;
        --) shift; break ;;
        *) echo "run_workflow.sh: unknown option $1 (snakemake's arguments go after --)" >&2; exit 2 ;;
    esac
done
args=("$@")
((${#args[@]})) || { echo "run_workflow.sh: no snakemake arguments after --" >&2; exit 2; }
[[ -x $snakemake ]] || { echo "run_workflow.sh: snakemake not found (set SNAKEMAKE)" >&2; exit 2; }
# `snakemake` as typed: the one given, first on PATH.
export PATH=$(dirname "$snakemake"):$PATH

t0=$(date +%s)
log() { echo "[run_workflow +$(($(date +%s) - t0))s] $*" >&2; }

workdir=$(cd "$workdir" && pwd)
if [[ -z $state ]]; then
    state=$(mktemp -d /tmp/bayesncl-slurm.XXXXXX)
fi
mkdir -p "$state/log"
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
    # The daemons are gone: the watchdog has nothing left to guard.
    if [[ -s $state/watchdog.pid ]]; then kill -TERM "$(cat "$state/watchdog.pid")" 2>/dev/null || true; fi
    log "done, exit $rc"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Before any daemon starts, so that none can outlive this script or its caller.
watch_t=$(starttime "$watch") || { log "ERROR: --watch $watch: no such process"; exit 2; }
setsid bash "${BASH_SOURCE[0]}" --watchdog "$state" $$ "$(starttime $$)" "$watch" "$watch_t" \
    >>"$state/log/watchdog.log" 2>&1 </dev/null &

bash "$cluster" start "$state"
eval "$(bash "$cluster" env "$state")"
log "cluster ready"

# Node size, for the resource overrides.
read -r node_cpus node_mem < <(scontrol -o show node | tr ' ' '\n' | awk -F= '
    $1=="CPUTot"{c=$2} $1=="RealMemory"{m=$2} END{print c, m}')
mem_cap=$((node_mem / (node_cpus > 0 ? node_cpus : 1)))
((mem_cap > 4000)) && mem_cap=4000

# The profile (and the workflow profile, which Snakemake applies on top), found
# as Snakemake finds them, merged into the command-line lists: a command-line
# list replaces the profile's whole list, so keep its entries minus the
# cluster-specific ones, then add the local ones. Run with snakemake's Python.
python=$(dirname "$snakemake")/python
[[ -x $python ]] || python=python3
mapfile -d '' overrides < <(cd "$workdir" && "$python" - "$partition" "$mem_cap" "$node_cpus" \
    "$state/slurm_logdir" "${args[@]}" <<'PY'
import argparse, glob, os, re, sys, yaml
partition, mem_cap, cpus, logdir_file, *argv = sys.argv[1:]
mem_cap, cpus = int(mem_cap), int(cpus)
CLUSTER = {"slurm_partition", "slurm_account", "slurm_extra", "slurm_cluster", "cluster",
           "clusters", "constraint", "qos", "gpu", "gpu_model", "gres", "cpus_per_gpu",
           "tasks_per_gpu", "nodes", "mem_mb_per_cpu"}

cli = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
cli.add_argument("--profile", action="append", default=[])
cli.add_argument("--workflow-profile")
cli.add_argument("--snakefile", "-s")
given, _ = cli.parse_known_args(argv)
if not given.profile and os.environ.get("SNAKEMAKE_PROFILE"):
    given.profile = [os.environ["SNAKEMAKE_PROFILE"]]

def profile_file(name):
    try:
        from snakemake.cli import get_profile_dir
        found = get_profile_dir(name)
        return str(found[1]) if found else None
    except ImportError:  # a snakemake without it: a folder holding config.yaml
        p = os.path.join(name, "config.yaml")
        return p if os.path.exists(p) else None

def load(path):
    return (yaml.safe_load(open(path)) or {}) if path and os.path.exists(path) else {}

conf = {}
for name in given.profile:
    path = profile_file(name)
    if path is None:
        sys.exit(f"profile {name!r} not found from {os.getcwd()}")
    print(f"profile: {os.path.abspath(path)}", file=sys.stderr)
    conf.update(load(path))
sf = given.snakefile or next((c for c in ("Snakefile", "snakefile", "workflow/Snakefile", "workflow/snakefile")
                              if os.path.exists(c)), "")
# The workflow profile, as Snakemake 9 finds it (cli.parse_args): --workflow-profile, else
# ./default, ./profiles/default, <snakefile dir>/profiles/default.
if given.workflow_profile != "none":
    cands = [given.workflow_profile] if given.workflow_profile else ["default", "profiles/default"]
    if sf:
        cands.append(os.path.join(os.path.dirname(sf), "profiles", cands[0] if given.workflow_profile else "default"))
    for wp in cands:
        path = wp if os.path.isfile(wp) else os.path.join(wp, "config.yaml")
        if os.path.exists(path):
            print(f"workflow profile: {os.path.abspath(path)}", file=sys.stderr)
            conf.update(load(path))
            break

# Rule names, for per-rule overrides (a rule's own resources beat default-resources).
# Read from the sources: `snakemake --list-rules` costs a whole Snakemake start-up,
# and extra names in --set-resources are ignored.
rules = {"all"}
srcs = [sf] if sf else []
if sf:
    for ext in ("smk", "snakefile", "Snakefile"):
        srcs += glob.glob(os.path.join(os.path.dirname(sf) or ".", "**", "*" + ext), recursive=True)
for src in set(srcs):
    text = open(src, errors="replace").read()
    rules |= set(re.findall(r"^\s*(?:rule|checkpoint)\s+([A-Za-z_]\w*)\s*:", text, re.M))
    rules |= set(re.findall(r"^\s*use\s+rule\s+.*?\s+as\s+([A-Za-z_]\w*)", text, re.M))
    rules |= set(re.findall(r"^\s*name:\s*[\"']([A-Za-z_]\w*)[\"']", text, re.M))
# Rules made in a loop (`rule:` with a computed `name:`) have no name in the source; the profile's
# per-rule settings name them.
sres_conf = conf.get("set-resources") or {}
rules |= set(sres_conf) if isinstance(sres_conf, dict) else {str(s).split(":", 1)[0] for s in sres_conf}
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
# After the profile's entries, so these win (also over the rules' own resources). One CPU a job: the rules
# ask for up to 8, and a job asking for more CPUs than this node has would pend forever (PartitionConfig).
for r in rules:
    sres += [f"{r}:slurm_partition={partition}", f"{r}:gpu=0", f"{r}:mem_mb={mem_cap}", f"{r}:cpus_per_task=1"]
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
    f.write(os.path.join(os.getcwd(), str(conf.get("slurm-logdir") or ".snakemake/slurm_logs")))
sys.stdout.write("".join(a + "\0" for a in args))
PY
)
((${#overrides[@]})) || { log "ERROR: could not compute overrides"; exit 1; }

command=(snakemake "${args[@]}")
printf '%s\n' "${command[@]}" >"$state/snakemake.argv"
log "running from $workdir: $(printf '%q ' "${command[@]}")"
log "  + local-cluster overrides: $(printf '%q ' "${overrides[@]}")"
sm_rc=0
# In the background so a TERM/INT to this script is handled at once.
(cd "$workdir" && exec timeout -s INT -k 30 "$limit" "${command[@]}" "${overrides[@]}") \
    > >(tee "$state/snakemake.out") 2>&1 &
sm_pid=$!
echo "$sm_pid $(starttime "$sm_pid")" >"$state/snakemake.pid"
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

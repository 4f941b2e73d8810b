#!/usr/bin/env bash
# A three-node Slurm cluster on this one machine, for tests and trying `swefleet slurm` out:
# installs slurmctld, slurmd, the Slurm clients and munge (Debian packages) when missing, writes
# an explicit slurm.conf into a state directory, starts munged, slurmctld and one slurmd per node
# directly (no systemd) and waits until the nodes take jobs. Idempotent: a cluster already up
# with the same slurm.conf is left as it is (a second call takes well under a second).
#
#   bash scripts/ensure-slurm.sh          # prints the slurm.conf path as its last line
#   export SLURM_CONF=$STATE/slurm.conf   # what sbatch/squeue/scancel then need
#   bash scripts/ensure-slurm.sh --stop   # stop the daemons
#
# Needs root and apt access (exit code 3 when the packages cannot be installed).
# STATE: $SWEFLEET_SLURM_STATE, default /tmp/swefleet-slurm. Every node is this host, each its
# own slurmd (nodes `hostname -s`, `hostname -s`-2 and -3, so a job can place roles on separate
# nodes), reached at 127.0.0.1; the controller listens on loopback port 6817, the slurmds on
# 6818.. (SWEFLEET_SLURMCTLD_PORT, SWEFLEET_SLURMD_PORT). Each node offers all of the machine's
# CPUs (oversubscribed), no GPUs; proctrack/linuxproc, task/none: no cgroups.
# KillWait is 60 s: what a cancelled job's processes get between SIGTERM and SIGKILL.
set -euo pipefail

STATE=${SWEFLEET_SLURM_STATE:-/tmp/swefleet-slurm}
CTLD_PORT=${SWEFLEET_SLURMCTLD_PORT:-6817}
SLURMD_PORT=${SWEFLEET_SLURMD_PORT:-6818}
CONF=$STATE/slurm.conf
export SLURM_CONF=$CONF
NODE=$(hostname -s)
NODES=("$NODE" "$NODE-2" "$NODE-3")

log() { echo "ensure-slurm: $*" >&2; }

install_packages() {
    local missing=()
    command -v slurmctld >/dev/null || missing+=(slurmctld)
    command -v slurmd >/dev/null || missing+=(slurmd)
    command -v sbatch >/dev/null || missing+=(slurm-client)
    command -v munged >/dev/null || missing+=(munge)
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    {
        apt-get install -y --no-install-recommends "${missing[@]}" >"$STATE/apt.log" 2>&1 || {
            apt-get update >>"$STATE/apt.log" 2>&1
            apt-get install -y --no-install-recommends "${missing[@]}" >>"$STATE/apt.log" 2>&1
        }
    } || { log "apt-get install ${missing[*]} failed (see $STATE/apt.log)"; exit 3; }
}

daemons_up() {
    pgrep -f "slurmctld -f $CONF\$" >/dev/null || return 1
    for n in "${NODES[@]}"; do pgrep -f "slurmd -f $CONF -N $n\$" >/dev/null || return 1; done
}

cluster_up() {
    [ -f "$CONF" ] && daemons_up && scontrol ping 2>/dev/null | grep -q UP \
        && [ "$(sinfo -h -N -o '%t' 2>/dev/null | grep -cE '^(idle|mix|alloc)')" = "${#NODES[@]}" ]
}

start_munge() {
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
    mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0; sleep 0.1; done
    log "munged did not start"; exit 1
}

render_conf() {
    local hw cpus mem i
    hw=$(slurmd -C | head -1)
    cpus=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$hw")
    mem=$(sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")
    cat <<EOF
# written by scripts/ensure-slurm.sh: ${#NODES[@]} nodes on this machine, loopback only
ClusterName=swefleet
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/slurmd-%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
KillWait=60
MinJobAge=600
SlurmdParameters=config_overrides
EOF
    for i in "${!NODES[@]}"; do
        echo "NodeName=${NODES[$i]} NodeHostname=$NODE NodeAddr=127.0.0.1" \
             "Port=$((SLURMD_PORT + i)) CPUs=$cpus RealMemory=$mem State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
}

start_daemons() {
    mkdir -p "$STATE/ctld"
    pgrep -f "slurmctld -f $CONF\$" >/dev/null || slurmctld -f "$CONF"
    for n in "${NODES[@]}"; do
        pgrep -f "slurmd -f $CONF -N $n\$" >/dev/null || slurmd -f "$CONF" -N "$n"
    done
    for _ in $(seq 150); do
        if cluster_up; then return 0; fi
        scontrol update nodename="$(IFS=,; echo "${NODES[*]}")" state=resume >/dev/null 2>&1 || true
        sleep 0.2
    done
    log "Slurm did not come up; logs: $STATE/slurmctld.log $STATE/slurmd-*.log"; exit 1
}

stop_daemons() {
    local pids=()
    for pidfile in "$STATE"/slurmd-*.pid "$STATE/slurmctld.pid"; do
        [ -f "$pidfile" ] && pids+=("$(cat "$pidfile")")
    done
    [ ${#pids[@]} -eq 0 ] && return 0
    kill "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 100); do
        kill -0 "${pids[@]}" 2>/dev/null || return 0
        sleep 0.1
    done
}

mkdir -p "$STATE"
if [ "${1:-}" = "--stop" ]; then stop_daemons; exit 0; fi
install_packages
render_conf >"$CONF.new"
if cmp -s "$CONF.new" "$CONF" && cluster_up; then rm -f "$CONF.new"; echo "$CONF"; exit 0; fi
start_munge
if ! cmp -s "$CONF.new" "$CONF"; then  # another layout: restart with a fresh controller state
    stop_daemons
    rm -rf "$STATE/ctld"
    mv "$CONF.new" "$CONF"
else
    rm -f "$CONF.new"
fi
start_daemons
echo "$CONF"

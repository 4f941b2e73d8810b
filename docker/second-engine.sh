#!/usr/bin/env bash
# A second, throw-away Docker engine on this machine (tests of the farm over many hosts).
#
#   docker/second-engine.sh start DIR   # engine at unix://DIR/docker.sock, in network namespace
#                                       # swefleet-<hash of DIR>, data under DIR
#   docker/second-engine.sh stop DIR    # daemon, its containerd and shims, mounts, netns: gone
#
# The engine has no bridge and no iptables rules (sandboxes run with `--network none`); it has
# its own --data-root (a tmpfs of $SECOND_ENGINE_DATA_MB, default 4096), --exec-root, --pidfile
# and containerd. `start` on a DIR whose engine was killed (SIGKILL) restarts it on the same
# data; without live-restore it then kills and removes the containers the killed one left.
# Needs root, dockerd, the docker CLI, curl and iproute2.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: $0 start|stop DIR" >&2
  exit 2
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
ns="swefleet-$(printf '%s' "$dir" | sha1sum | cut -c1-10)"
sock="$dir/docker.sock"
exec_root="$dir/exec"   # short: containerd's socket path must stay under 108 bytes
pidfile="$dir/dockerd.pid"

pids_under() {  # pids whose command line names our exec root or data root (containerd, shims)
  local p
  for p in /proc/[0-9]*; do
    if { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -qF -- "$dir/"; then
      echo "${p#/proc/}"
    fi
  done
}

stop_pid() {  # TERM, wait up to $2 s, then KILL
  local pid=$1 wait_s=${2:-10} i
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 1 $((wait_s * 10))); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

drop_stale_pidfile() {  # remove $1 unless its process lives (a zombie has no command line)
  if [ -f "$1" ] && [ -z "$( { tr -d '\0' <"/proc/$(cat "$1")/cmdline"; } 2>/dev/null)" ]; then
    rm -f "$1"
  fi
}

start() {
  if [ -S "$sock" ] && curl -sf --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; then
    echo "$sock"
    return 0
  fi
  drop_stale_pidfile "$pidfile"  # a killed engine's dockerd and containerd: gone, or zombies
  drop_stale_pidfile "$exec_root/containerd/containerd.pid"  # (dockerd would wait for it)
  ip netns list | grep -qw "$ns" || ip netns add "$ns"
  ip netns exec "$ns" ip link set lo up
  mkdir -p "$dir/data" "$exec_root"
  if ! mountpoint -q "$dir/data"; then  # in memory: removing image layers from disk is slow
    mount -t tmpfs -o "size=${SECOND_ENGINE_DATA_MB:-4096}m,mode=0711" swefleet-engine "$dir/data"
  fi
  rm -f "$sock"
  # nsenter, not `ip netns exec`: that remounts /sys and hides the cgroup mounts from dockerd
  nsenter --net="/run/netns/$ns" dockerd \
    --host "unix://$sock" --data-root "$dir/data" --exec-root "$exec_root" \
    --pidfile "$pidfile" --bridge=none --iptables=false --ip-masq=false --ip-forward=false \
    --userland-proxy=false --storage-driver=overlay2 \
    >>"$dir/dockerd.log" 2>&1 </dev/null &
  local i
  for i in $(seq 1 300); do
    if curl -sf --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; then
      echo "$sock"
      return 0
    fi
    sleep 0.1
  done
  echo "the second engine did not come up; see $dir/dockerd.log" >&2
  tail -20 "$dir/dockerd.log" >&2 || true
  return 1
}

stop() {
  if [ -d "$dir/data" ]; then
    # a killed engine left containers (their processes outlive containerd's shims): starting
    # it on the same data kills and removes them; then remove whatever still exists
    if start >/dev/null; then
      docker -H "unix://$sock" ps -aq | xargs -r docker -H "unix://$sock" rm -f >/dev/null
    fi
  fi
  if [ -f "$pidfile" ]; then
    stop_pid "$(cat "$pidfile")" 20
  fi
  local pid
  for pid in $(pids_under); do  # containerd (and shims) can outlive dockerd
    stop_pid "$pid" 5
  done
  # mounts under DIR (overlay layers, shm, netns files), deepest first
  awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
  if ip netns list | grep -qw "$ns"; then
    ip netns del "$ns"
  fi
  rm -rf "$dir"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# A second, throw-away Docker engine on this machine (tests of the farm over many hosts).
#
#   docker/second-engine.sh start DIR   # engine at unix://DIR/docker.sock, in network namespace
#                                       # swefleet-<hash of DIR>, data under DIR
#   docker/second-engine.sh start DIR --tls PORT
#                                       # the same engine, also at tcp://127.0.0.1:PORT with
#                                       # --tlsverify (certificates in DIR/tls, see below)
#   docker/second-engine.sh stop DIR    # daemon, its containerd and shims, mounts, netns: gone
#
# --tls: `openssl` makes a throw-away CA (DIR/tls/ca.pem), a server certificate for 127.0.0.1
# and localhost (subjectAltName, serverAuth) and a client certificate (DIR/tls/cert.pem,
# key.pem, clientAuth): DOCKER_CERT_PATH=DIR/tls docker --tlsverify -H tcp://127.0.0.1:PORT.
# The engine stays in its namespace (a dockerd in the host's namespace with --bridge=none deletes
# the host's docker0): its TLS socket is made listening on the host's 127.0.0.1:PORT and handed
# to it as fd 3, systemd socket activation style (`-H fd://`; dockerd wraps it in TLS). The mode
# sticks to DIR (a restart by `start DIR` or `stop` keeps it).
#
# The engine has no bridge and no iptables rules (sandboxes run with `--network none`); it has
# its own --data-root (a tmpfs of $SECOND_ENGINE_DATA_MB, default 4096), --exec-root, --pidfile
# and containerd. `start` on a DIR whose engine was killed (SIGKILL) restarts it on the same
# data; without live-restore it then kills and removes the containers the killed one left.
# Needs root, dockerd, the docker CLI, curl and iproute2 (--tls: openssl and python3 too).
set -euo pipefail

usage() {
  echo "usage: $0 start DIR [--tls PORT] | stop DIR" >&2
  exit 2
}
cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then usage; fi
tls_port=""
if [ $# -gt 2 ]; then
  if [ "$cmd" != start ] || [ "${3:-}" != --tls ] || ! [[ "${4:-}" =~ ^[0-9]+$ ]] || [ $# -ne 4 ]
  then usage; fi
  tls_port=$4
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ -n "$tls_port" ]; then
  echo "$tls_port" >"$dir/tls-port"
elif [ -f "$dir/tls-port" ]; then
  tls_port=$(cat "$dir/tls-port")
fi
tls="$dir/tls"
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

make_certs() {  # throw-away CA, server (127.0.0.1, localhost) and client certificates
  [ -f "$tls/key.pem" ] && return 0
  mkdir -p "$tls"
  chmod 700 "$tls"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=swefleet test CA" -addext keyUsage=critical,keyCertSign,cRLSign \
    -keyout "$tls/ca-key.pem" -out "$tls/ca.pem" 2>>"$tls/openssl.log"
  sign "server" "/CN=127.0.0.1" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost" "extendedKeyUsage=serverAuth"
  sign "" "/CN=swefleet client" "extendedKeyUsage=clientAuth"
}

sign() {  # sign PREFIX SUBJECT EXT...: $tls/PREFIX{-,}cert.pem and key.pem, signed by the CA
  local prefix=${1:+$1-} subject=$2
  shift 2
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$subject" \
    -keyout "$tls/${prefix}key.pem" 2>>"$tls/openssl.log" |
    openssl x509 -req -days 2 -CA "$tls/ca.pem" -CAkey "$tls/ca-key.pem" \
      -set_serial "0x$(openssl rand -hex 8)" -out "$tls/${prefix}cert.pem" \
      -extfile <(printf '%s\n' "keyUsage=critical,digitalSignature" \
                 "authorityKeyIdentifier=keyid" "$@") 2>>"$tls/openssl.log"
}

with_listener() {  # with_listener PORT CMD...: exec CMD (same pid) with a socket listening on
  # 127.0.0.1:PORT of this namespace as fd 3 (LISTEN_PID, LISTEN_FDS); run in the background only
  exec python3 -c '
import os, socket, sys
s = socket.create_server(("127.0.0.1", int(sys.argv[1])))  # (SO_REUSEADDR)
os.dup2(s.fileno(), 3)
os.set_inheritable(3, True)
os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="1")
os.execvp(sys.argv[2], sys.argv[2:])' "$@"
}

answers() {  # the engine answers on its socket (and over TLS in --tls mode)
  curl -sf --unix-socket "$sock" http://d/_ping >/dev/null 2>&1 || return 1
  [ -z "$tls_port" ] && return 0
  curl -sf --cacert "$tls/ca.pem" --cert "$tls/cert.pem" --key "$tls/key.pem" \
    "https://127.0.0.1:$tls_port/_ping" >/dev/null 2>&1
}

start() {
  if [ -S "$sock" ] && answers; then
    echo "$sock"
    return 0
  fi
  drop_stale_pidfile "$pidfile"  # a killed engine's dockerd and containerd: gone, or zombies
  drop_stale_pidfile "$exec_root/containerd/containerd.pid"  # (dockerd would wait for it)
  ip netns list | grep -qw "$ns" || ip netns add "$ns"
  ip netns exec "$ns" ip link set lo up
  # nsenter, not `ip netns exec`: that remounts /sys and hides the cgroup mounts from dockerd
  local launch=(nsenter --net="/run/netns/$ns") listen=()
  if [ -n "$tls_port" ]; then
    make_certs
    launch=(with_listener "$tls_port" "${launch[@]}")
    listen=(--host fd:// --tlsverify --tlscacert "$tls/ca.pem"
            --tlscert "$tls/server-cert.pem" --tlskey "$tls/server-key.pem")
  fi
  mkdir -p "$dir/data" "$exec_root"
  if ! mountpoint -q "$dir/data"; then  # in memory: removing image layers from disk is slow
    mount -t tmpfs -o "size=${SECOND_ENGINE_DATA_MB:-4096}m,mode=0711" swefleet-engine "$dir/data"
  fi
  rm -f "$sock"
  "${launch[@]}" dockerd \
    --host "unix://$sock" "${listen[@]}" --data-root "$dir/data" --exec-root "$exec_root" \
    --pidfile "$pidfile" --bridge=none --iptables=false --ip-masq=false --ip-forward=false \
    --userland-proxy=false --storage-driver=overlay2 \
    >>"$dir/dockerd.log" 2>&1 </dev/null &
  local i
  for i in $(seq 1 300); do
    if answers; then
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
  *) usage ;;
esac

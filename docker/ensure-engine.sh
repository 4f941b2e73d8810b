#!/usr/bin/env bash
# Make sure a Docker engine answers and debootstrap (offline base image) and bubblewrap (the
# Docker-free sandbox backend, `[envs] backend = "bwrap"`) are installed.
# Installs Debian's docker.io and starts dockerd when none runs (needs root on Debian/Ubuntu).
set -euo pipefail

need_apt=()
command -v dockerd >/dev/null 2>&1 || need_apt+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)  # the Docker-free sandbox backend
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "swefleet needs: ${need_apt[*]} (install them, then start the Docker engine)" >&2
    exit 1
  fi
  echo "installing ${need_apt[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if docker info >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "no Docker engine answers and we are not root: start dockerd" >&2
  exit 1
fi
echo "starting dockerd" >&2
mkdir -p /var/log
nohup dockerd >/var/log/swefleet-dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then exit 0; fi
  sleep 1
done
echo "dockerd did not come up; see /var/log/swefleet-dockerd.log" >&2
tail -20 /var/log/swefleet-dockerd.log >&2 || true
exit 1

#!/usr/bin/env bash
# Issue 17, step 1: can this machine's Docker engine run systemd as PID 1 in a container, as a
# kind node needs? No image can be pulled, so the image is a Debian rootfs made by debootstrap
# (Debian's packages are reachable) and `docker import`ed. The rootfs is cached in
# ~/.cache/cluster-provider/kind/smoke-rootfs (about 255 MB; debootstrap takes about a minute).
#
# Finding on the project's machines (2026-11-24): the engine refuses `--privileged` ("runc create
# failed: unable to start container process: unable to apply caps: operation not permitted"),
# because the machine's own capability bounding set lacks CAP_SYS_RESOURCE, which --privileged
# asks for. systemd runs with every other capability, unconfined seccomp/AppArmor/system paths and
# the cgroup (v1) hierarchy bound read-write; without that bind it exits ("Failed to allocate
# manager object"). kind's docker provider always passes --privileged, so kind nodes must be
# started with equivalent flags instead: backend/kind/docker.go does that for real kind clusters
# (and keeps kind's private cgroup namespace, with the node image remounting the cgroups writable).
#
# Exit 0 when `systemctl is-system-running` answers running (or degraded) within 60 s.
set -euo pipefail

cache=${CACHE_DIR:-$HOME/.cache/cluster-provider/kind}
rootfs=$cache/smoke-rootfs
image=cluster-provider-smoke:systemd
name=cluster-provider-smoke
say() { printf '==> %s\n' "$*" >&2; }

command -v docker >/dev/null || { say "no docker client"; exit 1; }
docker info >/dev/null 2>&1 || { say "no Docker engine answers"; exit 1; }
if [ ! -x "$rootfs/sbin/init" ]; then
  command -v debootstrap >/dev/null || { say "installing debootstrap"; apt-get install -y debootstrap >/dev/null; }
  say "debootstrap of a Debian bookworm rootfs with systemd into $rootfs"
  rm -rf "$rootfs" && mkdir -p "$cache"
  start=$SECONDS
  debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,iproute2,procps bookworm "$rootfs" http://deb.debian.org/debian >"$cache/smoke-debootstrap.log" 2>&1 \
    || { say "debootstrap failed; see $cache/smoke-debootstrap.log"; exit 1; }
  say "debootstrap took $((SECONDS - start)) s"
fi
tar -C "$rootfs" -c . | docker import -c 'ENTRYPOINT ["/sbin/init"]' -c 'ENV container=docker' - "$image" >/dev/null
docker rm -f "$name" >/dev/null 2>&1 || true
trap 'docker rm -f "$name" >/dev/null 2>&1 || true' EXIT

if out=$(docker run -d --name "$name-privileged" --privileged "$image" 2>&1); then
  say "--privileged works here"
else
  say "--privileged is refused: $(echo "$out" | grep -o 'unable to apply caps[^"]*' | head -1)"
  say "this process's capability bounding set: $(grep CapBnd /proc/self/status | awk '{print $2}')"
fi
docker rm -f "$name-privileged" >/dev/null 2>&1 || true

docker run -d --name "$name" \
  --cap-add ALL --cap-drop SYS_RESOURCE \
  --security-opt seccomp=unconfined --security-opt apparmor=unconfined --security-opt systempaths=unconfined \
  --stop-signal SIGRTMIN+3 --tmpfs /run --tmpfs /tmp -v /var -v /sys/fs/cgroup:/sys/fs/cgroup:rw \
  "$image" --log-target=console >/dev/null
for _ in $(seq 60); do
  state=$(docker exec "$name" systemctl is-system-running 2>/dev/null || true)
  case $state in
    running|degraded)
      say "systemd is PID 1 ($(docker exec "$name" ps -p 1 -o comm=)) and the system is $state"
      exit 0 ;;
  esac
  if [ "$(docker inspect -f '{{.State.Running}}' "$name")" != true ]; then
    say "the container stopped:"; docker logs "$name" 2>&1 | tail -10 >&2; exit 1
  fi
  sleep 1
done
say "systemd did not come up within 60 s (state: ${state:-none})"
docker logs "$name" 2>&1 | tail -10 >&2
exit 1

#!/usr/bin/env bash
# Make a bare Debian machine ready for kchaos: system packages, a running
# Docker engine, and a Python virtual environment with kchaos installed.
# Idempotent and quiet when everything is already in place.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${KCHAOS_VENV:-$ROOT/.venv}"
log() { printf 'kchaos-setup: %s\n' "$*" >&2; }

need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
      log "need root to install $1 (or install it yourself)"; exit 3; fi
  else SUDO=""; fi
}

# 1. System packages (Debian/Ubuntu). Each entry: command-to-probe:package.
missing=()
for pair in dockerd:docker.io iptables:iptables debootstrap:debootstrap mvn:maven java:openjdk-17-jre-headless \
            javac:default-jdk-headless \
            chromium:chromium chromedriver:chromium-driver ip:iproute2 tar:tar; do
  cmd="${pair%%:*}"; pkg="${pair##*:}"
  if [ "$cmd" = debootstrap ]; then
    command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || missing+=("$pkg")
  elif ! command -v "$cmd" >/dev/null 2>&1 && ! [ -x "/usr/sbin/$cmd" ]; then
    missing+=("$pkg")
  fi
done
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then missing+=(python3-venv); fi
if [ "${#missing[@]}" -gt 0 ]; then
  need_root "${missing[*]}"
  log "installing ${missing[*]} with apt"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. A Docker engine that answers; CI and new machines start without one.
if ! docker info >/dev/null 2>&1; then
  need_root dockerd
  log "starting dockerd"
  $SUDO sh -c 'setsid nohup dockerd >/var/log/kchaos-dockerd.log 2>&1 < /dev/null &'
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { log "dockerd did not answer within 60s; see /var/log/kchaos-dockerd.log"; exit 3; }
fi

# 3. Python environment at the versions requirements.lock pins (scripts/lock-deps.sh updates it),
#    reinstalled when pyproject.toml or the lock changes.
stamp="$VENV/.kchaos-stamp"
want="$(cat "$ROOT/pyproject.toml" "$ROOT/requirements.lock" | sha256sum | cut -c1-16)"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing Python dependencies into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip >/dev/null
  "$VENV/bin/pip" install -q -c "$ROOT/requirements.lock" -e "$ROOT[dev]" > "$VENV/pip-install.log" 2>&1 || { log "pip install failed; see $VENV/pip-install.log"; tail -n 5 "$VENV/pip-install.log" >&2; exit 3; }
  echo "$want" > "$stamp"
fi

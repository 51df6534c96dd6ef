#!/usr/bin/env bash
# Update requirements.lock, the exact Python package versions set-up installs
# (scripts/bootstrap.sh: pip install -c requirements.lock), to the newest that
# pyproject.toml allows: install into a scratch environment without the lock,
# then freeze it. Review the diff, run the tests, commit the lock.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT
python3 -m venv "$SCRATCH/venv"
"$SCRATCH/venv/bin/pip" install -q --upgrade pip >/dev/null
"$SCRATCH/venv/bin/pip" install -q "$ROOT[dev]"
{ echo "# Exact versions scripts/bootstrap.sh installs. Update: scripts/lock-deps.sh"
  "$SCRATCH/venv/bin/pip" freeze --exclude kchaos; } > "$ROOT/requirements.lock"
echo "requirements.lock: $(grep -vc '^#' "$ROOT/requirements.lock") packages pinned"

#!/usr/bin/env bash
# Installs the official openai and anthropic Python SDKs (pinned in
# requirements.txt) into a venv under $HOME/.cache/sluice/venv, for the
# black-box SDK tests (sdktest/sdk_integration_test.go). Idempotent: a venv
# that already satisfies requirements.txt is left as it is.
# Prints the venv's python path on its last line.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${SLUICE_SDK_VENV:-$HOME/.cache/sluice/venv}"
req="$here/requirements.txt"
stamp="$venv/.sluice-requirements"
python="${PYTHON:-python3}"

if ! command -v "$python" >/dev/null 2>&1; then
  echo "sdktest/setup.sh: $python not found; install Python 3.9+ (apt-get install python3 python3-venv)" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv" || {
    echo "sdktest/setup.sh: cannot create a venv; install python3-venv (apt-get install python3-venv)" >&2
    exit 1
  }
fi
if [ ! -f "$stamp" ] || ! cmp -s "$req" "$stamp"; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
  cp "$req" "$stamp"
fi
echo "$venv/bin/python"

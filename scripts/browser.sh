#!/usr/bin/env bash
# Makes sure a headless-capable Chromium is on this machine, installing
# Debian's `chromium` package with apt-get where absent. `make test` calls
# this first: the console's browser test (internal/console) drives a real
# Chromium and is skipped, never silently passed, when none is found.
# Idempotent: an installed browser is left alone.
set -euo pipefail

log() { printf 'browser: %s\n' "$*" >&2; }
sudo_cmd() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if [ -x /usr/bin/chromium ]; then
  log "/usr/bin/chromium: present"
  exit 0
fi
log "installing chromium with apt-get"
sudo_cmd apt-get update -qq
DEBIAN_FRONTEND=noninteractive sudo_cmd apt-get install -y -qq chromium >/dev/null
test -x /usr/bin/chromium || { log "chromium did not install"; exit 1; }
log "/usr/bin/chromium: installed"

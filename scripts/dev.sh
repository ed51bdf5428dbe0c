#!/usr/bin/env bash
# Developer entry point: the README's two commands go through this script.
#
#   bash scripts/dev.sh serve [mpbroker serve args...]   run the broker (embedded default)
#   bash scripts/dev.sh test  [pytest args...]           run the whole test suite
#   bash scripts/dev.sh setup [test]                     only set up (.venv, and apt for tests)
#
# Setup is idempotent and fast once done: a stamp file in .venv records a hash of
# pyproject.toml, setup.py, the compiled record walk's source and this script (and which
# extras were installed); while the hash matches, nothing is installed again. The venv is
# made with the system `python3`. `pip install -e .` also compiles storage/_recwalk.c in
# place when it can (optional: storage/validator.py falls back to pure Python).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

VENV="$ROOT/.venv"
PY="$VENV/bin/python"
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '[dev.sh] %s\n' "$*" >&2; }

# ---------------------------------------------------------------- system packages
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo -n "$@" || sudo "$@"
  else log "not root and no sudo: cannot run: $*"; return 1
  fi
}

missing_apt_packages() {
  local missing=()
  command -v kcat >/dev/null 2>&1 || missing+=(kcat)
  [ -x /usr/share/zookeeper/bin/zkServer.sh ] || command -v zkServer.sh >/dev/null 2>&1 \
    || missing+=(zookeeper)
  command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
  command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)   # verifies the unit
  command -v strace >/dev/null 2>&1 || missing+=(strace)   # the unit's syscall filter test
  python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
  echo "${missing[@]:-}"
}

setup_apt() {
  local missing
  missing="$(missing_apt_packages)"
  [ -z "${missing// /}" ] && return 0
  log "installing system packages: $missing"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # shellcheck disable=SC2086
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
}

# ---------------------------------------------------------------- python venv
stamp_hash() {
  cat pyproject.toml setup.py storage/_recwalk.c scripts/dev.sh | sha256sum | cut -c1-16
}

# $1: extras spec ("" for the broker alone, "test,load" for everything)
setup_venv() {
  local extras="$1" want stamp="$VENV/.dev-stamp"
  want="$(stamp_hash) ${extras:-none}"
  if [ -x "$PY" ] && [ -f "$stamp" ]; then
    local have; have="$(cat "$stamp")"
    # a full install also satisfies the broker-only one
    if [ "$have" = "$want" ] || { [ -z "$extras" ] && [ "${have%% *}" = "${want%% *}" ]; }; then
      return 0
    fi
  fi
  if ! [ -x "$PY" ] || ! "$PY" -c 'import sys' >/dev/null 2>&1; then
    log "creating .venv with $(command -v python3)"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
  fi
  log "pip install -e .${extras:+[$extras]}"
  "$PY" -m pip install -q --upgrade pip setuptools wheel
  "$PY" -m pip install -q -e ".${extras:+[$extras]}"
  echo "$want" > "$stamp"
}

# ---------------------------------------------------------------- commands
cmd_serve() {
  setup_venv ""
  local has_conf=0 a
  for a in "$@"; do case "$a" in -c|--config|-c=*|--config=*) has_conf=1;; esac; done
  if [ "$has_conf" = 0 ]; then
    mkdir -p "$ROOT/data"
    set -- -c "$ROOT/conf/server.properties" --override "log.dirs=$ROOT/data" "$@"
  fi
  exec "$PY" -m mpbroker.cli.main serve "$@"
}

cmd_test() {
  setup_apt
  setup_venv "test,load"
  local out rc=0 summary
  out="$(mktemp "${TMPDIR:-/tmp}/mpbroker-pytest.XXXXXX")"
  set +e
  MPBROKER_REQUIRE_ALL=1 "$PY" -m pytest -p no:cacheprovider "$@" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  set -e
  # the closing line: "=== 3 passed, 1 skipped in 9.1s ===" (or without the = with -q)
  summary="$(grep -E '^(=+ )?(no tests ran|[0-9]+ (passed|failed|skipped|deselected|errors?|xfailed|xpassed|warnings?)).* in [0-9.]+s' "$out" \
    | tail -n 1 | sed -E 's/^=+ //; s/ =+$//' || true)"
  rm -f "$out"
  echo
  echo "pytest summary: ${summary:-<none>} (exit $rc)"
  if [ "$rc" = 5 ]; then
    echo "pytest collected no tests: treated as a failure" >&2
    return 1
  fi
  return "$rc"
}

main() {
  local cmd="${1:-}"
  [ $# -gt 0 ] && shift
  case "$cmd" in
    serve) cmd_serve "$@" ;;
    test) cmd_test "$@" ;;
    setup) if [ "${1:-}" = test ]; then setup_apt; setup_venv "test,load"; else setup_venv ""; fi ;;
    *) echo "usage: bash scripts/dev.sh {serve [args...]|test [pytest args...]|setup [test]}" >&2
       return 2 ;;
  esac
}

main "$@"

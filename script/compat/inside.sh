#!/usr/bin/env bash
# Runs inside a Debian chroot made by `rake compat` (tasks/compat.rake), with the work tree in /src.
#   inside.sh provision          bin/setup: the release's packages (libc6-dbg among them) and the gems
#   inside.sh libc6-dbg with     install libc's debug symbols (libc6-dbg)
#   inside.sh libc6-dbg without  remove them
#   inside.sh test               record the system's facts, run the README's test command's rake part
#   inside.sh test-smoke N SPEC... record them, build the extension, run those specs with N heap shapes
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
export BUNDLE_PATH=/var/cache/ptmalloc-dump-compat/bundle

installed() { [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]; }

provision() {
  update-ca-certificates >/dev/null # with the host's own CAs, copied to /usr/local/share/ca-certificates
  dpkg --configure -a               # after an interrupted install
  apt-get update -qq
  apt-get dist-upgrade -y -qq
  cd /src
  bin/setup
  apt-get clean
}

# Without libc6-dbg the gem finds malloc's globals by structure; gdb, the heap shapes' independent
# oracle, still needs glibc's debug info: the package is unpacked for gdb alone, outside /usr/lib/debug.
GDB_DEBUG=/var/cache/ptmalloc-dump-compat/gdb-debug

libc6_dbg() {
  case "$1" in
    with) installed libc6-dbg || apt-get install -y -qq --no-install-recommends libc6-dbg ;;
    without)
      if installed libc6-dbg; then apt-get remove -y -qq libc6-dbg; fi
      rm -rf "$GDB_DEBUG" && mkdir -p "$GDB_DEBUG/deb"
      (cd "$GDB_DEBUG/deb" && apt-get download -qq libc6-dbg && dpkg-deb -x libc6-dbg_*.deb "$GDB_DEBUG")
      ;;
    *) echo "inside.sh: libc6-dbg with|without" >&2; exit 2 ;;
  esac
}

prepare_tests() {
  cd /src
  mkdir -p tmp
  ruby script/compat/facts.rb >tmp/compat-facts.json
  export SPEC_OPTS="--format progress --format json --out tmp/compat-rspec.json"
  if ! installed libc6-dbg && [[ -d $GDB_DEBUG/usr/lib/debug ]]; then
    export PTMALLOC_DUMP_GDB_DEBUG_DIR=$GDB_DEBUG/usr/lib/debug
  fi
}

# The default limits, eight times longer for another CPU run through qemu-user (the whole suite took
# about three hours of spec time there for arm64, where it takes half an hour here).
slowdown() { if [[ $(uname -m) == x86_64 ]]; then echo 1; else echo 8; fi; }

# The README's test command without `rake lint`: style is checked with the clang-format bin/setup
# installs on the development machine, and each release's own clang-format formats differently.
run_tests() {
  prepare_tests
  timeout --kill-after=60 "${PTMALLOC_DUMP_COMPAT_TIMEOUT:-$((3600 * $(slowdown)))}" bundle exec rake unit spec
}

run_smoke() {
  local shapes=$1
  shift
  prepare_tests
  bundle exec rake unit
  SHAPES=$shapes timeout --kill-after=60 "${PTMALLOC_DUMP_COMPAT_TIMEOUT:-$((1200 * $(slowdown)))}" bundle exec rspec "$@"
}

case "${1:-}" in
  provision) provision ;;
  libc6-dbg) libc6_dbg "${2:-}" ;;
  test) run_tests ;;
  test-smoke) shift; run_smoke "$@" ;;
  *) echo "usage: inside.sh provision | libc6-dbg with|without | test | test-smoke SHAPES SPEC..." >&2; exit 2 ;;
esac

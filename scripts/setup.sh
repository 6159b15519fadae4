#!/usr/bin/env bash
# Installs the Debian packages kvwarden builds and tests with, only those missing.
# Sourced or run by run.sh and test.sh; safe to run repeatedly. Needs root (or sudo) to install.
set -euo pipefail

KVW_PACKAGES=(
  build-essential cmake pkg-config g++
  libgtest-dev googletest libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libpcre2-dev libxxhash-dev
  libcpp-httplib-dev libboost1.81-dev
  # KV events (--kv-events-config): ZeroMQ; the e2e subscriber is Python (zmq + msgpack).
  libzmq3-dev python3-zmq python3-msgpack
  # Fuzzing (scripts/fuzz.sh): clang with libFuzzer and the sanitizer runtimes.
  clang libclang-rt-14-dev
  python3 python3-numpy python3-yaml
  # cli_serve_opens_model_once counts the model file's opens.
  strace
  # deploy_haproxy_replicas: a real load balancer in front of two replicas.
  haproxy
  # deploy_image: the container image, built with podman on a base mmdebstrap makes.
  podman mmdebstrap
  # End-to-end tests: Node's `openai` client and playwright-core (tests/e2e), Chromium for the
  # dashboard test, real Prometheus/promtool for metrics and alert rules.
  chromium prometheus
)
# Node: a machine may already carry one (e.g. NodeSource's, which bundles npm and conflicts with
# Debian's npm package); install Debian's only when there is none.
command -v npm >/dev/null 2>&1 || KVW_PACKAGES+=(nodejs npm)

kvw_missing=()
for p in "${KVW_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || kvw_missing+=("$p")
done
if [ ${#kvw_missing[@]} -gt 0 ]; then
  echo "setup: installing ${kvw_missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${kvw_missing[@]}"
fi

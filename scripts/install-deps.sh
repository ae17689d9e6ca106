#!/usr/bin/env bash
# Installs the Debian packages that Meridian's build and tests need.
# Idempotent: when everything is present it only asks dpkg and returns.
set -euo pipefail

packages=(
  build-essential cmake ninja-build clang lld clang-format libclang-rt-14-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libyaml-cpp-dev libyaml-dev
  libsqlite3-dev libcpp-httplib-dev libssl-dev zlib1g-dev libbrotli-dev pkg-config openssl
  # The server's HTTP: Boost.Beast on Asio (header-only).
  libboost-dev
  # The agent's container path, tested with a local image (no registry): podman with runc,
  # and busybox for the image's userland.
  podman runc busybox-static
  # The dashboard: built with Node.js and npm packages (web/package-lock.json), tested in
  # Debian's Chromium.
  nodejs chromium
  # GPU telemetry as metrics: the end-to-end test scrapes a real server with Debian's
  # Prometheus (promtool comes with it and checks the rules in deploy/prometheus/).
  prometheus
  # Alerting: the end-to-end test sends the server's alerts to Debian's Alertmanager, which
  # routes them to a webhook the test runs.
  prometheus-alertmanager
  # Single sign-on: libjwt parses and verifies ID tokens; the test issuer the end-to-end test
  # starts (tests/oidc_test_issuer.py) signs them with python3-jwt on python3-cryptography.
  libjwt-dev python3 python3-jwt python3-cryptography
  # The server's and agents' logs: spdlog (on Debian's fmt), text or JSON lines.
  libspdlog-dev
  # The PostgreSQL store: libpq, and the server the store's conformance suite starts; and
  # PostgreSQL's own failover, tested under Patroni with etcd (deploy/patroni/).
  libpq-dev postgresql patroni etcd-server
  # A leader cut off from its database: PostgreSQL in a network namespace, the link cut by
  # iptables.
  iproute2 iptables
  # The Slurm connector: its end-to-end test starts a real Slurm cluster (slurmctld, slurmd and
  # Slurm's commands from slurm-wlm, with munge for their authentication).
  slurm-wlm munge
  # The binary's allocator (not under ASan): jemalloc.
  libjemalloc-dev
  # The Debian package (`make package`, CPack): dpkg-shlibdeps derives its Depends.
  dpkg-dev
)
# npm comes with some builds of nodejs (NodeSource's) and as its own package with Debian's.
if ! command -v npm > /dev/null; then
  packages+=(npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"

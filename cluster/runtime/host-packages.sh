#!/usr/bin/env bash
# Installs the Debian packages the local single-node cluster and the
# daemonless image build need. Idempotent: installs only what is missing.
# Needs root (apt-get). Nothing here starts a service: tools/cluster runs its
# own containerd with its own config, root, state and socket.
set -euo pipefail
PKGS=(
    containerd runc containernetworking-plugins   # container runtime and CNI plugins
    iptables conntrack ipset socat ethtool iproute2 util-linux mount kmod  # kubelet / kube-proxy needs
    nftables                                      # kube-network-policies: the kernel probe, inspection
    buildah debootstrap fakeroot                  # daemonless image build
    openssl ca-certificates                       # certificates
    gcc libc6-dev busybox-static                  # the static pause binary, the tiny tools image
)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "host-packages: need root to install: ${missing[*]}" >&2
    exit 1
fi
echo "host-packages: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Debian's package lists may be absent on a fresh machine: update once if an install fails.
if ! apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
    apt-get update >&2
    apt-get install -y --no-install-recommends "${missing[@]}" >&2
fi
# Debian's containerd package enables and starts a system containerd where an
# init system runs; tools/cluster never uses it (own socket and root).

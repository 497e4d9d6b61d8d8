#!/usr/bin/env bash
# Runs test/kubelet: the device plugins, built from this checkout, as subprocesses against the
# kubelet's real device manager (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager) over real sockets.
# Extra arguments go to go test (for example -v, or -run KubeVirt).
# KUBELET_SUITE_PLUGIN_DIR=DIR uses prebuilt kubevirt-device-plugin and kata-device-plugin from DIR
# (for example bin/ after make build) instead of building them.
set -euo pipefail
cd "$(dirname "$0")/../test"
exec go test -count=1 "$@" ./kubelet

#!/usr/bin/env bash
# check-generated.sh: fails when a generated file is not what `make generate` makes from the sources
# (deepcopy code, CRDs, RBAC, and the Helm chart's copies of the CRDs and the RBAC). It regenerates in place, so after
# a failure the tree holds the current files: look at `git diff`, then commit them.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
paths=(operator/api/v1alpha1/zz_generated.deepcopy.go manifests/crds manifests/rbac/role.yaml manifests/helm/sandbox-gpu/crds manifests/helm/sandbox-gpu/templates/rbac.yaml)
before=$(mktemp -d)
trap 'rm -rf "$before"' EXIT
for p in "${paths[@]}"; do
	mkdir -p "$before/$(dirname "$p")"
	cp -a "$p" "$before/$p"
done
make --no-print-directory generate >/dev/null
stale=()
for p in "${paths[@]}"; do
	if ! diff -r "$before/$p" "$p" >/dev/null; then
		stale+=("$p")
	fi
done
if [ "${#stale[@]}" -gt 0 ]; then
	echo "check-generated: not current (run make generate and commit): ${stale[*]}" >&2
	for p in "${stale[@]}"; do diff -ru "$before/$p" "$p" | head -40 >&2 || true; done
	exit 1
fi
echo "check-generated: deepcopy, CRDs, RBAC and the chart's CRDs are current"

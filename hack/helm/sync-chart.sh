#!/usr/bin/env bash
# Copies into charts/policy-scheduler what the chart shares with the rest of the tree, whose
# sources stay where they are:
#   crds/*.yaml                          -> charts/policy-scheduler/crds/ (byte for byte)
#   policies/*.yaml                      -> charts/policy-scheduler/files/policies/ (byte for byte)
#   manifests/02-clusterrole.yaml rules  -> charts/policy-scheduler/files/clusterrole-rules.yaml
# tests/unit/test_chart.py fails when a copy differs from its source; run this after changing one.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
chart="$root/charts/policy-scheduler"

rm -f "$chart"/crds/*.yaml "$chart"/files/policies/*.yaml
cp "$root"/crds/*.yaml "$chart/crds/"
cp "$root"/policies/*.yaml "$chart/files/policies/"
{
  printf '%s\n' \
    "# The ClusterRole's rules, copied by hack/helm/sync-chart.sh from manifests/02-clusterrole.yaml" \
    "# (the source: edit the rules there, then run the script; tests/unit/test_chart.py fails on" \
    "# drift). templates/clusterrole.yaml reads this list with .Files.Get."
  sed -n '/^rules:$/,$p' "$root/manifests/02-clusterrole.yaml" | tail -n +2
} > "$chart/files/clusterrole-rules.yaml"
echo "charts/policy-scheduler: crds/, files/policies/ and files/clusterrole-rules.yaml in step with their sources" >&2

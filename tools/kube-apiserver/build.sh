#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the Go modules pinned in go.mod/go.sum (tools/kube-apiserver/) into
# .cache/kube-apiserver-<version>/ at the repository root with tools/build.sh (which also fetches Go when none
# is installed); a binary that is already there is not rebuilt. Prints the folder as its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
built="$("$here/../build.sh" kube-apiserver etcd)"
apiserver="$(awk '$1 == "kube-apiserver" { print $2 }' <<<"$built")"
dirname "$apiserver"

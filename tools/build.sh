#!/usr/bin/env bash
# Builds the Go binaries the tests run (the API server test, the rehearsal control plane) from Go modules pinned
# under tools/<module>/ (a go.mod that requires the component at one exact version, and its go.sum) into
# .cache/<module>-<version>/<binary> at the repository root. A binary that is already there is not rebuilt.
#
#   tools/build.sh [BINARY ...]      (no argument: every binary below)
#   tools/build.sh --module-dir BINARY  (the source folder of BINARY's Go module, for upstream's manifests)
#
# Prints "<binary> <path>" for each binary asked for on stdout; what it builds, and for how long, on stderr.
# Needs the Go module proxy, and Go (downloaded from the proxy when missing, see go_on_path).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
cache="${KUBE_APISERVER_CACHE:-$root/.cache}"

# binary | module folder under tools/ | package built | module whose version names the output folder |
# CPU-seconds of its first build (measured on a 2-core machine, Go build cache filled in this order; docs/development.md)
BINARIES=(
  "kube-apiserver|kube-apiserver|.|k8s.io/kubernetes|530"
  "etcd|kube-apiserver|./etcd|k8s.io/kubernetes|30"
  "kube-scheduler|kube-apiserver|k8s.io/kubernetes/cmd/kube-scheduler|k8s.io/kubernetes|35"
  "kube-controller-manager|kube-apiserver|k8s.io/kubernetes/cmd/kube-controller-manager|k8s.io/kubernetes|75"
  "kwok|kwok|sigs.k8s.io/kwok/cmd/kwok|sigs.k8s.io/kwok|160"
  "kueue|kueue|sigs.k8s.io/kueue/cmd/kueue|sigs.k8s.io/kueue|450"
  "mpi-operator|mpi-operator|github.com/kubeflow/mpi-operator/cmd/mpi-operator|github.com/kubeflow/mpi-operator|250"
  "jobset|jobset|sigs.k8s.io/jobset|sigs.k8s.io/jobset|175"
  "trainer-controller-manager|trainer|github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager|github.com/kubeflow/trainer/v2|170"
  "training-operator|training-operator|github.com/kubeflow/training-operator/cmd/training-operator.v1|github.com/kubeflow/training-operator|180"
  "karpenter-kwok|karpenter-kwok|sigs.k8s.io/karpenter/kwok|sigs.k8s.io/karpenter|210"
  "compute-domain-controller|dra-driver-nvidia-gpu|sigs.k8s.io/dra-driver-nvidia-gpu/cmd/compute-domain-controller|sigs.k8s.io/dra-driver-nvidia-gpu|190"
)

# Go: the one on PATH (1.21 or later fetches the toolchain a go.mod asks for by itself); without one, the Go
# distribution that the Go module proxy serves as module golang.org/toolchain (what `go` itself downloads
# for GOTOOLCHAIN), checked against the SHA-256 pinned here, into .cache/go-<version>/.
GO_BOOTSTRAP=go1.26.8
declare -A GO_SHA256=(
  [linux-amd64]=30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7
  [linux-arm64]=02b36b6787b3ac767668f630e2998df45a3b1f9ffee08d1bf3ef6487cd658d99
)
go_on_path() {
  command -v go >/dev/null && return 0
  local platform goroot proxy zip
  case "$(uname -m)" in x86_64) platform=linux-amd64 ;; aarch64|arm64) platform=linux-arm64 ;; *) platform=unknown ;; esac
  [[ "$(uname -s)" == Linux && -n "${GO_SHA256[$platform]:-}" ]] || {
    echo "build.sh: no Go on PATH: install Go (https://go.dev/dl/)" >&2; exit 1; }
  goroot="$root/.cache/$GO_BOOTSTRAP.$platform"
  if [[ ! -x "$goroot/bin/go" ]]; then
    proxy="${GOPROXY:-https://proxy.golang.org}"; proxy="${proxy%%[,|]*}"
    [[ "$proxy" == http* ]] || proxy=https://proxy.golang.org
    zip="$root/.cache/.$GO_BOOTSTRAP.$platform.zip"
    mkdir -p "$root/.cache"
    echo "build.sh: no Go on PATH: downloading $GO_BOOTSTRAP ($platform, ~70 MB) from $proxy ..." >&2
    curl -fsSL --retry 3 -o "$zip" "$proxy/golang.org/toolchain/@v/v0.0.1-$GO_BOOTSTRAP.$platform.zip"
    echo "${GO_SHA256[$platform]}  $zip" | sha256sum -c --quiet - || { rm -f "$zip"; echo "build.sh: checksum mismatch" >&2; exit 1; }
    rm -rf "$goroot.tmp"
    # unzip may be missing; Python's zipfile does not restore the files' modes, so set them from the archive
    python3 - "$zip" "$goroot.tmp" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for info in z.infolist():
        # entries are golang.org/toolchain@v0.0.1-<go version>.<platform>/<path in GOROOT>
        rel = info.filename.split("/", 2)[2]
        if not rel or info.is_dir():
            continue
        dest = os.path.join(sys.argv[2], rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with z.open(info) as src, open(dest, "wb") as out:
            out.write(src.read())
        os.chmod(dest, (info.external_attr >> 16) & 0o777 or 0o644)
PY
    rm -f "$zip"
    mv "$goroot.tmp" "$goroot"
  fi
  export PATH="$goroot/bin:$PATH" GOTOOLCHAIN=local
}

# The version of module $2 that tools/$1/go.mod requires.
required_version() {
  awk -v m="$2" '($1 == m || ($1 == "require" && $2 == m)) { for (i = 1; i <= NF; i++) if ($i ~ /^v[0-9]/) { print $i; exit } }' \
    "$here/$1/go.mod"
}

declare -A ROW=()
for row in "${BINARIES[@]}"; do ROW["${row%%|*}"]="$row"; done

# tools/build.sh --module-dir BINARY: the folder of the Go module BINARY is built from, at the version required
# (downloaded into the module cache when missing): upstream's own manifests at exactly the binary's version.
if [[ "${1:-}" == --module-dir ]]; then
  [[ -n "${2:-}" && -n "${ROW[$2]:-}" ]] || { echo "build.sh: --module-dir needs a binary (known: ${!ROW[*]})" >&2; exit 2; }
  IFS='|' read -r _ dir _ module _ <<<"${ROW[$2]}"
  go_on_path
  (cd "$here/$dir" && GOFLAGS=-mod=readonly go mod download -json "$module@$(required_version "$dir" "$module")") |
    python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["Dir"]) if "Dir" in d else sys.exit("build.sh: " + d.get("Error", "no Dir"))'
  exit
fi
wanted=("$@")
if [[ ${#wanted[@]} -eq 0 ]]; then for row in "${BINARIES[@]}"; do wanted+=("${row%%|*}"); done; fi

# The binaries asked for and where they go; the ones still to build, with the time they may take.
declare -A OUT=()
missing=() seconds=0
for name in "${wanted[@]}"; do
  [[ -n "${ROW[$name]:-}" ]] || { echo "build.sh: no binary $name here (known: ${!ROW[*]})" >&2; exit 2; }
  IFS='|' read -r _ dir _ module cost <<<"${ROW[$name]}"
  version="$(required_version "$dir" "$module")"
  [[ -n "$version" ]] || { echo "build.sh: tools/$dir/go.mod requires no version of $module" >&2; exit 1; }
  OUT[$name]="$cache/$dir-$version/$name"
  if [[ ! -x "${OUT[$name]}" ]]; then missing+=("$name"); seconds=$((seconds + cost)); fi
done

if [[ ${#missing[@]} -gt 0 ]]; then
  go_on_path
  mkdir -p "$cache"
  # one build at a time (pytest workers may ask together): the second waits, then finds the binaries built
  exec 9>"$cache/.build.lock"
  command -v flock >/dev/null && flock 9
  echo "build.sh: building ${missing[*]} from the Go modules under tools/ (first time: about $(((seconds + 59) / 60)) CPU-minutes," \
    "up to 10 GB of Go build cache; later runs do nothing) ..." >&2
fi
for name in "${missing[@]}"; do
  out="${OUT[$name]}"
  [[ -x "$out" ]] && continue  # built by the build this one waited for
  IFS='|' read -r _ dir pkg module cost <<<"${ROW[$name]}"
  version="$(required_version "$dir" "$module")"
  ldflags="-s -w"
  if [[ "$module" == k8s.io/kubernetes ]]; then
    major="${version#v}"; major="${major%%.*}"
    minor="${version#v*.}"; minor="${minor%%.*}"
    ldflags+=" -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=$major"
    ldflags+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  fi
  echo "build.sh: building $name ($module $version) into $(dirname "$out") (first time: about $cost CPU-seconds) ..." >&2
  start=$SECONDS
  mkdir -p "$(dirname "$out")"
  # build next to the target, then rename: an interrupted build never leaves a binary that looks finished
  tmp="$(mktemp "$(dirname "$out")/.$name.XXXXXX")"
  trap 'rm -f "$tmp"' EXIT
  (cd "$here/$dir" && GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp" "$pkg")
  chmod 755 "$tmp"
  mv -f "$tmp" "$out"
  trap - EXIT
  echo "build.sh: built $name in $((SECONDS - start))s" >&2
done
for name in "${wanted[@]}"; do
  [[ " ${missing[*]} " == *" $name "* ]] || echo "build.sh: $name: already built (${OUT[$name]})" >&2
  echo "$name ${OUT[$name]}"
done

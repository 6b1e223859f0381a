#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the Go modules pinned in go.mod/go.sum (tools/kube-apiserver/) into
# .cache/kube-apiserver-<version>/ at the repository root; a binary that is already there is not rebuilt.
# Prints the folder as its last line. Needs the Go module proxy, and Go (downloaded when missing, see below).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")"
[[ -n "$version" ]] || { echo "build.sh: no k8s.io/kubernetes version in $here/go.mod" >&2; exit 1; }
out="${KUBE_APISERVER_CACHE:-$root/.cache}/kube-apiserver-$version"

# Go: the one on PATH (1.21 or later fetches the toolchain go.mod asks for by itself); without one, the Go
# distribution that the Go module proxy serves as module golang.org/toolchain (what `go` itself downloads
# for GOTOOLCHAIN), checked against the SHA-256 pinned here, into .cache/go-<version>/.
GO_BOOTSTRAP=go1.26.8
declare -A GO_SHA256=(
  [linux-amd64]=30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7
  [linux-arm64]=02b36b6787b3ac767668f630e2998df45a3b1f9ffee08d1bf3ef6487cd658d99
)
if ! command -v go >/dev/null; then
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
fi
mkdir -p "$out"
major="${version#v}"; major="${major%%.*}"
minor="${version#v*.}"; minor="${minor%%.*}"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
for target in kube-apiserver:. etcd:./etcd; do
  name="${target%%:*}"; pkg="${target#*:}"
  if [[ -x "$out/$name" ]]; then
    echo "build.sh: $name for k8s.io/kubernetes $version: already built ($out/$name)" >&2
    continue
  fi
  echo "build.sh: building $name for k8s.io/kubernetes $version into $out (first time: several minutes) ..." >&2
  start=$SECONDS
  # build next to the target, then rename: an interrupted build never leaves a binary that looks finished
  tmp="$(mktemp "$out/.$name.XXXXXX")"
  trap 'rm -f "$tmp"' EXIT
  (cd "$here" && GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp" "$pkg")
  chmod 755 "$tmp"
  mv -f "$tmp" "$out/$name"
  trap - EXIT
  echo "build.sh: built $name in $((SECONDS - start))s" >&2
done
echo "$out"

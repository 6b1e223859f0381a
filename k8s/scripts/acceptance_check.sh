#!/bin/bash
# efa-stack node acceptance: the checks one node runs, printed as machine-readable sections:
#   === efa-stack-check BEGIN <check> ===
#   <the tool's own output>
#   === efa-stack-check END <check> rc=<exit code>|rc=skipped ===
# efa_stack/acceptance/checks.py reads them back. Run as
#   check.sh dcgm LEVEL OUTFILE               (DCGM image, init container: writes the dcgm section to OUTFILE)
#   check.sh lustre MOUNT MIB UNIT SECONDS OUTFILE
#                                             (init container, privileged, host PID namespace, the FSx claim at
#                                              MOUNT: writes the LNet sections to OUTFILE)
#   check.sh node GPUS EFA DCGMFILE [LUSTREFILE]
#                                             (nccl-tests image: every other section; EFA 0 skips the EFA checks;
#                                              with NVREG_PARAMS set, the NVIDIA module's parameters from that file)
# The script never fails itself (exit 0): the verdict is read from the sections.
set -u
mode="${1:?usage: check.sh dcgm LEVEL OUTFILE | lustre MOUNT MIB UNIT SECONDS OUTFILE | node GPUS EFA DCGMFILE [LUSTREFILE]}"

begin() { echo "=== efa-stack-check BEGIN $1 ==="; }
end() { echo "=== efa-stack-check END $1 rc=$2 ==="; }
section() {
  local name="$1"; shift
  begin "$name"
  "$@" 2>&1
  local rc=$?
  end "$name" "$rc"
}
skipped() { begin "$1"; echo "skipped: $2"; end "$1" skipped; }

# fabtests fi_pingpong, server and client on this node over the EFA provider's RDM endpoint (as the
# EFA installer's efa_test.sh does); the client connects its control socket to 127.0.0.1. Both ends are
# on one node, where the efa provider would hand the traffic to its shm peer provider: with
# FI_EFA_ENABLE_SHM_TRANSFER=0 (ofiwg/libfabric@v2.4.0 man/fi_efa.7.md, "Enable SHM provider to provide
# the communication across all intra-node processes"; default on) it goes through the EFA device.
pingpong() {
  FI_EFA_ENABLE_SHM_TRANSFER=0 fi_pingpong -p efa -e rdm >/tmp/pingpong-server.log 2>&1 &
  local server=$!
  sleep 2
  FI_EFA_ENABLE_SHM_TRANSFER=0 timeout 120 fi_pingpong -p efa -e rdm 127.0.0.1
  local rc=$?
  wait "$server"
  local src=$?
  echo "server:"
  cat /tmp/pingpong-server.log
  [ "$rc" -ne 0 ] && return "$rc"
  return "$src"
}

case "$mode" in
  dcgm)
    level="${2:?level}"; out="${3:?outfile}"
    {
      if ! command -v dcgmi >/dev/null 2>&1; then
        skipped dcgm "image has no dcgmi"
      else
        # dcgmi needs a host engine; the DCGM image ships nv-hostengine: start one for this pod.
        if ! dcgmi discovery -l >/dev/null 2>&1; then
          nv-hostengine -f /tmp/nv-hostengine.log >/dev/null 2>&1
          sleep 5
        fi
        section dcgm dcgmi diag -r "$level" -j
      fi
    } >"$out"
    cat "$out"
    ;;
  lustre)
    # LNet is the host kernel's: lnetctl and systemctl run in the host's mount and network namespaces (nsenter
    # into PID 1, which the pod's host PID namespace shows); the write goes through this pod's mount of the claim,
    # whose Lustre client is the same kernel's. LNet counts messages per network interface: a direct write of MIB
    # 1 MiB blocks is MIB bulk RPCs, which ride @efa when Lustre uses EFA (metadata RPCs and pings ride tcp).
    mnt="${2:?mount path}"; mib="${3:?MiB}"; unit="${4:?unit}"; seconds="${5:?seconds}"; out="${6:?outfile}"
    host() { nsenter -t 1 -m -n -- "$@"; }
    probe="$mnt/.efa-stack-lnet-probe-$(hostname)"
    {
      section lnet-before host lnetctl net show -v
      section lnet-unit host systemctl is-active "$unit"
      section lustre-write timeout "$seconds" dd if=/dev/zero of="$probe" bs=1M count="$mib" oflag=direct conv=fsync
      rm -f "$probe"
      section lnet-after host lnetctl net show -v
    } >"$out"
    cat "$out"
    ;;
  node)
    gpus="${2:?gpus}"; efa="${3:?efa}"; dcgmfile="${4:?dcgm file}"; lustrefile="${5:-}"
    section gpu-count nvidia-smi -L
    # What the node runs, judged against the known-bad rows of efa_stack/planning/data/efa_software.json: the
    # NVIDIA driver (one line per GPU), the EFA kernel driver's module version (MODULE_VERSION, e.g. "3.1.0g":
    # amzn/amzn-drivers kernel/linux/efa/src/efa_main.c; /sys/module is the host's) and the libfabric jobs load.
    section nvidia-driver nvidia-smi --query-gpu=driver_version --format=csv,noheader
    # UltraServer nodes: the nvidia module's parameters as the kernel holds them (the host's /proc/driver/nvidia,
    # mounted read-only), one "Name: value" line each; the module option efa-stack's user data sets must be there.
    if [ -n "${NVREG_PARAMS:-}" ]; then
      section nvreg cat "$NVREG_PARAMS"
    fi
    if [ -s "$dcgmfile" ]; then
      cat "$dcgmfile"
    else
      skipped dcgm "no DCGM result in $dcgmfile (the dcgm init container did not write one)"
    fi
    if [ "$efa" -gt 0 ]; then
      section efa-driver cat "${EFA_MODULE_DIR:-/sys/module/efa}/version"
      section libfabric fi_info --version
      section efa-devices fi_info -p efa -t FI_EP_RDM
      section efa-pingpong pingpong
      if [ -n "$lustrefile" ]; then
        if [ -s "$lustrefile" ]; then
          cat "$lustrefile"
        else
          skipped lnet-before "no LNet result in $lustrefile (the lustre init container did not write one)"
        fi
      fi
    else
      skipped efa-driver "node group has no EFA (--no-efa)"
      skipped libfabric "node group has no EFA (--no-efa)"
      skipped efa-devices "node group has no EFA (--no-efa)"
      skipped efa-pingpong "node group has no EFA (--no-efa)"
    fi
    section nccl-single all_reduce_perf -b 8 -e 4G -f 2 -g "$gpus"
    ;;
  *)
    echo "check.sh: unknown mode $mode" >&2
    exit 2
    ;;
esac
exit 0

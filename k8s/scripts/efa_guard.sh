#!/bin/sh
# efa-stack EFA guard: fail the pod before NCCL can silently fall back to TCP sockets.
#
# Runs as the init container "efa-guard" of every EFA worker pod (k8s/efa_guard.py renders it and
# documents the sources of each fact used here). It checks, in order:
#   1. fi_info (libfabric, from the EFA installer) is in the image;
#   2. the NCCL net plugin library that NCCL will dlopen is on LD_LIBRARY_PATH (aws-ofi-nccl);
#   3. libfabric's EFA provider sees EFA_GUARD_EXPECTED_EFA devices (fi_info -p efa -t FI_EP_RDM);
#   4. EFA_GUARD_EXPECTED_EFA /dev/infiniband/uverbs* device files are in the container.
# On the first failure it prints ONE line starting with "efa-stack guard: FAIL" naming the node, the
# pod, what was expected, what was found and the fix, writes the same line to the termination
# message file, and exits 1. On success it prints one "efa-stack guard: OK" line and exits 0.
#
# Inputs (environment):
#   EFA_GUARD_EXPECTED_EFA   EFA devices the plan gives this pod (required, >= 1)
#   EFA_GUARD_EXPECTED_GPUS  GPUs of the node (for the message)
#   EFA_GUARD_DEVICES        "dra" when the pod claims its EFA devices from the EFA DRA driver (aws-dranet)
#                            instead of requesting vpc.amazonaws.com/efa from the device plugin (the fixes differ)
#   NODE_NAME, POD_NAME, POD_NAMESPACE   from the downward API
#   NCCL_NET_PLUGIN, LD_LIBRARY_PATH     as the workload sees them
#   EFA_GUARD_DEVICE_DIR       default /dev/infiniband (tests point it at a temporary directory)
#   EFA_GUARD_TERMINATION_LOG  default /dev/termination-log (tests point it at a temporary file)
#   EFA_GUARD_LDCONFIG         default ldconfig (tests replace it)
set -u

expected="${EFA_GUARD_EXPECTED_EFA:-}"
gpus="${EFA_GUARD_EXPECTED_GPUS:-?}"
node="${NODE_NAME:-unknown-node}"
pod="${POD_NAMESPACE:-default}/${POD_NAME:-unknown-pod}"
device_dir="${EFA_GUARD_DEVICE_DIR:-/dev/infiniband}"
if [ "${EFA_GUARD_DEVICES:-plugin}" = "dra" ]; then
  provider_fix="check that this container lists the pod's EFA claim under resources.claims, that the aws-dranet DaemonSet runs on $node (kubectl -n kube-system get ds aws-dranet) and publishes its EFA devices (kubectl get resourceslices --field-selector spec.nodeName=$node,spec.driver=dra.net), and that no /dev/infiniband hostPath or other verbs device is mounted"
  count_fix="check the ResourceSlices of $node (kubectl get resourceslices --field-selector spec.nodeName=$node,spec.driver=dra.net), the claim's allocation (kubectl get resourceclaims -n ${POD_NAMESPACE:-default}) and that the node group's launch template declares every EFA interface"
else
  provider_fix="request vpc.amazonaws.com/efa in this container, check the EFA device plugin runs on $node (kubectl -n kube-system get ds) and that the node group has efaEnabled: true"
  count_fix="check kubectl describe node $node (allocatable vpc.amazonaws.com/efa), that the node group's launch template declares every EFA interface, and that nothing else on the node holds EFA devices"
fi
termination_log="${EFA_GUARD_TERMINATION_LOG:-/dev/termination-log}"

report() {
  # report STATUS TEXT: one line on stderr and in the termination message file
  line="efa-stack guard: $1 node=$node pod=$pod: $2"
  printf '%s\n' "$line" >&2
  { printf '%s\n' "$line" > "$termination_log"; } 2>/dev/null || true
}

fail() {
  # fail FOUND FIX
  report FAIL "expected $expected EFA devices ($gpus GPUs) but $1. Fix: $2"
  exit 1
}

case "$expected" in
  ''|*[!0-9]*|0)
    report FAIL "EFA_GUARD_EXPECTED_EFA is '$expected', not a positive device count. Fix: render the pod with efa-stack (k8s/efa_guard.py) or set ncclTest.efaGuard: false"
    exit 1
    ;;
esac

# 1. libfabric's fi_info, installed by the EFA installer under /opt/amazon/efa/bin
if ! command -v fi_info >/dev/null 2>&1; then
  fail "found no fi_info on PATH ($PATH): the image lacks the EFA software (libfabric)" \
    "use an image built with the AWS EFA installer and aws-ofi-nccl (the default ncclTest.image), or add /opt/amazon/efa/bin to PATH"
fi

# 2. the net plugin library NCCL dlopens: libnccl-net.so when NCCL_NET_PLUGIN is unset; otherwise the
#    name itself and, for a bare name, libnccl-net-<name>.so
plugin="${NCCL_NET_PLUGIN:-}"
if [ -z "$plugin" ]; then
  candidates="libnccl-net.so"
else
  candidates="$plugin"
  case "$plugin" in
    */*|lib*.so) ;;
    *) candidates="$plugin libnccl-net-$plugin.so" ;;
  esac
fi
found_plugin=""
for name in $candidates; do
  case "$name" in
    /*) [ -e "$name" ] && found_plugin="$name" ;;
    *)
      # where dlopen looks: LD_LIBRARY_PATH, the ld.so cache, then the trusted directories
      old_ifs="$IFS"; IFS=":"
      for dir in ${LD_LIBRARY_PATH:-}; do
        if [ -n "$dir" ] && [ -e "$dir/$name" ]; then found_plugin="$dir/$name"; break; fi
      done
      IFS="$old_ifs"
      if [ -z "$found_plugin" ] && command -v "${EFA_GUARD_LDCONFIG:-ldconfig}" >/dev/null 2>&1; then
        found_plugin=$("${EFA_GUARD_LDCONFIG:-ldconfig}" -p 2>/dev/null | sed -n "s|^[[:space:]]*$name (.*) => ||p" | sed -n '1p')
      fi
      for dir in /lib /usr/lib /lib64 /usr/lib64; do
        if [ -z "$found_plugin" ] && [ -e "$dir/$name" ]; then found_plugin="$dir/$name"; fi
      done
      ;;
  esac
  [ -n "$found_plugin" ] && break
done
if [ -z "$found_plugin" ]; then
  fail "found no NCCL net plugin ($candidates) on LD_LIBRARY_PATH (${LD_LIBRARY_PATH:-unset}), in the ld.so cache or in /lib, /usr/lib: the image lacks aws-ofi-nccl" \
    "use an image with aws-ofi-nccl (the EFA installer puts it in /opt/amazon/ofi-nccl/lib on Ubuntu, lib64 on Amazon Linux; lib/<arch> before installer 1.44) and put that directory on LD_LIBRARY_PATH"
fi

# 3. EFA devices libfabric sees: one RDM record per device and fabric (efa, and efa-direct on
#    libfabric >= 2.x); count distinct device names (domain without its -rdm/-dgrm suffix) of
#    records whose provider is exactly "efa" (older libfabric also lists "efa;ofi_rxd" layers)
fi_out=$(fi_info -p efa -t FI_EP_RDM 2>&1)
fi_rc=$?
devices=" "
provider=""
type=""
domain=""
flush() {
  if [ "$provider" = "efa" ] && [ "$type" = "FI_EP_RDM" ] && [ -n "$domain" ]; then
    dev="${domain%-rdm}"
    dev="${dev%-dgrm}"
    case "$devices" in
      *" $dev "*) ;;
      *) devices="$devices$dev " ;;
    esac
  fi
  provider=""; type=""; domain=""
}
newline='
'
set -f  # split fi_info's output into lines and words below; never expand them as globs
old_ifs="$IFS"; IFS="$newline"
for raw in $fi_out; do
  IFS="$old_ifs"
  # shellcheck disable=SC2086 # word splitting is the point: "domain: rdmap16s27-rdm" -> $1 $2
  set -- $raw
  case "${1:-}" in
    provider:) flush; provider="${2:-}" ;;
    domain:) domain="${2:-}" ;;
    type:) type="${2:-}" ;;
  esac
  IFS="$newline"
done
IFS="$old_ifs"
flush
# shellcheck disable=SC2086 # one word per device
set -- $devices
set +f
efa_found=$#
if [ "$efa_found" -eq 0 ]; then
  first=$(printf '%s\n' "$fi_out" | sed -n '1p')
  fail "libfabric finds no EFA provider (fi_info -p efa -t FI_EP_RDM exited $fi_rc: ${first:-no output})" \
    "$provider_fix"
fi

# 4. the verbs device files the EFA device plugin mounts into a container that requests EFA
uverbs=0
for f in "$device_dir"/uverbs*; do
  [ -e "$f" ] && uverbs=$((uverbs + 1))
done

if [ "$efa_found" -lt "$expected" ] || [ "$uverbs" -lt "$expected" ]; then
  fail "found $efa_found via fi_info -p efa and $uverbs $device_dir/uverbs* device files" \
    "$count_fix"
fi

report OK "$efa_found EFA devices via fi_info -p efa, $uverbs $device_dir/uverbs* device files (expected $expected, $gpus GPUs); NCCL net plugin $found_plugin"
exit 0

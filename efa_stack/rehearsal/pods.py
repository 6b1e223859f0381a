"""What a kubelet would give a controller's container, for running that container's binary as a local process.

A controller efa-stack renders as a Deployment runs here from that Deployment: its container's ``command``/``args`` and
``env`` as rendered (``fieldRef`` to the pod's namespace and name resolved), its ConfigMap and Secret volumes written
into files under the controller's state directory, and every argument that names a path under a mount rewritten to
the file written for it. So the flags, the configuration and the certificates the cluster would give the controller
are the ones it starts with; what differs is listed by the caller (ports, certificate directories).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Container:
    """A container of a rendered pod template, as a local process would run it."""

    args: tuple[str, ...]
    """``command`` (less the image's binary, which is replaced by the local one) and ``args``, mount paths rewritten."""
    env: dict[str, str]
    mounts: dict[str, Path]
    """Mount path in the container -> the file or folder written for it."""


def _volume_files(volume: dict[str, Any], objects: Mapping[tuple[str, str], dict[str, Any]]) -> dict[str, bytes]:
    """Key -> content of a ConfigMap or Secret volume (``objects``: (kind, name) -> the rendered object)."""
    if "configMap" in volume:
        source = objects.get(("ConfigMap", volume["configMap"]["name"]))
        return {k: str(v).encode() for k, v in ((source or {}).get("data") or {}).items()}
    if "secret" in volume:
        source = objects.get(("Secret", volume["secret"]["secretName"]))
        files = {k: base64.b64decode(v) for k, v in ((source or {}).get("data") or {}).items()}
        files.update({k: str(v).encode() for k, v in ((source or {}).get("stringData") or {}).items()})
        return files
    return {}


def mount(template: dict[str, Any], container: dict[str, Any], objects: Mapping[tuple[str, str], dict[str, Any]],
          folder: Path) -> dict[str, Path]:
    """Write the ConfigMap and Secret volumes ``container`` mounts into ``folder``; mount path -> local path."""
    volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
    out: dict[str, Path] = {}
    for m in container.get("volumeMounts", []):
        volume = volumes.get(m["name"], {})
        files = _volume_files(volume, objects)
        local = folder / m["mountPath"].strip("/").replace("/", "_")
        if m.get("subPath"):
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_bytes(files.get(m["subPath"], b""))
        else:
            local.mkdir(parents=True, exist_ok=True)
            for key, content in files.items():
                (local / key).write_bytes(content)
        out[m["mountPath"]] = local
    return out


def _rewrite(arg: str, mounts: Mapping[str, Path]) -> str:
    for path in sorted(mounts, key=len, reverse=True):
        if path in arg:
            return arg.replace(path, str(mounts[path]))
    return arg


def container(template: dict[str, Any], name: str, objects: Mapping[tuple[str, str], dict[str, Any]], *,
              namespace: str, pod_name: str, folder: Path, image_binary: Sequence[str] = ()) -> Container:
    """Container ``name`` of pod ``template`` with its mounts written under ``folder``.

    ``image_binary``: the leading words of ``command`` that name the image's own binary (``/manager``), dropped
    because the local binary takes their place."""
    spec = next(c for c in template["spec"]["containers"] if c["name"] == name)
    mounts = mount(template, spec, objects, folder)
    command = list(spec.get("command", []))
    if command[: len(image_binary)] == list(image_binary):
        command = command[len(image_binary):]
    args = tuple(_rewrite(a, mounts) for a in [*command, *spec.get("args", [])])
    fields = {"metadata.namespace": namespace, "metadata.name": pod_name}
    env: dict[str, str] = {}
    for e in spec.get("env", []):
        if "value" in e:
            env[e["name"]] = str(e["value"])
        elif "fieldRef" in (e.get("valueFrom") or {}):
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            if path not in fields:
                raise ValueError(f"container {name}: env {e['name']} refers to {path}, which a local process lacks")
            env[e["name"]] = fields[path]
    return Container(args, env, mounts)

"""A small Kubernetes API client over HTTPS with a bearer token: JSON in and out, server-side apply as kubectl does it.

urllib only (no extra dependency); the API server test (tests/test_apiserver.py) and the rehearsal share it. Kinds are
mapped to REST resources by API discovery, refreshed when a kind is not found (a CRD established a moment ago).
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

REQUEST_TIMEOUT = 30
"""Seconds one request may take."""
FIELD_MANAGER = "efa-stack-test"
"""The field manager of what is applied (``kubectl apply --server-side`` uses ``kubectl``)."""

T = TypeVar("T")


@dataclass
class Response:
    status: int
    body: dict[str, Any]
    warnings: list[str] = field(default_factory=list)  # the Warning headers (RFC 7234 "299 - <text>")

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def message(self) -> str:
        causes = "; ".join(
            f"{c.get('field', '')}: {c.get('message', '')}" for c in self.body.get("details", {}).get("causes", [])
        )
        return f"HTTP {self.status} {self.body.get('reason', '')}: {self.body.get('message', '')}" + (
            f" [{causes}]" if causes else ""
        )


@dataclass
class Resource:
    plural: str
    namespaced: bool


class ApiError(RuntimeError):
    """A request the server refused, with what was asked and the server's message."""


@dataclass
class Api:
    """kube-apiserver at ``url`` with bearer ``token``, the server's certificate checked against ``context``."""

    url: str
    context: ssl.SSLContext
    token: str
    field_manager: str = FIELD_MANAGER
    _resources: dict[str, dict[str, Resource]] = field(default_factory=dict)  # apiVersion -> kind -> resource

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                query: dict[str, str] | None = None) -> Response:
        url = self.url + path + (("?" + urllib.parse.urlencode(query)) if query else "")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=REQUEST_TIMEOUT) as resp:
                return Response(resp.status, _json(resp.read()), resp.headers.get_all("Warning") or [])
        except urllib.error.HTTPError as err:
            return Response(err.code, _json(err.read()), err.headers.get_all("Warning") or [])

    def resource(self, api_version: str, kind: str) -> Resource:
        """The REST resource of ``kind`` in ``api_version`` (API discovery, refreshed when not found); KeyError when
        the server serves no such kind."""
        if kind not in self._resources.get(api_version, {}):
            found = self.request("GET", _base(api_version))
            if found.status != 200:
                raise KeyError(f"discovery of {api_version}: {found.message()}")
            self._resources[api_version] = {
                r["kind"]: Resource(r["name"], r["namespaced"]) for r in found.body["resources"] if "/" not in r["name"]
            }
        if kind not in self._resources[api_version]:
            raise KeyError(f"the server serves no kind {kind} in {api_version}")
        return self._resources[api_version][kind]

    def forget(self, api_version: str) -> None:
        """Discover ``api_version`` again on next use (a CRD of it was just established)."""
        self._resources.pop(api_version, None)

    def path(self, obj: dict[str, Any], *, with_name: bool = True) -> str:
        api_version, kind, meta = obj["apiVersion"], obj["kind"], obj["metadata"]
        res = self.resource(api_version, kind)
        ns = f"/namespaces/{meta.get('namespace') or 'default'}" if res.namespaced else ""
        return f"{_base(api_version)}{ns}/{res.plural}" + (f"/{meta['name']}" if with_name else "")

    def collection(self, api_version: str, kind: str, namespace: str | None = None) -> str:
        res = self.resource(api_version, kind)
        ns = f"/namespaces/{namespace}" if res.namespaced and namespace else ""
        return f"{_base(api_version)}{ns}/{res.plural}"

    def apply(self, obj: dict[str, Any]) -> Response:
        """Server-side apply, as ``kubectl apply --server-side --force-conflicts`` (JSON is YAML); an unknown or
        duplicate field is an error, as with kubectl's default ``--validate=strict``."""
        return self.request(
            "PATCH", self.path(obj), obj, content_type="application/apply-patch+yaml",
            query={"fieldManager": self.field_manager, "force": "true", "fieldValidation": "Strict"},
        )

    def dry_run_create(self, obj: dict[str, Any]) -> Response:
        """Create with ``dryRun=All``: validated and admitted in full, stored nowhere."""
        return self.request(
            "POST", self.path(obj, with_name=False), obj, query={"dryRun": "All", "fieldValidation": "Strict"}
        )

    def create(self, obj: dict[str, Any]) -> Response:
        return self.request("POST", self.path(obj, with_name=False), obj, query={"fieldValidation": "Strict"})

    def merge_patch(self, obj: dict[str, Any], patch: dict[str, Any], *, subresource: str = "") -> Response:
        """A JSON merge patch, as ``kubectl patch --type merge``."""
        return self.request("PATCH", self.path(obj) + (f"/{subresource}" if subresource else ""), patch,
                            content_type="application/merge-patch+json")

    def delete(self, obj: dict[str, Any]) -> Response:
        return self.request("DELETE", self.path(obj), {"propagationPolicy": "Background"})

    def get(self, obj: dict[str, Any]) -> Response:
        return self.request("GET", self.path(obj))

    def list(self, api_version: str, kind: str, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None) -> list[dict[str, Any]]:
        """The objects of ``kind`` (in ``namespace``, or everywhere); :class:`ApiError` when the list is refused."""
        query = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v} or None
        got = self.request("GET", self.collection(api_version, kind, namespace), query=query)
        if got.status != 200:
            raise ApiError(f"list {kind} {namespace or ''}: {got.message()}")
        items: list[dict[str, Any]] = got.body.get("items", [])
        return items

    def service_account_token(self, namespace: str, name: str, *, seconds: int = 86400) -> str:
        """A token of ServiceAccount ``namespace/name`` from the TokenRequest API (what the kubelet mounts into a
        pod of that ServiceAccount)."""
        got = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                           {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                            "spec": {"expirationSeconds": seconds}})
        if got.status != 201:
            raise ApiError(f"TokenRequest for ServiceAccount {namespace}/{name}: {got.message()}")
        return str(got.body["status"]["token"])


def _base(api_version: str) -> str:
    return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"


def _json(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw or b"{}")
    except ValueError:
        return {"message": raw.decode(errors="replace")}
    return value if isinstance(value, dict) else {"value": value}


def poll(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 0.5) -> T:
    """The first value ``probe`` returns that is not None, polled every ``interval`` seconds; TimeoutError naming
    ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f}s")
        time.sleep(interval)

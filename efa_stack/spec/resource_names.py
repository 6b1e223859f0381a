"""Kubernetes' rule for the extended resource names a spec may give (``trainingJobs[].rdmaResource``).

A container may request an extended resource only under a name the API server accepts
(k8s.io/kubernetes pkg/apis/core/validation ``validateContainerResourceName`` and
pkg/apis/core/helper/helpers.go, read in copies of the 1.3x sources; not checked at one tag):

* ``validateResourceName``: the name is a qualified name (k8s.io/apimachinery pkg/util/validation
  ``IsQualifiedName``); a name without a '/' must be a standard container resource (``cpu``, ``memory``,
  ``ephemeral-storage``, ``hugepages-*``), so a device plugin's resource always has a prefix.
* ``IsExtendedResourceName``: not a native resource (``IsNativeResource``: no '/', or the name contains
  ``kubernetes.io/``), not starting with ``requests.`` (``DefaultResourceRequestsPrefix``, kept for
  quotas), and ``requests.`` + the name is a qualified name as well (so the prefix has 9 characters less).
* ``IsQualifiedName``: an optional prefix, a DNS-1123 subdomain (at most 253 characters, dot-joined
  labels of ``[a-z0-9]([-a-z0-9]*[a-z0-9])?``), then '/', then a name of at most 63 characters matching
  ``([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]``.

The spec layer cannot import :mod:`efa_stack.names`, so the two patterns are repeated here with their source.
"""

from __future__ import annotations

import re

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
DNS1123_SUBDOMAIN_MAX = 253
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
QUALIFIED_NAME_MAX = 63
REQUESTS_PREFIX = "requests."
NATIVE_NAMESPACE = "kubernetes.io/"
MAX_PREFIX = DNS1123_SUBDOMAIN_MAX - len(REQUESTS_PREFIX)
"""The quota form ``requests.<prefix>/<name>`` must be a qualified name too: 244 characters of prefix."""
MAX_LENGTH = MAX_PREFIX + 1 + QUALIFIED_NAME_MAX
PATTERN = (rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*/([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
"""For the JSON schema (lengths and reserved names are :func:`extended_resource_violation`'s)."""


def extended_resource_violation(name: str) -> str | None:
    """Why Kubernetes would refuse ``name`` as an extended resource in a container's requests, or None."""
    parts = name.split("/")
    if len(parts) == 1:
        return ("has no prefix: a resource name without '/' must be a standard resource such as cpu or memory, "
                "and a device plugin's resource is <domain>/<name>")
    if len(parts) > 2:
        return "has more than one '/': a resource name is an optional DNS-1123 subdomain prefix, '/', and a name"
    prefix, short = parts
    if not prefix:
        return "has an empty prefix before '/'"
    if not DNS1123_SUBDOMAIN.fullmatch(prefix):
        return (f"has the prefix {prefix!r}, which is not a DNS-1123 subdomain (lowercase letters, digits, '-' and "
                "'.', each dot-separated part starting and ending with a letter or digit)")
    if NATIVE_NAMESPACE in name:
        return f"names the {NATIVE_NAMESPACE} namespace, which Kubernetes keeps for its native resources"
    if name.startswith(REQUESTS_PREFIX):
        return f"starts with {REQUESTS_PREFIX!r}, which Kubernetes keeps for resource quotas"
    if len(prefix) > MAX_PREFIX:
        return (f"has a prefix of {len(prefix)} characters: at most {MAX_PREFIX}, as Kubernetes also checks "
                f"'{REQUESTS_PREFIX}' + the name, whose prefix is a DNS-1123 subdomain of at most {DNS1123_SUBDOMAIN_MAX}")
    if len(short) > QUALIFIED_NAME_MAX:
        return f"has a name part of {len(short)} characters after '/': at most {QUALIFIED_NAME_MAX}"
    if not QUALIFIED_NAME.fullmatch(short):
        return (f"has the name part {short!r} after '/', which must be letters, digits, '-', '_' and '.', "
                "starting and ending with a letter or digit")
    return None

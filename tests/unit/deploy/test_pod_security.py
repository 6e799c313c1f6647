"""Every pod of deploy/kubernetes passes the Pod Security Standards' "restricted" profile with a
read-only root file system (tests/unit/deploy/pod_security.py), and the check refuses a pod
that breaks any one of its rules: it cannot pass by finding nothing to check."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.deploy import pod_security as ps
from tests.unit.deploy.test_kubernetes import WORKLOADS, objects, workloads


def pods() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [pod for obj in objects() for pod in ps.pod_templates(obj)]


def test_every_pod_of_the_manifests_is_restricted() -> None:
    found = pods()
    assert set(WORKLOADS) <= {name.split("/")[1] for name, _, _ in found}
    for name, metadata, spec in found:
        assert ps.containers(spec), name
        assert ps.violations(spec, metadata) == [], name


def good_pod() -> tuple[dict[str, Any], dict[str, Any]]:
    """The worker's pod (metadata, spec): restricted, with a volume claim and an emptyDir."""
    template = copy.deepcopy(workloads()["dedupe-worker"]["spec"]["template"])
    return template["metadata"], template["spec"]


def container(spec: dict[str, Any]) -> dict[str, Any]:
    first: dict[str, Any] = spec["containers"][0]
    return first


def context(spec: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = container(spec).setdefault("securityContext", {})
    return found


def without_pod_field(field: str) -> Callable[[dict[str, Any]], None]:
    return lambda spec: spec["securityContext"].pop(field)


def init_container_as_root(spec: dict[str, Any]) -> None:
    init = copy.deepcopy(container(spec))
    init["name"] = "init"
    init["securityContext"]["capabilities"] = {"drop": ["NET_RAW"]}
    spec["initContainers"] = [init]


def ephemeral_container(spec: dict[str, Any]) -> None:
    debug = {"name": "debug", "image": "busybox:1.36", "securityContext": {}}
    spec["ephemeralContainers"] = [debug]


#: One bad pod per rule: (what it breaks, the change to the good pod, the rule it breaks).
BAD: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    (
        "pod runAsNonRoot false",
        lambda s: s["securityContext"].update(runAsNonRoot=False),
        ps.RUN_AS_NON_ROOT,
    ),
    ("runAsNonRoot nowhere", without_pod_field("runAsNonRoot"), ps.RUN_AS_NON_ROOT),
    (
        "container runAsNonRoot false",
        lambda s: context(s).update(runAsNonRoot=False),
        ps.RUN_AS_NON_ROOT,
    ),
    ("pod uid 0", lambda s: s["securityContext"].update(runAsUser=0), ps.RUN_AS_USER),
    ("container uid 0", lambda s: context(s).update(runAsUser=0), ps.RUN_AS_USER),
    ("no drop", lambda s: context(s).pop("capabilities"), ps.CAPABILITIES),
    (
        "drops less than ALL",
        lambda s: context(s).update(capabilities={"drop": ["NET_RAW"]}),
        ps.CAPABILITIES,
    ),
    (
        "adds SYS_ADMIN",
        lambda s: context(s).update(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}),
        ps.CAPABILITIES,
    ),
    (
        "allowPrivilegeEscalation unset",
        lambda s: context(s).pop("allowPrivilegeEscalation"),
        ps.PRIVILEGE_ESCALATION,
    ),
    (
        "allowPrivilegeEscalation true",
        lambda s: context(s).update(allowPrivilegeEscalation=True),
        ps.PRIVILEGE_ESCALATION,
    ),
    ("seccomp nowhere", without_pod_field("seccompProfile"), ps.SECCOMP),
    (
        "pod seccomp Unconfined",
        lambda s: s["securityContext"].update(seccompProfile={"type": "Unconfined"}),
        ps.SECCOMP,
    ),
    (
        "container seccomp Unconfined",
        lambda s: context(s).update(seccompProfile={"type": "Unconfined"}),
        ps.SECCOMP,
    ),
    ("privileged", lambda s: context(s).update(privileged=True), ps.PRIVILEGED),
    ("hostNetwork", lambda s: s.update(hostNetwork=True), ps.HOST_NAMESPACES),
    ("hostPID", lambda s: s.update(hostPID=True), ps.HOST_NAMESPACES),
    ("hostIPC", lambda s: s.update(hostIPC=True), ps.HOST_NAMESPACES),
    (
        "hostPath volume",
        lambda s: s["volumes"].append({"name": "host", "hostPath": {"path": "/var"}}),
        ps.HOST_PATH,
    ),
    (
        "nfs volume",
        lambda s: s["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}}),
        ps.VOLUME_TYPES,
    ),
    (
        "hostPort",
        lambda s: container(s)["ports"][0].update(hostPort=6066),
        ps.HOST_PORTS,
    ),
    ("/proc unmasked", lambda s: context(s).update(procMount="Unmasked"), ps.PROC_MOUNT),
    (
        "unsafe sysctl",
        lambda s: s["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
        ps.SYSCTLS,
    ),
    (
        "SELinux type spc_t",
        lambda s: context(s).update(seLinuxOptions={"type": "spc_t"}),
        ps.SELINUX,
    ),
    (
        "SELinux user",
        lambda s: s["securityContext"].update(seLinuxOptions={"user": "system_u"}),
        ps.SELINUX,
    ),
    (
        "AppArmor Unconfined",
        lambda s: context(s).update(appArmorProfile={"type": "Unconfined"}),
        ps.APPARMOR,
    ),
    (
        "Windows host process",
        lambda s: context(s).update(windowsOptions={"hostProcess": True}),
        ps.HOST_PROCESS,
    ),
    (
        "writable root file system",
        lambda s: context(s).update(readOnlyRootFilesystem=False),
        ps.READ_ONLY_ROOT,
    ),
    (
        "readOnlyRootFilesystem unset",
        lambda s: context(s).pop("readOnlyRootFilesystem"),
        ps.READ_ONLY_ROOT,
    ),
    ("an init container that keeps capabilities", init_container_as_root, ps.CAPABILITIES),
    ("an ephemeral container unconfined", ephemeral_container, ps.PRIVILEGE_ESCALATION),
]


def test_the_good_pod_the_bad_ones_start_from_passes() -> None:
    metadata, spec = good_pod()
    assert ps.violations(spec, metadata) == []


@pytest.mark.parametrize(("change", "rule"), [(c, r) for _, c, r in BAD], ids=[b[0] for b in BAD])
def test_a_pod_that_breaks_one_rule_is_refused_for_it(
    change: Callable[[dict[str, Any]], None], rule: str
) -> None:
    metadata, spec = good_pod()
    change(spec)
    found = ps.violations(spec, metadata)
    assert any(v.startswith(f"{rule}:") for v in found), found


def test_an_apparmor_annotation_other_than_the_runtimes_default_is_refused() -> None:
    metadata, spec = good_pod()
    key = f"{ps.APPARMOR_ANNOTATION}worker"
    metadata["annotations"] = {key: "runtime/default"}
    assert ps.violations(spec, metadata) == []
    metadata["annotations"] = {key: "unconfined"}
    assert [v for v in ps.violations(spec, metadata) if v.startswith(ps.APPARMOR)]


@pytest.mark.parametrize(
    "allowed",
    [
        lambda s: context(s).update(capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}),
        lambda s: s["securityContext"].update(seccompProfile={"type": "Localhost"}),
        lambda s: (without_pod_field("runAsNonRoot")(s), context(s).update(runAsNonRoot=True)),
        lambda s: s["volumes"].append({"name": "c", "configMap": {"name": "x"}}),
    ],
    ids=["adds NET_BIND_SERVICE", "seccomp Localhost", "runAsNonRoot per container", "configMap"],
)
def test_what_the_profile_allows_passes(allowed: Callable[[dict[str, Any]], Any]) -> None:
    metadata, spec = good_pod()
    allowed(spec)
    assert ps.violations(spec, metadata) == []


@pytest.mark.parametrize(
    "kind", ["Pod", "Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"]
)
def test_the_check_finds_the_pod_of_every_kind_that_makes_pods(kind: str) -> None:
    metadata, spec = good_pod()
    context(spec).update(privileged=True)
    template = {"metadata": metadata, "spec": spec}
    obj: dict[str, Any] = {"kind": kind, "metadata": {"name": "x"}}
    if kind == "Pod":
        obj.update(template)
    elif kind == "CronJob":
        obj["spec"] = {"jobTemplate": {"spec": {"template": template}}}
    else:
        obj["spec"] = {"template": template}
    [(_, found_metadata, found_spec)] = ps.pod_templates(obj)
    assert any(v.startswith(ps.PRIVILEGED) for v in ps.violations(found_spec, found_metadata))


def test_the_namespace_enforces_the_restricted_profile() -> None:
    """The cluster's own admission check then refuses what this check would miss."""
    [namespace] = [o for o in objects() if o["kind"] == "Namespace"]
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"

"""A pure check of Kubernetes' Pod Security Standards, "restricted" profile, plus a read-only
root file system: what a namespace labelled ``pod-security.kubernetes.io/enforce: restricted``
admits, as https://kubernetes.io/docs/concepts/security/pod-security-standards/ states the
rules (the baseline profile's controls, which restricted includes, and restricted's own).

:func:`violations` reads one pod spec; :func:`pod_templates` finds the pod specs of the objects
of a manifest. Each violation starts with its rule's name (the constants below), so a test can
tell which rule a bad pod broke.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

HOST_PROCESS = "hostProcess"
HOST_NAMESPACES = "host namespaces"
PRIVILEGED = "privileged"
CAPABILITIES = "capabilities"
HOST_PATH = "hostPath volumes"
HOST_PORTS = "host ports"
APPARMOR = "AppArmor"
SELINUX = "SELinux"
PROC_MOUNT = "/proc mount type"
SECCOMP = "seccomp"
SYSCTLS = "sysctls"
VOLUME_TYPES = "volume types"
PRIVILEGE_ESCALATION = "privilege escalation"
RUN_AS_NON_ROOT = "running as non-root"
RUN_AS_USER = "running as non-root user"
READ_ONLY_ROOT = "read-only root file system"

#: Restricted: the only volume types (a PVC's storage is the admin's own choice).
VOLUME_TYPES_ALLOWED = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
#: Restricted: the one capability a container may add (after dropping ALL).
CAPABILITIES_ADDABLE = frozenset({"NET_BIND_SERVICE"})
SECCOMP_ALLOWED = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_ALLOWED = frozenset({"RuntimeDefault", "Localhost"})
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
#: Baseline: the "safe" sysctls, the only ones a pod may set.
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
#: Kinds whose spec.template is a pod template (CronJob: one level deeper).
TEMPLATED = frozenset(
    {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ReplicationController", "Job"}
)
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def pod_templates(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Each pod an object makes: (a name for messages, the pod's metadata, its spec)."""
    kind, name = obj.get("kind"), obj.get("metadata", {}).get("name", "?")
    if kind == "Pod":
        yield f"Pod/{name}", obj.get("metadata", {}), obj["spec"]
    elif kind in TEMPLATED:
        template = obj["spec"]["template"]
        yield f"{kind}/{name}", template.get("metadata", {}), template["spec"]
    elif kind == "CronJob":
        template = obj["spec"]["jobTemplate"]["spec"]["template"]
        yield f"{kind}/{name}", template.get("metadata", {}), template["spec"]


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every container of a pod, init and ephemeral ones included (the profile covers all)."""
    return [
        *spec.get("initContainers", []),
        *spec.get("containers", []),
        *spec.get("ephemeralContainers", []),
    ]


def violations(spec: dict[str, Any], metadata: dict[str, Any] | None = None) -> list[str]:
    """What the restricted profile (and a read-only root file system) refuses in a pod spec."""
    out: list[str] = []
    pod = spec.get("securityContext") or {}
    every = containers(spec)
    if not every:
        out.append(f"{RUN_AS_NON_ROOT}: a pod without containers")

    # Baseline.
    if (pod.get("windowsOptions") or {}).get("hostProcess"):
        out.append(f"{HOST_PROCESS}: the pod runs as a Windows host process")
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            out.append(f"{HOST_NAMESPACES}: {field} is set")
    for volume in spec.get("volumes", []):
        if "hostPath" in volume:
            out.append(f"{HOST_PATH}: volume {volume.get('name')!r}")
        kinds = set(volume) - {"name"}
        if not kinds <= VOLUME_TYPES_ALLOWED:
            out.append(f"{VOLUME_TYPES}: volume {volume.get('name')!r} is {sorted(kinds)}")
    for sysctl in pod.get("sysctls", []):
        if sysctl.get("name") not in SAFE_SYSCTLS:
            out.append(f"{SYSCTLS}: {sysctl.get('name')!r} is not a safe sysctl")
    annotations = (metadata or {}).get("annotations") or {}
    for key, value in annotations.items():
        if key.startswith(APPARMOR_ANNOTATION) and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            out.append(f"{APPARMOR}: {key}={value!r}")
    out.extend(_apparmor("the pod", pod))
    out.extend(_selinux("the pod", pod))
    pod_seccomp = (pod.get("seccompProfile") or {}).get("type")
    if pod_seccomp is not None and pod_seccomp not in SECCOMP_ALLOWED:
        out.append(f"{SECCOMP}: the pod's profile is {pod_seccomp!r}")
    if pod.get("runAsNonRoot") is False:
        out.append(f"{RUN_AS_NON_ROOT}: the pod sets runAsNonRoot false")
    if pod.get("runAsUser") == 0:
        out.append(f"{RUN_AS_USER}: the pod runs as uid 0")

    for container in every:
        name = f"container {container.get('name')!r}"
        context = container.get("securityContext") or {}
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"{HOST_PROCESS}: {name} runs as a Windows host process")
        if context.get("privileged"):
            out.append(f"{PRIVILEGED}: {name}")
        for port in container.get("ports", []):
            if port.get("hostPort"):
                out.append(f"{HOST_PORTS}: {name} binds host port {port['hostPort']}")
        out.extend(_apparmor(name, context))
        out.extend(_selinux(name, context))
        if context.get("procMount", "Default") != "Default":
            out.append(f"{PROC_MOUNT}: {name} mounts /proc {context['procMount']!r}")
        # Restricted.
        if context.get("allowPrivilegeEscalation") is not False:
            out.append(
                f"{PRIVILEGE_ESCALATION}: {name} does not set allowPrivilegeEscalation false"
            )
        non_root = context.get("runAsNonRoot")
        if non_root is False or (non_root is None and pod.get("runAsNonRoot") is not True):
            out.append(f"{RUN_AS_NON_ROOT}: {name} may run as root (runAsNonRoot not true)")
        if context.get("runAsUser") == 0:
            out.append(f"{RUN_AS_USER}: {name} runs as uid 0")
        seccomp = (context.get("seccompProfile") or {}).get("type")
        if seccomp is None and pod_seccomp is None:
            out.append(f"{SECCOMP}: neither the pod nor {name} sets a seccomp profile")
        elif seccomp is not None and seccomp not in SECCOMP_ALLOWED:
            out.append(f"{SECCOMP}: {name}'s profile is {seccomp!r}")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            out.append(f"{CAPABILITIES}: {name} does not drop ALL")
        added = set(capabilities.get("add") or []) - CAPABILITIES_ADDABLE
        if added:
            out.append(f"{CAPABILITIES}: {name} adds {sorted(added)}")
        # Beyond the profile: the image writes only to its volumes.
        if context.get("readOnlyRootFilesystem") is not True:
            out.append(f"{READ_ONLY_ROOT}: {name} does not set readOnlyRootFilesystem true")
    return out


def _apparmor(where: str, context: dict[str, Any]) -> list[str]:
    kind = (context.get("appArmorProfile") or {}).get("type")
    if kind is not None and kind not in APPARMOR_ALLOWED:
        return [f"{APPARMOR}: {where}'s profile is {kind!r}"]
    return []


def _selinux(where: str, context: dict[str, Any]) -> list[str]:
    options = context.get("seLinuxOptions") or {}
    out = []
    if options.get("type", "") not in SELINUX_TYPES:
        out.append(f"{SELINUX}: {where}'s type is {options['type']!r}")
    for field in ("user", "role"):
        if options.get(field):
            out.append(f"{SELINUX}: {where} sets {field}")
    return out

"""deploy/kubernetes/: every object `kubectl apply -k` would send validates against the
Kubernetes schemas (the kubernetes-validate package's, strict: an unknown field fails), and the
parts that must agree do: the ConfigMap is exporter.yaml and is mounted where --config reads it,
the port and path of --listen are the ones the probes, annotations and Service use, every host
path the exporter reads is mounted, and the privilege is what the DaemonSet's comments justify.
The manifests are not applied to a live cluster here."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

import ebpfkit

ROOT = Path(ebpfkit.__file__).resolve().parents[1]
KUBE = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.34.0"  # a recent release the package ships schemas for
# what the exporter's sources read from the node (issue #18): each a hostPath mounted in the pod
HOST_PATHS = {"/sys/fs/bpf", "/sys/kernel/btf", "/sys/kernel/tracing", "/sys/fs/cgroup", "/proc"}
CLUSTER_SCOPED = {"Namespace"}


def kustomization() -> dict:
    return yaml.safe_load((KUBE / "kustomization.yaml").read_text())


def render() -> list[dict]:
    """What `kubectl apply -k deploy/kubernetes` sends, without the generated name's hash suffix:
    the resources, and the ConfigMaps made from files, in the kustomization's namespace."""
    k = kustomization()
    docs = [doc for name in k["resources"] for doc in yaml.safe_load_all((KUBE / name).read_text()) if doc]
    for gen in k.get("configMapGenerator", []):
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]},
                     "data": {Path(f).name: (KUBE / f).read_text() for f in gen["files"]}})
    for doc in docs:
        if doc["kind"] not in CLUSTER_SCOPED:
            doc["metadata"]["namespace"] = k["namespace"]
    return docs


DOCS = render()


def one(kind: str) -> dict:
    found = [d for d in DOCS if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} objects of kind {kind}"
    return found[0]


DAEMONSET = one("DaemonSet")
POD = DAEMONSET["spec"]["template"]
CONTAINER = POD["spec"]["containers"][0]


def option(name: str) -> str:
    args = CONTAINER["args"]
    return args[args.index(name) + 1]


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_object_validates_against_the_kubernetes_schema(doc):
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_schema_check_can_fail():
    broken = yaml.safe_load(yaml.safe_dump(DAEMONSET))
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["paht"] = "/metrics"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_the_kustomization_names_every_manifest_of_the_directory():
    k = kustomization()
    generated = {f for gen in k["configMapGenerator"] for f in gen["files"]}
    on_disk = {p.name for p in KUBE.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(k["resources"]) | generated == on_disk
    assert one("Namespace")["metadata"]["name"] == k["namespace"]


def test_the_configmap_is_exporter_yaml_mounted_where_config_reads_it():
    (gen,) = kustomization()["configMapGenerator"]
    assert gen["files"] == ["exporter.yaml"]  # made from the file itself: no copy to drift
    volume = next(v for v in POD["spec"]["volumes"] if v.get("configMap", {}).get("name") == gen["name"])
    mount = next(m for m in CONTAINER["volumeMounts"] if m["name"] == volume["name"])
    assert option("--config") == f"{mount['mountPath']}/exporter.yaml"
    assert one("ConfigMap")["data"]["exporter.yaml"] == (KUBE / "exporter.yaml").read_text()


def test_the_exporter_config_is_one_the_exporter_accepts():
    from ebpfkit.exporter.config import load_config

    config = load_config(str(KUBE / "exporter.yaml"))  # the exporter's own checks, with line numbers
    kinds = [source.kind for source in config.sources]
    assert {"runqlat", "iofsstat", "sockmap", "guard"} <= set(kinds) and len(kinds) == len(set(kinds))


def test_probes_annotations_and_service_agree_with_listen():
    host, port = option("--listen").rsplit(":", 1)
    assert host == "0.0.0.0"  # Prometheus reaches the pod at its IP, not at its loopback
    (container_port,) = CONTAINER["ports"]
    assert container_port["containerPort"] == int(port)
    annotations = POD["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == port
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = CONTAINER[probe]["httpGet"]
        assert get["port"] == container_port["name"], probe
        assert get["path"] == annotations["prometheus.io/path"] == "/metrics", probe
    service = one("Service")
    assert service["spec"]["clusterIP"] == "None"  # one endpoint per node's pod
    (service_port,) = service["spec"]["ports"]
    assert service_port["targetPort"] == container_port["name"] and service_port["port"] == int(port)
    assert service["spec"]["selector"].items() <= POD["metadata"]["labels"].items()
    assert DAEMONSET["spec"]["selector"]["matchLabels"].items() <= POD["metadata"]["labels"].items()


def test_every_host_path_the_sources_read_is_mounted():
    host_paths = {v["name"]: v["hostPath"]["path"] for v in POD["spec"]["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m for m in CONTAINER["volumeMounts"]}
    assert set(host_paths.values()) == HOST_PATHS
    for name, path in host_paths.items():
        assert name in mounts, f"hostPath {path} is not mounted"
        # only bpffs is written (pins); the node's kernel files, cgroups and procfs are read
        assert mounts[name].get("readOnly", False) == (path != "/sys/fs/bpf"), path
    assert mounts[next(n for n, p in host_paths.items() if p == "/sys/fs/bpf")]["mountPath"] == "/sys/fs/bpf"
    assert POD["spec"]["hostPID"] is True


def test_privilege_is_only_what_the_comments_justify():
    security = CONTAINER["securityContext"]
    privileged = security.get("privileged", False)
    assert privileged is False
    # the API server (not the schema) refuses Bidirectional propagation in other containers
    for mount in CONTAINER["volumeMounts"]:
        assert mount.get("mountPropagation") != "Bidirectional" or privileged, mount["name"]
    assert security["capabilities"]["drop"] == ["ALL"]
    added = security["capabilities"]["add"]
    header = (KUBE / "daemonset.yaml").read_text().split("\napiVersion:")[0]
    for cap in added:
        assert re.search(rf"^#\s+{cap}\s+\S", header, re.M), f"capability {cap} is added without a reason"
    assert "SYS_ADMIN" not in added, "SYS_ADMIN implies BPF and PERFMON: the header says when to add it"
    assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"] is True


def test_every_node_runs_one_with_bounded_resources():
    assert {"operator": "Exists"} in POD["spec"]["tolerations"]  # every taint, on every node
    resources = CONTAINER["resources"]
    for kind in ("requests", "limits"):
        assert set(resources[kind]) == {"cpu", "memory"}, kind
    account = one("ServiceAccount")
    assert POD["spec"]["serviceAccountName"] == account["metadata"]["name"]
    assert account["automountServiceAccountToken"] is False


def test_the_image_is_the_containerfiles_at_this_version():
    (image,) = kustomization()["images"]
    assert image["name"] == CONTAINER["image"] and image["newTag"] == ebpfkit.__version__
    containerfile = (ROOT / "deploy" / "Containerfile").read_text()
    cmd = re.search(r"^CMD (\[.*\])$", containerfile, re.M).group(1)
    entrypoint = re.search(r"^ENTRYPOINT (\[.*\])$", containerfile, re.M).group(1)
    assert yaml.safe_load(entrypoint) == CONTAINER["command"]
    assert yaml.safe_load(cmd) == CONTAINER["args"], "the image's default command is the DaemonSet's"
    assert f"ebpfkit:{ebpfkit.__version__}" in containerfile  # the tag its build comment gives

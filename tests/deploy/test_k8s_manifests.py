"""The Kubernetes manifests in deploy/k8s are valid resources and agree with one another.

Each document is checked against the Kubernetes OpenAPI-derived JSON schemas that the
kubernetes-validate package ships inside its wheel, in strict mode (unknown fields are errors, so a
misspelt key fails here instead of being silently dropped by the API server). The schemas come with
the package from PyPI, so the test needs no network and no cluster. We check the oldest version the
manifests need (1.27: gRPC probes are GA there) and the newest the package knows.

Schemas cannot see cross-references, so the rest of the file checks those: selectors match pod
labels, the StatefulSet's headless Service exists, named ports exist, and the ConfigMap's node list
names exactly the StatefulSet's pods at their stable DNS names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")

K8S_DIR = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
KUBERNETES_VERSION_MIN = "1.27"
KUBERNETES_VERSIONS = [KUBERNETES_VERSION_MIN, kubernetes_validate.latest_version()]
NODE_PORT = 7001

Resource = dict[str, Any]


def load_resources() -> list[tuple[str, Resource]]:
    resources = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            if document is not None:
                resources.append((path.name, document))
    return resources


RESOURCES = load_resources()


def the(kind: str, name: str) -> Resource:
    found = [r for _, r in RESOURCES if r["kind"] == kind and r["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def container(workload: Resource) -> Resource:
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def env_of(workload: Resource) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(workload)["env"]}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(
    ("source", "resource"),
    RESOURCES,
    ids=[f"{source}:{r['kind']}/{r['metadata']['name']}" for source, r in RESOURCES],
)
def test_resource_matches_kubernetes_schema(source: str, resource: Resource, version: str) -> None:
    try:
        kubernetes_validate.validate(resource, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        pytest.fail(f"{source}: {error.message} at {list(error.path)} (Kubernetes {version})")


def test_every_manifest_is_listed_in_the_kustomization() -> None:
    kustomization = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    manifests = {p.name for p in K8S_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests


def test_the_manifests_hold_the_expected_resources() -> None:
    kinds = sorted(f"{r['kind']}/{r['metadata']['name']}" for _, r in RESOURCES)
    assert kinds == [
        "ConfigMap/dynalab-cluster",
        "Deployment/dynalab-gsi-replicator",
        "Deployment/dynalab-router",
        "PodDisruptionBudget/dynalab-storagenode",
        "Service/dynalab-router",
        "Service/dynalab-storagenode",
        "StatefulSet/dynalab-storagenode",
    ]


@pytest.mark.parametrize(
    ("workload_kind", "name"),
    [("StatefulSet", "dynalab-storagenode"), ("Deployment", "dynalab-router")],
)
def test_selectors_match_pod_labels_and_services_reach_named_ports(
    workload_kind: str, name: str
) -> None:
    workload = the(workload_kind, name)
    pod_labels = workload["spec"]["template"]["metadata"]["labels"]
    assert workload["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    service = the("Service", name)
    assert service["spec"]["selector"].items() <= pod_labels.items()
    port_names = {p["name"] for p in container(workload)["ports"]}
    for port in service["spec"]["ports"]:
        assert port["targetPort"] in port_names


def test_storage_nodes_have_stable_identities_and_their_own_volumes() -> None:
    statefulset = the("StatefulSet", "dynalab-storagenode")
    service = the("Service", statefulset["spec"]["serviceName"])
    assert service["spec"]["clusterIP"] == "None", "a StatefulSet needs a headless Service"
    env = env_of(statefulset)
    assert env["DYNALAB_ROLE"] == "storagenode"
    # The node id is node-<ordinal + 1>, from the pod name, which a StatefulSet keeps across
    # restarts and rescheduling (deploy/entrypoint.sh; tests/unit/test_storage_cli.py runs it).
    assert "DYNALAB_NODE_ID" not in env
    assert env["DYNALAB_NODE_ID_FROM_ORDINAL"] == "1"
    claims = {c["metadata"]["name"] for c in statefulset["spec"]["volumeClaimTemplates"]}
    mounts = {m["name"]: m["mountPath"] for m in container(statefulset)["volumeMounts"]}
    assert mounts["data"] == env["DYNALAB_DATA_DIR"] == "/data"
    assert "data" in claims


def test_node_list_names_every_storage_pod_at_its_stable_dns_name() -> None:
    statefulset = the("StatefulSet", "dynalab-storagenode")
    name, service = statefulset["metadata"]["name"], statefulset["spec"]["serviceName"]
    node_list = the("ConfigMap", "dynalab-cluster")["data"]["DYNALAB_NODES"]
    expected = [
        f"node-{ordinal + 1}={name}-{ordinal}.{service}:{NODE_PORT}"
        for ordinal in range(statefulset["spec"]["replicas"])
    ]
    assert node_list.split(",") == expected


def test_storage_nodes_are_each_others_peers_and_routers_replicate_across_them() -> None:
    statefulset = the("StatefulSet", "dynalab-storagenode")
    data = the("ConfigMap", "dynalab-cluster")["data"]
    # Every node takes the whole list as its Raft peers (leaving its own entry out).
    assert env_of(statefulset)["DYNALAB_PEERS"] == {
        "configMapKeyRef": {"name": "dynalab-cluster", "key": "DYNALAB_NODES"}
    }
    assert env_of(the("Deployment", "dynalab-router"))["DYNALAB_REPLICATION_FACTOR"] == {
        "configMapKeyRef": {"name": "dynalab-cluster", "key": "DYNALAB_REPLICATION_FACTOR"}
    }
    assert int(data["DYNALAB_REPLICATION_FACTOR"]) == statefulset["spec"]["replicas"] == 3


@pytest.mark.parametrize(
    ("name", "role"), [("dynalab-router", "router"), ("dynalab-gsi-replicator", "gsi_replicator")]
)
def test_routers_and_the_replicator_read_the_node_list_from_the_configmap(
    name: str, role: str
) -> None:
    workload = the("Deployment", name)
    env = env_of(workload)
    assert env["DYNALAB_ROLE"] == role
    assert env["DYNALAB_NODES"] == {
        "configMapKeyRef": {"name": "dynalab-cluster", "key": "DYNALAB_NODES"}
    }


def test_routers_keep_their_catalog_copy_in_a_writable_state_directory() -> None:
    router = the("Deployment", "dynalab-router")
    env = env_of(router)
    mounts = {m["name"]: m["mountPath"] for m in container(router)["volumeMounts"]}
    volumes = {v["name"]: v for v in router["spec"]["template"]["spec"]["volumes"]}
    # The root filesystem is read-only: the state directory must be a volume of its own.
    assert mounts["state"] == env["DYNALAB_ROUTER_STATE_DIR"] == "/state"
    assert volumes["state"] == {"name": "state", "emptyDir": {}}


def test_the_replicator_probes_its_health_port() -> None:
    replicator = container(the("Deployment", "dynalab-gsi-replicator"))
    port_names = {p["name"] for p in replicator["ports"]}
    for probe in ("readinessProbe", "livenessProbe"):
        assert replicator[probe]["httpGet"]["port"] in port_names


@pytest.mark.parametrize(
    "name", ["dynalab-storagenode", "dynalab-router", "dynalab-gsi-replicator"]
)
def test_pods_run_as_the_image_non_root_user(name: str) -> None:
    workload = the("StatefulSet" if name.endswith("storagenode") else "Deployment", name)
    pod_security = workload["spec"]["template"]["spec"]["securityContext"]
    assert pod_security["runAsNonRoot"] is True
    assert pod_security["runAsUser"] == 10001  # the uid that deploy/Dockerfile creates
    assert container(workload)["securityContext"]["allowPrivilegeEscalation"] is False

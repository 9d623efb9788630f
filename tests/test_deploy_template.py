"""Deployment files: template.yaml lints clean and keeps its promises; the Dockerfile is production-shaped.

cfn-lint runs offline through its Python API (errors *and* warnings count). The template is then read
with PyYAML, tolerating CloudFormation's short tags (`!Ref`, `!Sub`, `!GetAtt`, ...), to check what
the server relies on: exactly one task at a time, a private TLS-only bucket, WebSockets that outlive
the 30 s pings, the command and settings the container runs with, least-privilege IAM.
"""

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.infra

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template.yaml"


class CfnLoader(yaml.SafeLoader):
    """A SafeLoader that reads `!Tag value` as the long form `{"Fn::Tag": value}` (`!Ref` as `{"Ref": ...}`)."""


def _construct_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        assert isinstance(node, yaml.MappingNode)
        value = loader.construct_mapping(node, deep=True)
    return {"Ref" if suffix == "Ref" else f"Fn::{suffix}": value}


CfnLoader.add_multi_constructor("!", _construct_tag)


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.load(TEMPLATE.read_text(encoding="utf-8"), Loader=CfnLoader)  # a SafeLoader subclass
    return loaded


def resources_of(template: dict[str, Any], type_: str) -> list[dict[str, Any]]:
    return [r for r in template["Resources"].values() if r["Type"] == type_]


def one(template: dict[str, Any], type_: str) -> dict[str, Any]:
    found = resources_of(template, type_)
    assert len(found) == 1, f"expected exactly one {type_}, found {len(found)}"
    return found[0]


def container(template: dict[str, Any]) -> dict[str, Any]:
    definitions = one(template, "AWS::ECS::TaskDefinition")["Properties"]["ContainerDefinitions"]
    assert len(definitions) == 1
    found: dict[str, Any] = definitions[0]
    return found


def resolved(value: Any, *, several: bool) -> Any:
    """`value` as deployed with `Processes` above 1 (`several`) or not: each `Fn::If` of a condition taken,
    `AWS::NoValue` left out (other conditions are taken as false)."""
    if isinstance(value, dict):
        if set(value) == {"Fn::If"}:
            condition, then, otherwise = value["Fn::If"]
            return resolved(then if condition == "Several" and several else otherwise, several=several)
        return {key: resolved(item, several=several) for key, item in value.items()}
    if isinstance(value, list):
        items = [resolved(item, several=several) for item in value]
        return [item for item in items if item != {"Ref": "AWS::NoValue"}]
    return value


def test_cfn_lint_reports_nothing() -> None:
    from cfnlint.api import ManualArgs, lint_file

    matches = lint_file(TEMPLATE, config=ManualArgs(regions=["us-east-1"]))
    assert [str(match) for match in matches] == []


def test_by_default_exactly_one_task_and_never_two(template: dict[str, Any]) -> None:
    processes = template["Parameters"]["Processes"]
    assert (processes["Default"], processes["AllowedValues"]) == (1, [1, 2, 3])
    service = resolved(one(template, "AWS::ECS::Service")["Properties"], several=False)
    assert service["DesiredCount"] == {"Ref": "Processes"}
    assert service["LaunchType"] == "FARGATE"
    deployment = service["DeploymentConfiguration"]
    assert deployment["MaximumPercent"] == 100  # the old task stops before the new one starts
    assert deployment["MinimumHealthyPercent"] == 0
    assert [lb["ContainerPort"] for lb in service["LoadBalancers"]] == [8620]
    env = {item["Name"] for item in resolved(container(template), several=False)["Environment"]}
    assert not env & {"PHEBY_DATABASE_URL", "PHEBY_REDIS_URL"}  # SQLite in the data dir: one writer


def test_several_tasks_share_postgresql_and_redis_and_are_replaced_one_at_a_time(template: dict[str, Any]) -> None:
    deployment = resolved(one(template, "AWS::ECS::Service")["Properties"], several=True)["DeploymentConfiguration"]
    assert (deployment["MaximumPercent"], deployment["MinimumHealthyPercent"]) == (150, 50)
    spec = resolved(container(template), several=True)
    env = {item["Name"]: item["Value"] for item in spec["Environment"]}
    assert "${Database.Endpoint.Address}" in env["PHEBY_DATABASE_URL"]["Fn::Sub"]
    assert env["PHEBY_REDIS_URL"]["Fn::Sub"].startswith("redis://${Cache.RedisEndpoint.Address}")
    secrets = {item["Name"]: item["ValueFrom"] for item in spec["Secrets"]}
    assert secrets["PGPASSWORD"] == {"Fn::Sub": "${Database.MasterUserSecret.SecretArn}:password::"}
    resources = template["Resources"]
    for name in ("Database", "Cache", "SharedSecurityGroup", "DatabaseSubnetGroup", "CacheSubnetGroup"):
        assert resources[name]["Condition"] == "Several", name
    database = resources["Database"]
    props = database["Properties"]
    assert (props["Engine"], props["StorageEncrypted"], props["PubliclyAccessible"]) == ("postgres", True, False)
    assert props["ManageMasterUserPassword"] is True  # no password in the template or its parameters
    assert database["DeletionPolicy"] == database["UpdateReplacePolicy"] == "Snapshot"
    ingress = resources["SharedSecurityGroup"]["Properties"]["SecurityGroupIngress"]
    assert {(rule["FromPort"], rule["SourceSecurityGroupId"]["Ref"]) for rule in ingress} == {
        (5432, "ServiceSecurityGroup"),
        (6379, "ServiceSecurityGroup"),
    }


def test_container_runs_pheby_serve_with_its_settings(template: dict[str, Any]) -> None:
    spec = resolved(container(template), several=False)
    assert spec["Command"] == ["pheby", "serve", "--host", "0.0.0.0", "--port", "8620", "--data-dir", "/data"]
    env = {item["Name"]: item["Value"] for item in spec["Environment"] if "Name" in item}
    assert env["PHEBY_STORAGE"] == "s3"
    assert env["PHEBY_DATA_DIR"] == "/data"
    assert env["PHEBY_S3_BUCKET"] == {"Ref": "AttachmentBucket"}
    assert env["PHEBY_ATTACHMENT_RETENTION_DAYS"] == {"Ref": "AttachmentRetentionDays"}
    assert env["HERMES_URL"] == {"Ref": "HermesUrl"}
    secrets = {item["Name"]: item["ValueFrom"] for item in spec["Secrets"]}
    assert secrets == {"PHEBY_SECRET": {"Ref": "PhebySecretArn"}, "HERMES_API_KEY": {"Ref": "HermesApiKeySecretArn"}}
    for name in ("PhebySecretArn", "HermesApiKeySecretArn"):
        assert template["Parameters"][name]["AllowedPattern"].startswith("^arn:aws")
    assert not set(secrets) & set(env)  # secrets never appear as plain environment values
    assert spec["StopTimeout"] >= 30  # time for runs to be cancelled before SIGKILL


def test_data_dir_is_a_persistent_efs_volume(template: dict[str, Any]) -> None:
    spec = container(template)
    assert [(m["SourceVolume"], m["ContainerPath"]) for m in spec["MountPoints"]] == [("data", "/data")]
    volumes = one(template, "AWS::ECS::TaskDefinition")["Properties"]["Volumes"]
    efs = volumes[0]["EFSVolumeConfiguration"]
    assert efs["FilesystemId"] == {"Ref": "DataFileSystem"}
    assert efs["TransitEncryption"] == "ENABLED"
    file_system = template["Resources"]["DataFileSystem"]
    assert file_system["Properties"]["Encrypted"] is True
    assert file_system["DeletionPolicy"] == file_system["UpdateReplacePolicy"] == "Retain"
    assert len(resources_of(template, "AWS::EFS::MountTarget")) >= 2
    access_point = one(template, "AWS::EFS::AccessPoint")["Properties"]
    assert access_point["PosixUser"]["Uid"] == "10001"  # the Dockerfile's user


def test_bucket_is_private_encrypted_retained_and_tls_only(template: dict[str, Any]) -> None:
    bucket = template["Resources"]["AttachmentBucket"]
    props = bucket["Properties"]
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert props["OwnershipControls"]["Rules"] == [{"ObjectOwnership": "BucketOwnerEnforced"}]
    assert bucket["DeletionPolicy"] == bucket["UpdateReplacePolicy"] == "Retain"

    statements = one(template, "AWS::S3::BucketPolicy")["Properties"]["PolicyDocument"]["Statement"]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in statements
    )


def test_lifecycle_is_a_backstop_one_day_after_the_retention(template: dict[str, Any]) -> None:
    rules = {
        r["Id"]: r for r in template["Resources"]["AttachmentBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    }
    expiry = rules["expire-attachments-backstop"]
    assert expiry["Prefix"] == "attachments/"
    assert expiry["ExpirationInDays"] == {
        "Fn::FindInMap": ["RetentionBackstop", {"Ref": "AttachmentRetentionDays"}, "Days"]
    }
    assert expiry["Status"] == {"Fn::If": ["KeepAttachmentsForever", "Disabled", "Enabled"]}
    assert rules["abort-incomplete-multipart-uploads"]["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"] >= 1
    # Versioned, so a backup (the database only, with S3) finds the bytes of what was deleted after it.
    props = template["Resources"]["AttachmentBucket"]["Properties"]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    kept = rules["keep-deleted-attachments-for-backups"]
    assert kept["NoncurrentVersionExpiration"] == {"NoncurrentDays": {"Ref": "BackupRetentionDays"}}
    assert kept["ExpiredObjectDeleteMarker"] is True

    retention = template["Parameters"]["AttachmentRetentionDays"]
    assert retention["Type"] == "Number"
    assert retention["MinValue"] == 0
    backstop = template["Mappings"]["RetentionBackstop"]
    for days in range(retention["MinValue"], retention["MaxValue"] + 1):
        assert backstop[str(days)]["Days"] == (days + 1 if days else 1), days  # 0 (forever): rule disabled
    assert len(backstop) == retention["MaxValue"] - retention["MinValue"] + 1


def test_load_balancer_keeps_websockets_and_checks_healthz(template: dict[str, Any]) -> None:
    attributes = {
        a["Key"]: a["Value"]
        for a in one(template, "AWS::ElasticLoadBalancingV2::LoadBalancer")["Properties"]["LoadBalancerAttributes"]
    }
    assert int(attributes["idle_timeout.timeout_seconds"]) >= 120
    target_group = one(template, "AWS::ElasticLoadBalancingV2::TargetGroup")["Properties"]
    assert target_group["HealthCheckPath"] == "/healthz"
    assert target_group["Port"] == 8620
    listeners = [r["Properties"] for r in resources_of(template, "AWS::ElasticLoadBalancingV2::Listener")]
    assert any(listener["Protocol"] == "HTTPS" for listener in listeners)  # wss:// for the app


def test_iam_is_least_privilege(template: dict[str, Any]) -> None:
    roles = template["Resources"]
    task_statements = [s for p in roles["TaskRole"]["Properties"]["Policies"] for s in p["PolicyDocument"]["Statement"]]
    s3 = {tuple(sorted(_as_list(s["Action"]))): s["Resource"] for s in task_statements if "s3:" in str(s["Action"])}
    assert s3 == {
        ("s3:AbortMultipartUpload", "s3:DeleteObject", "s3:GetObject", "s3:PutObject"): {
            "Fn::Sub": "${AttachmentBucket.Arn}/*"
        },
        ("s3:ListBucket",): {"Fn::GetAtt": "AttachmentBucket.Arn"},
    }
    execution_statements = [
        s for p in roles["ExecutionRole"]["Properties"]["Policies"] for s in p["PolicyDocument"]["Statement"]
    ]
    secrets = [{"Ref": "PhebySecretArn"}, {"Ref": "HermesApiKeySecretArn"}]
    assert [resolved(s["Resource"], several=False) for s in execution_statements] == [secrets]
    database_secret = {"Fn::GetAtt": "Database.MasterUserSecret.SecretArn"}
    assert [resolved(s["Resource"], several=True) for s in execution_statements] == [[*secrets, database_secret]]
    for statement in task_statements + execution_statements:
        assert statement["Effect"] == "Allow"
        assert all("*" not in action for action in _as_list(statement["Action"]))
        assert statement["Resource"] != "*"


def _as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value


# --- the image --------------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text(encoding="utf-8"))
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instruction, _, arguments = line.partition(" ")
            pairs.append((instruction.upper(), arguments.strip()))
    return pairs


def test_dockerfile_is_production_shaped() -> None:
    instructions = dockerfile_instructions()
    by_name: dict[str, list[str]] = {}
    for name, arguments in instructions:
        by_name.setdefault(name, []).append(arguments)
    assert re.fullmatch(r"python:3\.11-slim(@sha256:[0-9a-f]+)?", by_name["FROM"][0])
    users = by_name["USER"]
    assert users[-1] not in ("root", "0")
    assert any("pip install ." in run and "[dev]" not in run for run in by_name["RUN"])
    assert "/healthz" in by_name["HEALTHCHECK"][0]
    assert by_name["VOLUME"] == ['["/data"]']
    assert by_name["EXPOSE"] == ["8620"]
    assert by_name["CMD"] == ['["pheby", "serve", "--host", "0.0.0.0", "--port", "8620", "--data-dir", "/data"]']
    assert [name for name, _ in instructions][-1] == "CMD"


def test_dockerignore_keeps_local_state_out() -> None:
    patterns = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv*", ".local", ".pytest_cache", ".mypy_cache", ".ruff_cache"} <= patterns


def test_everything_the_dockerfile_copies_is_in_the_build_context() -> None:
    """A COPY source that .dockerignore leaves out of the context fails the build; and every package the
    wheel installs must be copied in."""
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    copied = [arguments.split()[:-1] for name, arguments in dockerfile_instructions() if name == "COPY"]
    sources = {source for sources in copied for source in sources}
    assert not sources & ignored, sources & ignored
    assert all((ROOT / source).exists() for source in sources), sources
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["hatch"]["build"]["targets"]
    included = wheel["wheel"].get("only-include") or wheel["wheel"].get("packages")
    assert set(included) <= sources, set(included) - sources

"""The ways to run the stack (docker-compose.yml, Dockerfile, Procfile, systemd units) agree
with each other and with what Flower and Celery accept. Without a Docker engine
`docker compose config` cannot run here, so the compose file is checked against the essentials
of the compose spec instead (`make lint` runs `docker compose config -q` where it exists)."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from tests.support.paths import ROOT

TOP_LEVEL = {"services", "volumes", "networks", "configs", "secrets", "name"}
RESTART = {"no", "always", "on-failure", "unless-stopped"}
SERVICE_KEYS = {
    "build", "image", "command", "environment", "env_file", "volumes", "depends_on", "restart",
    "ports", "healthcheck", "deploy",
}  # fmt: skip
#: The secrets docker compose requires (user:password each).
AUTHS = {
    "FLOWER_BASIC_AUTH": "a:b",
    "CRAWLER_DASHBOARD_AUTH": "c:d",
    "AWS_SECRET_ACCESS_KEY": "not-a-real-key",
}
_VAR = re.compile(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}")


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error} (an unset required one raises)."""

    def one(m: re.Match[str]) -> str:
        name, op, arg = m[1], m[2], m[3]
        value = env.get(name, "")
        if op and op.endswith("?") and not value:
            raise KeyError(f"{name}: {arg}")
        return value or (arg if op and op.endswith("-") else "")

    return _VAR.sub(one, text)


def compose(env: dict[str, str]) -> dict:  # type: ignore[type-arg]
    return yaml.safe_load(interpolate((ROOT / "docker-compose.yml").read_text(), env))


def test_compose_file_has_the_essentials_of_the_spec():
    doc = compose(AUTHS)
    assert set(doc) - TOP_LEVEL <= {k for k in doc if k.startswith("x-")}
    volumes = set(doc["volumes"])
    for name, svc in doc["services"].items():
        assert set(svc) <= SERVICE_KEYS, (name, set(svc) - SERVICE_KEYS)
        assert "image" in svc or "build" in svc, name
        assert svc.get("restart") in RESTART - {"no"}, f"{name} is not restarted"
        for dep in svc.get("depends_on", {}):
            assert dep in doc["services"], (name, dep)
        for mount in svc.get("volumes", []):
            source = mount.split(":")[0]
            assert source.startswith((".", "/")) or source in volumes, (name, mount)
        for port in svc.get("ports", []):
            # Published on loopback only: nothing of the stack faces the network by default.
            assert re.fullmatch(r"127\.0\.0\.1:\d+:\d+", port), (name, port)
        command = svc.get("command", "")
        if isinstance(command, str) and " worker " in command:
            assert "--loglevel INFO" in command, name


def test_compose_requires_flower_auth_and_commits_no_secret():
    with pytest.raises(KeyError, match="FLOWER_BASIC_AUTH"):
        compose({"AWS_SECRET_ACCESS_KEY": "k"})
    flower = compose(AUTHS)["services"]["flower"]
    assert flower["environment"]["FLOWER_BASIC_AUTH"] == "a:b"
    assert "basic_auth" not in flower["command"] and "basic-auth" not in flower["command"]
    _flower_options_use_equals(flower["command"])


def test_procfile_flower_and_ports_come_from_the_environment():
    lines = dict(
        line.split(":", 1)
        for line in (ROOT / "Procfile").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert set(lines) == {"redis", "fetch", "parse", "beat", "flower", "dashboard", "render"}
    assert "--address 127.0.0.1 --port ${DASHBOARD_PORT:-8787}" in lines["dashboard"]
    assert "${REDIS_PORT:-6379}" in lines["redis"]
    assert "--port=${FLOWER_PORT:-5555}" in lines["flower"]
    assert "--address=${FLOWER_ADDRESS:-127.0.0.1}" in lines["flower"]
    _flower_options_use_equals(lines["flower"].split("&&")[-1])
    for name in ("fetch", "parse", "beat", "flower", "dashboard"):
        assert "config/respawn.sh" in lines[name], f"{name} stops honcho when it crashes"
    for name in ("fetch", "parse"):
        assert "--loglevel INFO" in lines[name]


def _flower_options_use_equals(command: str) -> None:
    """Flower (tornado options) takes --name=value only: '--port 5555' fails at start."""
    words = shlex.split(command)
    after = words[words.index("flower") + 1 :]
    for word in after:
        assert word.startswith("--") and "=" in word, f"flower option {word!r}"


def test_dockerfile_creates_the_volume_it_writes_and_ships_schedules():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"mkdir -p /data\b", text) and "chown crawler:crawler /data" in text
    assert "CRAWLER_SCHEDULES_FILE=/app/config/schedules.toml" in text
    assert "COPY config ./config" in text and (ROOT / "config" / "schedules.toml").exists()


@pytest.mark.parametrize(
    "unit",
    [
        "crawler-fetch@",
        "crawler-parse",
        "crawler-render",
        "crawler-beat",
        "crawler-flower",
        "crawler-dashboard",
    ],
)
def test_systemd_units_restart_and_match_the_procfile(unit):
    text = (ROOT / "config" / "systemd" / f"{unit}.service").read_text()
    assert "Restart=always" in text and "[Install]" in text
    exec_start = next(x for x in text.splitlines() if x.startswith("ExecStart="))
    if "flower" in unit:
        _flower_options_use_equals(exec_start)
        assert "--address=127.0.0.1" in exec_start
    elif "dashboard" in unit:
        assert "--address 127.0.0.1" in exec_start
    elif "beat" not in unit:
        assert "--loglevel INFO" in exec_start and "KillMode=mixed" in text


def test_env_example_has_no_live_secret():
    text = (ROOT / "config" / "crawler.env.example").read_text()
    live = [
        x
        for x in text.splitlines()
        if x.startswith(("FLOWER_BASIC_AUTH", "CRAWLER_DASH", "AWS_SECRET"))
    ]
    assert not live


def test_compose_requires_dashboard_auth_and_binds_inside_the_container_only():
    from crawler_tasks.surface.cli_common import Fail
    from crawler_tasks.surface.dashboard import check_bind

    with pytest.raises(KeyError, match="CRAWLER_DASHBOARD_AUTH"):
        compose({"FLOWER_BASIC_AUTH": "a:b", "AWS_SECRET_ACCESS_KEY": "k"})
    svc = compose(AUTHS)["services"]["dashboard"]
    assert svc["environment"]["CRAWLER_DASHBOARD_AUTH"] == "c:d"
    assert svc["ports"] == ["127.0.0.1:8787:8787"]
    words = shlex.split(svc["command"])
    assert words[:2] == ["crawler", "dashboard"]
    address = words[words.index("--address") + 1]
    check_bind(address, "c:d")  # what the container runs: accepted with its auth
    with pytest.raises(Fail):
        check_bind(address, "")  # and refused without


def test_compose_has_an_object_store_and_its_key_is_required():
    """s3:// output in the stack: MinIO on loopback, its key from .env (never committed), and
    the workers pointed at it through the AWS SDK's own variables."""
    with pytest.raises(KeyError, match="AWS_SECRET_ACCESS_KEY"):
        compose({"FLOWER_BASIC_AUTH": "a:b", "CRAWLER_DASHBOARD_AUTH": "c:d"})
    doc = compose(AUTHS)
    minio = doc["services"]["minio"]
    assert minio["environment"]["MINIO_ROOT_PASSWORD"] == AUTHS["AWS_SECRET_ACCESS_KEY"]
    for name in ("fetch", "parse", "beat", "flower", "dashboard"):
        env = doc["services"][name]["environment"]
        assert env["AWS_ENDPOINT_URL"] == "http://minio:9000", name
        assert env["AWS_SECRET_ACCESS_KEY"] == AUTHS["AWS_SECRET_ACCESS_KEY"], name
        assert env["CRAWLER_OUTPUT_DIR"] == "/data", name

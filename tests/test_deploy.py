"""The deploy files, checked without a container engine: parsed, cross-checked, and run where a tool exists here.

Docker has no engine on the test machines, so the Dockerfile and the compose files are read as text/YAML and
their promises checked one by one (dependency layer before the code, numeric UID, an init, a HEALTHCHECK whose
command really fails on an unhealthy `/healthz`). The systemd unit goes through `systemd-analyze` when it is
installed. Every stop timeout is compared with the daemon's worst-case graceful stop, summed from the very
constants the shutdown path waits on, so raising one of them without the deploy files fails here.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp import web

from bot import app as core_app
from bot.__main__ import build_parser
from bot.agent import engine
from bot.calls import registry
from bot.cluster import link
from bot.cluster.jobs import ThreadJobs
from bot.cluster.node import ClusterSettings
from bot.config import Settings
from bot.schedule import scheduler
from bot.slack import daemon
from bot.store import postgres
from bot.telemetry import tracing
from bot.telemetry.metrics import Metrics

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
README = DEPLOY.parent / "README.md"
STOP_FLUSH_S = Settings.model_fields["bot_stop_flush_s"].default  # the queued posts, the outbox, the final edits
AIOHTTP_WS_CLOSE_S = 10.0  # aiohttp's default for a websocket's close handshake (ClientWSTimeout.ws_close)


def worst_case_stop_s() -> float:
    """Every bounded wait of a graceful stop, in the order `serve()` unwinds its exit stack (they run one after
    another): the socket's close handshake, the two aiohttp listeners, the handlers in flight, the scheduler's
    jobs, the turns (grace, grace after cancel, then the cancel wait), the calls (grace, then the cancel wait),
    the queued posts, the outbox (half the drain), the final edits and their journal, the spans not yet sent."""
    return (
        AIOHTTP_WS_CLOSE_S
        + 2 * daemon.LISTENER_SHUTDOWN_S
        + daemon.INGRESS_GRACE_S
        + scheduler.STOP_GRACE_S
        + 2 * core_app.SHUTDOWN_GRACE_S
        + engine.CANCEL_WAIT_S
        + core_app.SHUTDOWN_GRACE_S
        + registry.CANCEL_WAIT_S
        + STOP_FLUSH_S
        + STOP_FLUSH_S / 2
        + 2 * STOP_FLUSH_S
        + tracing.FLUSH_S
    )


# --- Dockerfile -----------------------------------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text())
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instruction, _, rest = line.partition(" ")
            pairs.append((instruction.upper(), rest.strip()))
    return pairs


def env_of(pairs: list[tuple[str, str]]) -> dict[str, str]:
    return {
        key: value
        for instruction, args in pairs
        if instruction == "ENV"
        for key, value in re.findall(r"(\w+)=(\S+)", args)
    }


def test_dependencies_are_installed_in_a_layer_before_the_code() -> None:
    pairs = dockerfile()
    steps = [f"{instruction} {args}" for instruction, args in pairs]
    copy_pyproject = next(i for i, step in enumerate(steps) if step.startswith("COPY pyproject.toml"))
    install_deps = next(i for i, step in enumerate(steps) if step.startswith("RUN") and "dependencies" in step)
    copy_code = next(i for i, step in enumerate(steps) if re.match(r"COPY (bot|tools)\b", step))
    assert copy_pyproject < install_deps < copy_code
    assert pairs[copy_pyproject][1].split()[:-1] == ["pyproject.toml"], "only pyproject.toml may feed that layer"
    later_installs = [step for step in steps[copy_code:] if "pip install" in step]
    assert later_installs and all("--no-deps" in step for step in later_installs)


@pytest.mark.parametrize("extras", ["", "postgres"])
def test_the_dependency_layer_installs_exactly_pyprojects_dependencies(tmp_path: Path, extras: str) -> None:
    """Run the layer's own command in a copy of the project, with `pip` swapped for a recorder."""
    [command] = [args for instruction, args in dockerfile() if instruction == "RUN" and "dependencies" in args]
    script = re.fullmatch(r'python -c "(.*)"', command)
    assert script is not None, command
    shutil.copy(DEPLOY.parent / "pyproject.toml", tmp_path)
    recorder = (
        "import subprocess, sys\n"
        "subprocess.check_call = lambda argv: print(repr(argv[4:]))\n"
        f"exec({script.group(1)!r})\n"
    )
    env = os.environ | {"EXTRAS": extras}
    out = subprocess.run(
        [sys.executable, "-c", recorder], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    )
    project = tomllib.loads((DEPLOY.parent / "pyproject.toml").read_text())["project"]
    expected = project["dependencies"] + (project["optional-dependencies"][extras] if extras else [])
    assert out.stdout.strip() == repr(["--no-cache-dir", *expected])


def test_runs_as_a_fixed_numeric_uid_under_an_init() -> None:
    pairs = dockerfile()
    [user] = [args for instruction, args in pairs if instruction == "USER"]
    assert re.fullmatch(r"\d+(:\d+)?", user), f"USER {user} is not numeric"
    assert user.split(":")[0] != "0"
    assert re.search(rf"--uid {user.split(':')[0]}\b", " ".join(args for i, args in pairs if i == "RUN"))
    [entrypoint] = [args for instruction, args in pairs if instruction == "ENTRYPOINT"]
    assert entrypoint.startswith('["/usr/bin/tini", "--"'), "an init must be PID 1 to reap run_command orphans"
    assert any("install" in args and "tini" in args for instruction, args in pairs if instruction == "RUN")


def test_the_image_has_bwrap_for_the_shell_sandbox() -> None:
    assert any("install" in args and "bubblewrap" in args for instruction, args in dockerfile() if instruction == "RUN")


def _healthcheck_command() -> str:
    [healthcheck] = [args for instruction, args in dockerfile() if instruction == "HEALTHCHECK"]
    _, _, command = healthcheck.partition(" CMD ")
    assert command, healthcheck
    return command


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _run_healthcheck(port: int) -> int:
    """The HEALTHCHECK command as Docker runs it (`/bin/sh -c`), with the image's environment."""
    env = {**os.environ, "BOT_METRICS_PORT": str(port), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    process = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", _healthcheck_command(), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return await asyncio.wait_for(process.wait(), 30)


async def test_healthcheck_probes_healthz_on_the_metrics_port_of_the_image() -> None:
    env = env_of(dockerfile())
    assert env["BOT_DATA_DIR"] == "/data"
    port = int(env["BOT_METRICS_PORT"])
    assert "/healthz" in _healthcheck_command()
    assert str(port) in next(args for instruction, args in dockerfile() if instruction == "EXPOSE").split()
    healthy = True
    runner = web.AppRunner(Metrics().web_app(lambda: (healthy, {})))
    await runner.setup()
    free = _free_port()
    await web.TCPSite(runner, "127.0.0.1", free).start()
    try:
        assert await _run_healthcheck(free) == 0
        healthy = False
        assert await _run_healthcheck(free) != 0
    finally:
        await runner.cleanup()
    assert await _run_healthcheck(free) != 0, "nothing listening must count as unhealthy"


# --- compose ----------------------------------------------------------------------------------------------------


def _compose(name: str) -> dict[str, Any]:
    yaml = pytest.importorskip("yaml", reason="PyYAML (in the test extra) parses the compose files")
    loaded = yaml.safe_load((DEPLOY / name).read_text())
    assert isinstance(loaded, dict)
    return loaded


def _seconds(duration: str) -> float:
    match = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", duration)
    assert match and duration, f"unreadable duration {duration!r}"
    return int(match.group(1) or 0) * 60 + int(match.group(2) or 0)


def test_compose_publishes_no_slack_port_in_socket_mode() -> None:
    service = _compose("compose.yml")["services"]["threadbot"]
    metrics_port = env_of(dockerfile())["BOT_METRICS_PORT"]
    assert service["environment"]["BOT_METRICS_PORT"] == metrics_port
    assert service["ports"] == [f"127.0.0.1:{metrics_port}:{metrics_port}"], "only the metrics port, on loopback"
    assert service["env_file"] == "../.env"
    assert service["volumes"] == ["threadbot-data:/data"]
    assert "init" not in service, "the image's tini is the init; a second one would only warn"


def test_compose_http_variant_publishes_the_events_port() -> None:
    service = _compose("compose.http.yml")["services"]["threadbot"]
    assert service["command"] == ["run", "--port", "3000"]
    assert service["ports"] == ["127.0.0.1:3000:3000"], "the HTTPS proxy on this host reaches it; nothing else"


def test_the_image_listens_for_metrics_inside_the_container_that_compose_publishes_on_loopback() -> None:
    assert Settings.model_fields["bot_metrics_host"].default == "127.0.0.1", "a bare install keeps /metrics local"
    assert env_of(dockerfile())["BOT_METRICS_HOST"] == "0.0.0.0", "else the published port reaches nothing"
    services = [_compose("compose.yml")["services"]["threadbot"], *(_cluster()[name] for name in REPLICAS)]
    for service in services:
        assert all(port.startswith("127.0.0.1:") for port in service["ports"]), service["ports"]


PASSWORD_FROM_ENV = "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"


def test_cluster_compose_takes_the_database_password_from_the_environment() -> None:
    text = (DEPLOY / "compose.cluster.yml").read_text()
    services = _cluster()
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == PASSWORD_FROM_ENV
    for name in ("migrate", *REPLICAS):
        url = services[name]["environment"]["BOT_DATABASE_URL"]
        assert url == f"postgresql://threadbot:{PASSWORD_FROM_ENV}@postgres:5432/threadbot"
    assert "threadbot@postgres" not in text and "POSTGRES_PASSWORD: threadbot" not in text, "no password in the file"


def test_compose_waits_longer_than_the_worst_case_stop_and_limits_logs() -> None:
    service = _compose("compose.yml")["services"]["threadbot"]
    assert _seconds(service["stop_grace_period"]) > worst_case_stop_s()
    assert service["logging"]["options"]["max-size"]
    assert int(service["logging"]["options"]["max-file"]) >= 1
    assert service["restart"] == "unless-stopped"


# --- compose, several replicas ----------------------------------------------------------------------------------

REPLICAS = ("threadbot-1", "threadbot-2", "threadbot-3")
HARDENING = ("env_file", "restart", "stop_grace_period", "read_only", "cap_drop", "security_opt", "logging")


def _cluster() -> dict[str, Any]:
    services = _compose("compose.cluster.yml")["services"]
    assert isinstance(services, dict)
    return services


def test_cluster_compose_migrates_a_healthy_postgres_before_three_replicas() -> None:
    services = _cluster()
    assert set(services) == {"postgres", "migrate", *REPLICAS}
    database = services["postgres"]
    assert database["image"] == "postgres:15"
    assert "pg_isready" in " ".join(database["healthcheck"]["test"])
    assert [volume.split(":")[1] for volume in database["volumes"]] == ["/var/lib/postgresql/data"]
    assert "ports" not in database, "only the compose network reaches PostgreSQL"
    migrate = services["migrate"]
    assert migrate["command"] == ["migrate"]
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert migrate["restart"] == "no", "a one-shot: restarting it would rerun it forever"
    for name in REPLICAS:
        assert services[name]["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
        assert "command" not in services[name], "the image's CMD is `run`"


def test_cluster_replicas_point_at_the_postgres_service() -> None:
    services = _cluster()
    database = services["postgres"]["environment"]
    for name in ("migrate", *REPLICAS):
        environment = services[name]["environment"]
        assert set(environment) <= {field.upper() for field in Settings.model_fields}, environment
        # The password is compose's `${…}` interpolation, which urlsplit cannot read: put a stand-in for it.
        url = urlsplit(environment["BOT_DATABASE_URL"].replace(PASSWORD_FROM_ENV, "secret"))
        assert (url.scheme, url.hostname, url.port) == ("postgresql", "postgres", 5432)
        assert url.username == database["POSTGRES_USER"]
        assert url.password == "secret" and database["POSTGRES_PASSWORD"] == PASSWORD_FROM_ENV
        assert url.path == f"/{database['POSTGRES_DB']}"


def test_cluster_replicas_are_hardened_like_the_single_daemon() -> None:
    single = _compose("compose.yml")["services"]["threadbot"]
    services = _cluster()
    metrics_port = env_of(dockerfile())["BOT_METRICS_PORT"]
    host_ports = set()
    for name in REPLICAS:
        service = services[name]
        assert {key: service[key] for key in HARDENING} == {key: single[key] for key in HARDENING}, name
        assert _seconds(service["stop_grace_period"]) > worst_case_stop_s()
        assert "/tmp" in service["tmpfs"] and "init" not in service
        assert service["environment"]["BOT_METRICS_PORT"] == metrics_port
        [port] = service["ports"]
        loopback, host_port, container_port = port.split(":")
        assert (loopback, container_port) == ("127.0.0.1", metrics_port), "only the metrics port, on loopback"
        host_ports.add(host_port)
    assert len(host_ports) == len(REPLICAS), "each replica needs its own host port"
    migrate = services["migrate"]
    assert {key: migrate[key] for key in HARDENING if key != "restart"} == {
        key: single[key] for key in HARDENING if key != "restart"
    }


def test_cluster_replicas_share_one_data_dir_for_heartbeat_md() -> None:
    """/data under a read-only root is one volume for all: a heartbeat tick runs on whichever replica claims
    it, and reads HEARTBEAT.md from its BOT_DATA_DIR, so every replica must see the same file."""
    services = _cluster()
    data_dir = env_of(dockerfile())["BOT_DATA_DIR"]
    for name in ("migrate", *REPLICAS):
        service = services[name]
        assert service["environment"]["BOT_DATA_DIR"] == data_dir
        assert service["volumes"] == [f"threadbot-data:{data_dir}"], name
    assert set(_compose("compose.cluster.yml")["volumes"]) == {"postgres-data", "threadbot-data"}


def _cluster_section() -> str:
    match = re.search(r"^## Running several replicas\n(.*?)(?=^## )", README.read_text(), re.MULTILINE | re.DOTALL)
    assert match, "the README has no `## Running several replicas` section"
    return match.group(1)


def _subcommands() -> set[str]:
    [commands] = [action for action in build_parser()._actions if action.choices and action.dest == "command"]
    assert isinstance(commands.choices, dict)
    return set(commands.choices)


def test_readme_documents_the_cluster_compose_file() -> None:
    section = _cluster_section()
    assert "docker compose -f deploy/compose.cluster.yml up -d" in section
    for name in _cluster():
        assert f"`{name}`" in section, name
    for volume in _compose("compose.cluster.yml")["volumes"]:
        assert f"`{volume}`" in section, volume
    for name in REPLICAS:
        port = _cluster()[name]["ports"][0].split(":")[1]
        assert port in section, (name, port)


def test_readme_variables_of_the_cluster_section_exist() -> None:
    named = set(re.findall(r"\b(?:BOT|SLACK|ANTHROPIC)_[A-Z_]+\b", _cluster_section()))
    assert "BOT_DATABASE_URL" in named
    assert named <= {field.upper() for field in Settings.model_fields}, named


def test_readme_commands_of_the_cluster_section_exist() -> None:
    named = set(re.findall(r"\bthreadbot (\w+)", _cluster_section()))
    assert {"migrate", "run"} <= named
    assert named <= _subcommands(), named


def test_readme_figures_of_the_cluster_section_are_the_codes() -> None:
    """Each number the section gives an operator, built from the constant it comes from."""
    section = " ".join(_cluster_section().split())
    defaults = ClusterSettings()
    keepalives = link.KEEPALIVES
    assert postgres.CONNECTION_KWARGS["keepalives_idle"] == keepalives["keepalives_idle"]
    jobs_pool = inspect.signature(ThreadJobs.__init__).parameters["pool_max"].default
    assert jobs_pool == postgres.POOL_MAX_SIZE, "the section says both pools hold the same number"
    phrases = [
        f"lease in the `replicas` table every {defaults.heartbeat_s:g} s",
        f"one silent for {defaults.lease_s:g} s is dead",
        f"every {defaults.backstop_s:g} s a backstop",
        f"up to {defaults.concurrency} turns at once per replica",
        f"two pools of up to {postgres.POOL_MAX_SIZE} connections",
        f"idle {keepalives['keepalives_idle']} s, then {keepalives['keepalives_count']} probes "
        f"{keepalives['keepalives_interval']} s apart",
    ]
    assert [phrase for phrase in phrases if phrase not in section] == []


def test_the_cluster_image_is_built_with_the_postgres_extra() -> None:
    """The default image leaves procrastinate and psycopg out; a replica without them could not start."""
    anchor = _compose("compose.cluster.yml")["x-threadbot"]
    assert anchor["build"]["args"] == {"EXTRAS": "postgres"}
    assert anchor["image"] != "threadbot:latest", "one tag for two images would let either overwrite the other"


def test_readme_quotes_runs_refusal_without_procrastinates_schema() -> None:
    refusal = "has no procrastinate schema (procrastinate_jobs): run `threadbot migrate`"
    assert refusal in Path(postgres.__file__).read_text()
    assert refusal in _cluster_section()


# --- systemd ----------------------------------------------------------------------------------------------------


def unit() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in (DEPLOY / "threadbot.service").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";")):
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_unit_runs_sandboxed_with_its_own_state_directory() -> None:
    settings = unit()
    expected = {
        "DynamicUser": "yes",
        "StateDirectory": "threadbot",
        "Environment": "BOT_DATA_DIR=%S/threadbot",
        "RestartPreventExitStatus": "2",
        "KillMode": "mixed",
        "UMask": "0077",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "EnvironmentFile": "/etc/threadbot.env",
    }
    assert {key: settings.get(key, [""])[-1] for key in expected} == expected
    assert "User" not in settings and "ReadWritePaths" not in settings


def test_unit_waits_longer_than_the_worst_case_stop() -> None:
    [timeout] = unit()["TimeoutStopSec"]
    assert float(timeout) > worst_case_stop_s()


def test_a_config_error_exits_with_the_status_the_unit_does_not_restart(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BOT_", "SLACK_", "ANTHROPIC_"))}
    env.update(PYTHONPATH=str(DEPLOY.parent), BOT_TIMEZONE="Mars/Olympus")
    done = subprocess.run([sys.executable, "-m", "bot", "run"], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert str(done.returncode) in unit()["RestartPreventExitStatus"], done.stderr


SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_systemd = pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed")


@needs_systemd
def test_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    """`verify` insists that ExecStart exists, so a copy points it at an executable that does."""
    assert SYSTEMD_ANALYZE is not None
    text = (DEPLOY / "threadbot.service").read_text()
    copy = tmp_path / "threadbot.service"
    copy.write_text(re.sub(r"(?m)^ExecStart=\S+", f"ExecStart={sys.executable}", text))
    done = subprocess.run([SYSTEMD_ANALYZE, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")


@needs_systemd
def test_unit_scores_well_on_systemd_analyze_security() -> None:
    assert SYSTEMD_ANALYZE is not None
    done = subprocess.run(
        [SYSTEMD_ANALYZE, "security", "--offline=yes", str(DEPLOY / "threadbot.service")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    match = re.search(r"Overall exposure level for threadbot\.service: (\d+\.\d+)", done.stdout)
    assert match, done.stdout + done.stderr
    assert float(match.group(1)) <= 2.0  # it was 8.8 ("EXPOSED") before the hardening

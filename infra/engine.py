"""Finding, or starting, the Docker engine.

CI and new machines start without one, so when nothing answers and we are
root with a dockerd on PATH, we start it ourselves and wait for it.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time

from infra.errors import DockerUnavailable

DOCKERD_LOG = "/var/log/kchaos-dockerd.log"


def engine_answers() -> bool:
    """A Docker engine answers a ping (within 10 s)."""
    # docker is imported here and in docker_client: the SDK takes ~0.2 s to
    # load, and `kchaos --help` imports this module (through harness.run_cluster)
    import docker
    try:
        client = docker.from_env(timeout=10)
        client.ping()
        return True
    except Exception:
        return False


def start_dockerd(wait_s: float = 60.0) -> None:
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise DockerUnavailable("no Docker engine answers and dockerd is not installed "
                                "(apt-get install docker.io, or run the set-up: ./kchaos)")
    if os.geteuid() != 0:
        raise DockerUnavailable("no Docker engine answers and only root can start dockerd")
    with open(DOCKERD_LOG, "ab") as logf:
        subprocess.Popen([dockerd], stdout=logf, stderr=logf, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if engine_answers():
            return
        time.sleep(0.5)
    raise DockerUnavailable(f"started dockerd but it did not answer within {wait_s:.0f}s (see {DOCKERD_LOG})")


def ensure_engine() -> None:
    if engine_answers():
        return
    if os.environ.get("DOCKER_HOST"):
        # A remote or custom engine was asked for: starting a local one would not help.
        raise DockerUnavailable(f"no Docker engine answers at DOCKER_HOST={os.environ['DOCKER_HOST']}")
    start_dockerd()


@functools.lru_cache(maxsize=1)
def docker_client():
    """A docker SDK client to an engine that answers (started if need be)."""
    import docker       # (see engine_answers)
    ensure_engine()
    return docker.from_env(timeout=120)

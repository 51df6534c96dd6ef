"""Node images, built locally: no registry is ever contacted.

Two layers, each tagged by a hash of its inputs and reused when present:
a base root filesystem made by debootstrap from the mirror the host's own apt
sources name (or a user-supplied ``--base-image``), and the node image that
adds the Kafka jars, the log4j2 config and the folders the broker uses.
"""
from __future__ import annotations

import hashlib
import io
import logging
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from infra.distribution import KAFKA_CONFIG, KAFKA_LIB, KafkaDistribution
from infra.engine import docker_client
from infra.errors import ImageBuildError, UsageError

log = logging.getLogger(__name__)

SUITE = "bookworm"
BASE_PACKAGES = (
    "openjdk-17-jre-headless", "iptables", "iproute2", "procps", "libfaketime",
    "openssh-server", "tini", "netcat-openbsd", "ca-certificates-java",
    # The NFQUEUE delayer of nemesis/netem_nfqueue.py (raw netlink, stdlib only)
    # on kernels without sch_netem.
    "python3-minimal",
)
BASE_REPO = "kchaos-base"
NODE_REPO = "kchaos-node"
LABEL = "kchaos"

# The mkdir line spells out broker.config's NODE_DIRS and FAKETIME_FILE: infra
# sits below broker, and any change to this text changes every node image's tag.
NODE_DOCKERFILE = f"""FROM {{base}}
COPY lib/ {KAFKA_LIB}/
COPY config/ {KAFKA_CONFIG}/
RUN mkdir -p /etc/kafka /var/lib/kafka/data /var/log/kafka /etc/kchaos /run/sshd \\
 && echo +0s > /etc/kchaos/faketime
LABEL {LABEL}=1
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["sleep", "infinity"]
"""


def host_debian_mirror(sources_root: Path = Path("/etc/apt")) -> str:
    """The Debian mirror the host's apt already uses, so images come from the
    same place (and the repo never names a registry host)."""
    candidates: list[str] = []
    files = [sources_root / "sources.list", *sorted((sources_root / "sources.list.d").glob("*"))]
    for f in files:
        if not f.is_file():
            continue
        text = f.read_text(errors="replace")
        if f.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(
                    (k.strip().lower(), v.strip())
                    for k, v in (line.split(":", 1) for line in stanza.splitlines()
                                 if ":" in line and not line.lstrip().startswith("#")))
                suites = fields.get("suites", "").split()
                if SUITE in suites and "main" in fields.get("components", "").split():
                    candidates += fields.get("uris", "").split()
        else:
            for line in text.splitlines():
                parts = line.split()
                if len(parts) >= 4 and parts[0] == "deb" and SUITE in parts and "main" in parts:
                    uri = [p for p in parts[1:] if not p.startswith("[")][0]
                    candidates.append(uri)
    for uri in candidates:
        if "security" not in uri:
            return uri.rstrip("/")
    raise ImageBuildError(f"no Debian {SUITE} mirror found in {sources_root}/sources.list*; "
                          "pass --base-image with an image of your own")


def image_id(tag: str) -> str | None:
    """The local engine's id of an image (sha256:...), None when it has none by that tag."""
    import docker.errors     # (see _image_exists)
    try:
        return docker_client().images.get(tag).id
    except docker.errors.ImageNotFound:
        return None


def _image_exists(tag: str) -> bool:
    import docker.errors     # here, not at the top: see infra.engine.engine_answers
    try:
        docker_client().images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def base_image_tag(mirror: str) -> str:
    digest = hashlib.sha256(f"{SUITE}|{mirror}|{','.join(BASE_PACKAGES)}".encode()).hexdigest()[:12]
    return f"{BASE_REPO}:{digest}"


def build_base_image() -> str:
    """debootstrap a minimal Debian with a JRE and our tools, then docker import it."""
    mirror = host_debian_mirror()
    tag = base_image_tag(mirror)
    if _image_exists(tag):
        return tag
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("debootstrap is not installed; run the set-up (./kchaos) or apt-get install debootstrap")
    root = Path(tempfile.mkdtemp(prefix="kchaos-rootfs-"))
    try:
        log.info("debootstrap %s from %s into %s (about a minute)", SUITE, mirror, root)
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, str(root), mirror],
            capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ImageBuildError(f"debootstrap failed: {tail[0]}")
        subprocess.run(["chroot", str(root), "apt-get", "clean"], capture_output=True, check=False)
        shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run(["docker", "import", "--change", f"LABEL {LABEL}=1", "-", tag],
                             stdin=tar.stdout, capture_output=True, text=True)
        tar.wait()
        if imp.returncode != 0:
            raise ImageBuildError(f"docker import failed: {imp.stderr.strip()}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return tag


def node_image_tag(base: str, dist: KafkaDistribution) -> str:
    h = hashlib.sha256(f"{base}|{dist.digest()}|{NODE_DOCKERFILE}".encode()).hexdigest()[:12]
    return f"{NODE_REPO}:{dist.version}-{h}"


def build_node_image(dist: KafkaDistribution, base_image: str | None = None) -> str:
    """The image every node runs: base + Kafka jars. Reused when its inputs match."""
    import docker.errors     # (see _image_exists)
    if base_image is not None and not _image_exists(base_image):
        raise UsageError(f"base image {base_image!r} is not present in the local Docker engine")
    base = base_image or build_base_image()
    tag = node_image_tag(base, dist)
    if _image_exists(tag):
        return tag
    ctx = io.BytesIO()
    with tarfile.open(fileobj=ctx, mode="w") as tar:
        dockerfile = NODE_DOCKERFILE.format(base=base).encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
        tar.add(dist.lib, arcname="lib")
        tar.add(dist.log4j_config.parent, arcname="config")
    ctx.seek(0)
    try:
        docker_client().images.build(fileobj=ctx, custom_context=True, tag=tag, rm=True, pull=False,
                               forcerm=True, labels={LABEL: "1"})
    except docker.errors.BuildError as exc:
        raise ImageBuildError(f"building {tag} failed: {exc.msg}") from exc
    return tag

"""The SSH backend's inventory: which existing hosts run the brokers.

A TOML file::

    accept_new_host_keys = false     # true only for throw-away hosts
    connect_timeout = 10             # seconds, optional
    user = "root"                    # optional defaults for every host:
    key = "~/.ssh/kchaos_ed25519"    #   port, user, key, known_hosts
    known_hosts = "~/.ssh/known_hosts"

    [[hosts]]
    name = "n1"                      # n1..nN; default: by order
    address = "10.0.0.11"            # what SSH, the harness's clients and the peers use
    port = 22
    user = "root"                    # else passwordless sudo is required
    key = "keys/id_ed25519"          # relative paths are relative to this file
    role = "broker"                  # optional: "broker" or "controller" (isolated KRaft)

With no ``role`` on any host every node is combined (broker and controller).
With roles, every host has one; the controllers take the last names (as
controller containers do: n1..nB brokers, then the controllers), 1 to
MAX_CONTROLLERS of them, and at least one host is a broker.

Everything is checked when the file is read, so a mistake costs one line and
exit 64 before any host is touched.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.tomlfile import load_toml
from infra.errors import UsageError
from infra.node import MAX_CONTROLLERS

MAX_NODES = 7
COMBINED, BROKER, CONTROLLER = "combined", "broker", "controller"
ROLES = (BROKER, CONTROLLER)
DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
_HOST_KEYS = {"name", "address", "port", "user", "key", "known_hosts", "role"}
_TOP_KEYS = {"hosts", "accept_new_host_keys", "connect_timeout", "port", "user", "key", "known_hosts"}
_NAME_RE = re.compile(r"n[1-9][0-9]*")


class InventoryError(UsageError):
    """The inventory file is missing, malformed or names something that does not exist."""


@dataclass(frozen=True)
class HostSpec:
    name: str
    address: str
    port: int = 22
    user: str = "root"
    key: Path | None = None          # None: ssh-agent and ~/.ssh/id_* as ssh would
    known_hosts: Path = DEFAULT_KNOWN_HOSTS
    role: str = COMBINED             # COMBINED, BROKER or CONTROLLER

    @property
    def target(self) -> str:
        return f"{self.user}@{self.address}:{self.port}"


@dataclass(frozen=True)
class Inventory:
    hosts: tuple[HostSpec, ...]
    accept_new_host_keys: bool = False
    connect_timeout: float = 10.0
    path: Path | None = None

    def __len__(self) -> int:
        return len(self.hosts)

    @property
    def controllers(self) -> tuple[str, ...]:
        """The names of the controller-only hosts; empty when every node is combined."""
        return tuple(h.name for h in self.hosts if h.role == CONTROLLER)

    def require_controllers(self, count: int) -> None:
        """``count`` controllers asked (0: whatever the roles say) must be the
        inventory's: on SSH hosts the roles say which are controllers."""
        if count and count != len(self.controllers):
            raise InventoryError(f"{count} controllers asked, but the inventory has {len(self.controllers)} "
                                 'controller hosts: on SSH hosts the inventory says which are controllers '
                                 '(role = "controller")')


def _path(value: Any, where: str, base: Path, must_exist: bool) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise InventoryError(f"{where} must be a path string, got {value!r}")
    p = Path(value).expanduser()
    if not p.is_absolute():
        p = base / p
    if must_exist and not p.is_file():
        raise InventoryError(f"{where}: file {p} does not exist")
    return p


def _port(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise InventoryError(f"{where} must be a port number 1-65535, got {value!r}")
    return value


def _user(value: Any, where: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}", value):
        raise InventoryError(f"{where} must be a user name, got {value!r}")
    return value


def from_dict(data: dict[str, Any], source: str = "inventory", base: Path | None = None) -> Inventory:
    base = base or Path.cwd()
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise InventoryError(f"{source}: unknown key {unknown[0]!r}; valid keys: {', '.join(sorted(_TOP_KEYS))}")
    accept = data.get("accept_new_host_keys", False)
    if not isinstance(accept, bool):
        raise InventoryError(f"{source}: accept_new_host_keys must be true or false, got {accept!r}")
    timeout = data.get("connect_timeout", 10.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise InventoryError(f"{source}: connect_timeout must be a positive number of seconds, got {timeout!r}")
    hosts = data.get("hosts")
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, dict) for h in hosts):
        raise InventoryError(f"{source}: needs at least one [[hosts]] entry with an address")
    if len(hosts) > MAX_NODES:
        raise InventoryError(f"{source}: {len(hosts)} hosts; a cluster has 1 to {MAX_NODES}")
    defaults = {
        "port": _port(data["port"], f"{source}: port") if "port" in data else 22,
        "user": _user(data["user"], f"{source}: user") if "user" in data else "root",
        "key": _path(data["key"], f"{source}: key", base, True) if "key" in data else None,
        "known_hosts": (_path(data["known_hosts"], f"{source}: known_hosts", base, False)
                        if "known_hosts" in data else DEFAULT_KNOWN_HOSTS.expanduser()),
    }
    specs: list[HostSpec] = []
    for i, h in enumerate(hosts, start=1):
        where = f"{source}: hosts[{i}]"
        bad = sorted(set(h) - _HOST_KEYS)
        if bad:
            raise InventoryError(f"{where}: unknown key {bad[0]!r}; valid keys: {', '.join(sorted(_HOST_KEYS))}")
        name = h.get("name", f"n{i}")
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            raise InventoryError(f"{where}: name must be n1..n{len(hosts)} (it is the broker id), got {name!r}")
        address = h.get("address")
        if not isinstance(address, str) or not address.strip() or any(c.isspace() for c in address):
            raise InventoryError(f"{where}: address must be a host name or IP address, got {address!r}")
        role = h.get("role", COMBINED)
        if "role" in h and role not in ROLES:
            raise InventoryError(f"{where}: role must be {' or '.join(map(repr, ROLES))}, got {role!r}")
        specs.append(HostSpec(
            name=name, address=address, role=role,
            port=_port(h["port"], f"{where}.port") if "port" in h else defaults["port"],
            user=_user(h["user"], f"{where}.user") if "user" in h else defaults["user"],
            key=_path(h["key"], f"{where}.key", base, True) if "key" in h else defaults["key"],
            known_hosts=(_path(h["known_hosts"], f"{where}.known_hosts", base, False)
                         if "known_hosts" in h else defaults["known_hosts"]),
        ))
    names = [s.name for s in specs]
    if sorted(names, key=lambda n: int(n[1:])) != [f"n{i}" for i in range(1, len(specs) + 1)]:
        raise InventoryError(f"{source}: host names must be n1..n{len(specs)}, each once; got {', '.join(names)}")
    seen: dict[tuple[str, int], str] = {}
    for s in specs:
        if (s.address, s.port) in seen:
            raise InventoryError(f"{source}: {s.name} and {seen[(s.address, s.port)]} are the same host "
                                 f"{s.address}:{s.port}; one broker per host")
        seen[(s.address, s.port)] = s.name
    specs.sort(key=lambda s: int(s.name[1:]))
    _check_roles(specs, source)
    return Inventory(tuple(specs), accept, float(timeout))


def _check_roles(specs: list[HostSpec], source: str) -> None:
    """Every host combined, or every host a broker or a controller with the
    controllers last (the layout controller containers have; docs/design.md,
    "Isolated KRaft")."""
    roles = [s.role for s in specs]
    if COMBINED in roles:
        if len(set(roles)) > 1:
            raise InventoryError(f"{source}: some hosts have a role and {specs[roles.index(COMBINED)].name} has "
                                 "none; give every host role = \"broker\" or \"controller\", or none of them")
        return
    controllers = roles.count(CONTROLLER)
    if not 1 <= controllers <= MAX_CONTROLLERS or controllers == len(roles):
        raise InventoryError(f"{source}: {controllers} controller hosts of {len(roles)}; a cluster with roles "
                             f"needs 1 to {MAX_CONTROLLERS} controllers and at least one broker")
    brokers = len(roles) - controllers
    if roles != [BROKER] * brokers + [CONTROLLER] * controllers:
        raise InventoryError(f"{source}: the controllers must be the last hosts (n{brokers + 1}..n{len(roles)}), "
                             f"after the brokers, as controller containers are; got "
                             + ", ".join(f"{s.name} {s.role}" for s in specs))


def load_inventory(path: str | Path) -> Inventory:
    path = Path(path).expanduser()
    data = load_toml(path, "inventory", InventoryError)
    inv = from_dict(data, str(path), path.resolve().parent)
    return Inventory(inv.hosts, inv.accept_new_host_keys, inv.connect_timeout, path.resolve())

"""
Host data -> `Policy`: the enforcer_* keys of one host, validated against
`schemas/host-data.schema.json` (the one place that names the keys and their defaults).

How values arrive (pyinfra 3.10, read in `pyinfra_cli/cli.py:_set_override_data` and
`pyinfra_cli/util.py:parse_cli_arg`, and tried with `pyinfra @local`): every `--data key=value`
is parsed before it reaches host data. "true"/"false" (any case) become booleans, anything
`int()` takes becomes an int ("2", " 7 ", "1_000"), anything else JSON takes becomes that JSON
value ("0.25", "1e3", "NaN", '["cri"]', "null"), and only the rest stays a string. So
`--data enforcer_grace_runs=2` arrives as the int 2, and `--data enforcer_breaker=off` as the
string "off" (the schema takes "on"/"off" as well as booleans). No numeric string reaches an
integer or number key from the CLI, so none is coerced: a number in quotes came from group or
host data written that way, and is an error. What the CLI does deliver wrongly is the reverse
(`--data enforcer_node_name=123` is the int 123, "NaN" a float), so the error message says how
to quote, and non-finite numbers are rejected.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import numbers
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

import schemas
from enforcer.model import Partition
from enforcer.shell import PATH as SHELL_PATH

SCHEMA: dict[str, Any] = schemas.load("host-data")
HOST_DATA_KEYS: tuple[str, ...] = tuple(SCHEMA["properties"])
DEFAULTS: dict[str, Any] = {
    key: spec["default"] for key, spec in SCHEMA["properties"].items() if "default" in spec
}
PREFIX = "enforcer_"
BREAKER = "enforcer_breaker"  # lifted for one run by hand, `--data enforcer_breaker=off`
KUBELET = "/var/lib/kubelet"
CHECKPOINT = f"{KUBELET}/device-plugins/kubelet_internal_checkpoint"
POD_RESOURCES = "/var/lib/kubelet/pod-resources/kubelet.sock"
# NVIDIA's DRA driver: its checkpoint under the kubelet's plugins (facts.dra), and the roots its
# per-claim CDI specs are in (/etc/cdi by default; /var/run/cdi under its Helm chart).
DRA_CHECKPOINT = "plugins/gpu.nvidia.com/checkpoint.json"  # main.go:45-46 (research §1.1)
# The chart's ComputeDomain plugin's (cmd/compute-domain-kubelet-plugin/main.go:43-44,82-84).
DRA_CD_CHECKPOINT = "plugins/compute-domain.nvidia.com/checkpoint.json"
CDI_ROOTS = ("/etc/cdi", "/var/run/cdi")
# mdevctl's persistent definitions, <parent>/<uuid> below it (mdevctl's persist_base).
MDEVCTL_STORE = "/etc/mdevctl.d"


class PolicyError(ValueError):
    """Host data that does not pass the schema; names the host, the key and what was expected."""

    def __init__(self, host: str, key: str, message: str, where: str = ""):
        self.host, self.key, self.message, self.where = host, key, message, where
        super().__init__(f"host {host}: host data {key}{where}: {message}")


class VmRoot(NamedTuple):
    """A VMM's instance metadata tree: its path under rootfs, its layout, the layout's field
    pointers the host overrides (name -> JSON pointer)."""

    path: str
    layout: str
    fields: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class NodePaths:
    """Every node path a run touches; all but procfs and sysfs already under rootfs."""

    rootfs: str
    procfs: str
    sysfs: str
    state_dir: str
    lock_path: str
    checkpoint: str
    pod_resources: str  # the kubelet's pod-resources API socket
    dev_dir: str
    tools: tuple[tuple[str, str], ...]
    command_timeout: int
    marker_roots: tuple[tuple[str, str], ...] = ()  # (path under rootfs, layout)
    vm_metadata_roots: tuple[VmRoot, ...] = ()
    metrics_dir: str = ""  # the node_exporter textfile's folder; "": the state dir
    kubelet_dir: str = KUBELET  # where DRA drivers register (plugins_registry, plugins)
    cdi_roots: tuple[str, ...] = CDI_ROOTS

    @property
    def machine_id(self) -> str:
        """machine-id(5): which machine the node is (facts.machine_id)."""
        return under(self.rootfs, "/etc/machine-id")

    @property
    def dra_checkpoint(self) -> str:
        return f"{self.kubelet_dir}/{DRA_CHECKPOINT}"

    @property
    def dra_cd_checkpoint(self) -> str:
        return f"{self.kubelet_dir}/{DRA_CD_CHECKPOINT}"

    @classmethod
    def from_rootfs(
        cls,
        rootfs: str = DEFAULTS["enforcer_rootfs"],
        *,
        procfs: str = DEFAULTS["enforcer_procfs"],
        sysfs: str = DEFAULTS["enforcer_sysfs"],
        state_dir: str = DEFAULTS["enforcer_state_dir"],
        lock_path: str = DEFAULTS["enforcer_lock_path"],
        tools: Mapping[str, str] | None = None,
        command_timeout: int = DEFAULTS["enforcer_command_timeout_seconds"],
        marker_roots: tuple[Any, ...] = (),
        vm_metadata_roots: tuple[Any, ...] = (),
        metrics_dir: str | None = None,
    ) -> NodePaths:
        """Node paths as host data gives them: state dir and lock path are prefixed here."""
        return cls(
            rootfs=rootfs,
            procfs=procfs,
            sysfs=sysfs,
            state_dir=under(rootfs, state_dir),
            lock_path=under(rootfs, lock_path),
            checkpoint=under(rootfs, CHECKPOINT),
            kubelet_dir=under(rootfs, KUBELET),
            cdi_roots=tuple(under(rootfs, r) for r in CDI_ROOTS),
            pod_resources=under(rootfs, POD_RESOURCES),
            dev_dir=under(rootfs, "/dev"),
            tools=tuple(sorted((tools or {}).items())),
            command_timeout=command_timeout,
            marker_roots=tuple(
                (under(rootfs, r), "gpustack")
                if isinstance(r, str)
                else (under(rootfs, r["path"]), r["layout"])
                for r in marker_roots
            ),
            metrics_dir=under(rootfs, metrics_dir or state_dir),
            vm_metadata_roots=tuple(
                VmRoot(under(rootfs, r), "hypeman")
                if isinstance(r, str)
                else VmRoot(
                    under(rootfs, r["path"]),
                    r["layout"],
                    tuple(sorted(r.get("fields", {}).items())),
                )
                for r in vm_metadata_roots
            ),
        )

    def under(self, path: str) -> str:
        """A node path below rootfs (marker and VM metadata roots)."""
        return under(self.rootfs, path)

    @property
    def mdevctl_store(self) -> str:
        return under(self.rootfs, MDEVCTL_STORE)

    def tool(self, name: str) -> str:
        """The configured path of a tool, else its bare name, found on the node's PATH."""
        return dict(self.tools).get(name, name)

    @property
    def host_checks(self) -> tuple[tuple[str, str, str], ...]:
        """
        Host data's own paths the node must have before a run reads or writes anything there
        (operations/templates/host-paths.sh.j2): (what is expected, key, path). The state dir,
        lock and metrics dir are made below rootfs; marker and VM metadata roots may be absent
        (their sources say so); a tool named without a path is looked up on the node's PATH.
        """
        dirs = [("enforcer_rootfs", self.rootfs), ("enforcer_procfs", self.procfs)]
        dirs.append(("enforcer_sysfs", self.sysfs))
        tools = [(f"enforcer_tools.{name}", path) for name, path in self.tools if path[:1] == "/"]
        return (
            *((DIRECTORY, key, path) for key, path in dirs),
            *((EXECUTABLE, key, path) for key, path in tools),
        )


DIRECTORY = "an existing directory"  # what host_checks expects of a path, as people read it
EXECUTABLE = "an executable file"


def under(rootfs: str, path: str) -> str:
    """`path` (absolute) below `rootfs`, without doubling the slash when rootfs is "/"."""
    return rootfs.rstrip("/") + path


# A time span of host data (enforcer_schedule_period and the like): a whole number and its unit.
SPAN = re.compile(r"^(0|[1-9][0-9]{0,5})(s|min|h|d)$")
SECONDS = {"s": 1, "min": 60, "h": 3600, "d": 86400}


def seconds(span: str) -> int:
    match = SPAN.fullmatch(span)
    if match is None:
        raise ValueError(f"not a time span: {span!r}")
    return int(match[1]) * SECONDS[match[2]]


@dataclass(frozen=True)
class PinSelector:
    """A pinned selector: a partition matches when its kind and every field given are equal."""

    kind: str
    id: str | None = None
    accelerator: str | None = None
    profile: str | None = None

    def matches(self, partition: Partition) -> bool:
        wanted = (
            (self.kind, partition.kind),
            (self.id, partition.id),
            (self.accelerator, partition.accelerator),
            (self.profile, partition.profile),
        )
        return all(want is None or want == have for want, have in wanted)

    def __str__(self) -> str:
        """As an operator writes it in enforcer_pinned (the fields given), never a repr."""
        given = {"kind": self.kind, "id": self.id}
        given |= {"accelerator": self.accelerator, "profile": self.profile}
        return json.dumps({k: v for k, v in given.items() if v is not None})


@dataclass(frozen=True)
class Policy:
    """One host's policy: the host data (docs/HOST-DATA.md), validated, defaults applied."""

    mode: Literal["converge", "plan"]
    kinds: tuple[str, ...] | None  # None: the kinds detected on the node
    grace_seconds: float
    grace_runs: int
    max_observation_gap_seconds: float
    breaker: bool
    breaker_max_fraction: float
    breaker_min_count: int
    claim_sources: tuple[str, ...]
    required_sources: tuple[str, ...]
    node_name: str
    kubeconfig: str | None
    api_timeout: float  # the kubernetes-api source's time budget (seconds)
    marker_roots: tuple[Any, ...]  # as given: a path or {path, layout}; not under rootfs yet
    vm_metadata_roots: tuple[Any, ...]
    vm_stuck_seconds: float
    stuck_owner_seconds: float
    audit_max_bytes: int
    audit_keep: int
    pinned: tuple[PinSelector, ...]
    paths: NodePaths
    # Static MIG geometry: (GPU UUID, profile, placement start) of each declared GPU instance.
    mig_geometry: tuple[tuple[str, str, int], ...] = ()
    # NVIDIA's DRA driver makes and destroys GPU instances per claim (facts.dra_node); else the
    # instances it may advertise (static MIG) are the node's capacity.
    dra_dynamic_mig: bool = False
    # Rule 6 per accelerator: a run may destroy at most this share of one accelerator's
    # partitions, unless it destroys no more than this many there.
    breaker_accelerator_max_fraction: float = 0.5
    breaker_accelerator_min_count: int = 2
    # Rule 4's memory: a partition kept only by it for this long needs a person.
    advertiser_gone_seconds: float = 3600.0

    def is_pinned(self, partition: Partition) -> bool:
        return any(selector.matches(partition) for selector in self.pinned)


def policy_from_host_data(host_name: str, data: Mapping[str, Any]) -> Policy:
    """
    The policy of `host_name` from its host data: only the keys that were set (a whole
    `host.data.dict()` will do: keys without the enforcer_ prefix are not ours and are ignored).
    Raises `PolicyError` naming the host and the first bad key.
    """
    given = {key: value for key, value in data.items() if key.startswith(PREFIX)}
    _check(host_name, given)
    return _build(host_name, {**DEFAULTS, **given})


def _build(host_name: str, d: Mapping[str, Any]) -> Policy:
    claim_sources = tuple(d["enforcer_claim_sources"])
    required = d.get("enforcer_required_sources")
    kinds = d.get("enforcer_kinds")
    return Policy(
        mode=d["enforcer_mode"],
        kinds=None if kinds is None else tuple(kinds),
        grace_seconds=float(d["enforcer_grace_seconds"]),
        grace_runs=int(d["enforcer_grace_runs"]),
        max_observation_gap_seconds=float(d["enforcer_max_observation_gap_seconds"]),
        breaker=d["enforcer_breaker"] in (True, "on"),
        breaker_max_fraction=float(d["enforcer_breaker_max_fraction"]),
        breaker_min_count=int(d["enforcer_breaker_min_count"]),
        claim_sources=claim_sources,
        required_sources=claim_sources if required is None else tuple(required),
        node_name=d.get("enforcer_node_name") or host_name,
        kubeconfig=d.get("enforcer_kubeconfig"),
        api_timeout=float(d["enforcer_api_timeout_seconds"]),
        marker_roots=tuple(d["enforcer_marker_roots"]),
        vm_metadata_roots=tuple(d["enforcer_vm_metadata_roots"]),
        vm_stuck_seconds=float(d["enforcer_vm_stuck_seconds"]),
        stuck_owner_seconds=float(d["enforcer_stuck_owner_seconds"]),
        audit_max_bytes=int(d["enforcer_audit_max_bytes"]),
        audit_keep=int(d["enforcer_audit_keep"]),
        pinned=tuple(_selector(item) for item in d["enforcer_pinned"]),
        mig_geometry=tuple(
            (gpu, gi["profile"], gi["start"])
            for gpu, declared in sorted(d["enforcer_mig_geometry"].items())
            for gi in declared
        ),
        dra_dynamic_mig=d["enforcer_dra_dynamic_mig"],
        breaker_accelerator_max_fraction=float(d["enforcer_breaker_accelerator_max_fraction"]),
        breaker_accelerator_min_count=int(d["enforcer_breaker_accelerator_min_count"]),
        advertiser_gone_seconds=float(d["enforcer_advertiser_gone_seconds"]),
        paths=NodePaths.from_rootfs(
            d["enforcer_rootfs"],
            procfs=d["enforcer_procfs"],
            sysfs=d["enforcer_sysfs"],
            state_dir=d["enforcer_state_dir"],
            lock_path=d["enforcer_lock_path"],
            tools=d["enforcer_tools"],
            command_timeout=int(d["enforcer_command_timeout_seconds"]),
            marker_roots=tuple(d["enforcer_marker_roots"]),
            vm_metadata_roots=tuple(d["enforcer_vm_metadata_roots"]),
            metrics_dir=d["enforcer_metrics_dir"],
        ),
    )


def _selector(item: Mapping[str, Any]) -> PinSelector:
    # An id may come as an int (YAML, --data); partitions carry it as a string.
    def text(name: str) -> str | None:
        value = item.get(name)
        if isinstance(value, float):  # the schema took it as an integer: 1e2 from --data is 100
            value = int(value)
        return None if value is None else str(value)

    return PinSelector(item["kind"], text("id"), text("accelerator"), text("profile"))


# --- validation -----------------------------------------------------------------------------


def _is_number(_checker: Any, value: Any) -> bool:
    # NaN passes every minimum/maximum (comparisons are false) and --data delivers it: refuse.
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _is_integer(checker: Any, value: Any) -> bool:
    return _is_number(checker, value) and float(value).is_integer()


def _is_array(_checker: Any, value: Any) -> bool:
    return isinstance(value, list | tuple)  # group data written in Python may use tuples


def _pattern(_validator: Any, pattern: str, value: Any, _schema: Any) -> Iterator[ValidationError]:
    # The schema's regex dialect is ECMA-262's, whose `$` ends the text; Python's also matches
    # before a final newline, so "node1\n" passed as a node name and "100\n" as a pin's id.
    if isinstance(value, str) and not _ecma(pattern).search(value):
        yield ValidationError(f"{value!r} does not match {pattern!r}")


@functools.cache
def _ecma(pattern: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"(?<!\\)\$", r"\\Z", pattern))


_Validator = validators.extend(
    Draft202012Validator,
    validators={"pattern": _pattern},
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"number": _is_number, "integer": _is_integer, "array": _is_array}
    ),
)
_VALIDATOR = _Validator(SCHEMA)


def _check(host: str, given: Mapping[str, Any]) -> None:
    for key in given:
        if key not in HOST_DATA_KEYS:
            raise PolicyError(host, key, _unknown_key(key))
    error = next(iter(_VALIDATOR.iter_errors(dict(given))), None)
    if error is not None:
        raise _policy_error(host, _focus(error))
    claim = given.get("enforcer_claim_sources", DEFAULTS["enforcer_claim_sources"])
    for source in given.get("enforcer_required_sources") or ():
        if source not in claim:
            message = f"{source!r} is required but not a claim source (enforcer_claim_sources: "
            raise PolicyError(host, "enforcer_required_sources", f"{message}{list(claim)})")
    for key, where, value in _node_paths(given):
        if problem := _path_problem(value):
            raise PolicyError(host, key, problem, where)


# Node paths go into shell commands (enforcer.shell refuses what its PATH pattern does not take)
# and are joined to rootfs as text (`under`), so `..` in one would escape rootfs: both are
# refused here, before anything runs, naming the key; a path is written normalized.
PATH_MAX = 4096  # Linux: a longer path names no file
_PATH_KEYS = (
    "enforcer_metrics_dir",
    "enforcer_rootfs",
    "enforcer_procfs",
    "enforcer_sysfs",
    "enforcer_state_dir",
    "enforcer_lock_path",
)


def _node_paths(given: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(key, where in it, path) for every node path in schema-valid host data."""
    for key in _PATH_KEYS:
        if given.get(key) is not None:
            yield key, "", given[key]
    for tool, value in (given.get("enforcer_tools") or {}).items():
        yield "enforcer_tools", f".{tool}", value
    for key in ("enforcer_marker_roots", "enforcer_vm_metadata_roots"):
        for i, root in enumerate(given.get(key) or ()):
            if isinstance(root, Mapping):
                yield key, f"[{i}].path", root["path"]
            else:
                yield key, f"[{i}]", root


def _path_problem(value: str) -> str | None:
    if len(value) >= PATH_MAX:
        return f"expected a path shorter than {PATH_MAX} characters, got {len(value)} characters"
    if not SHELL_PATH.fullmatch(value):
        return (
            "expected an absolute path of letters, digits and . _ / + @ : = - (no spaces, "
            f"quotes or shell metacharacters), got {_shown(value)}"
        )
    if ".." in value.split("/"):
        return f"expected a path without '..' (write it normalized), got {_shown(value)}"
    return None


def _unknown_key(key: str) -> str:
    # Compare without the shared prefix, or every key looks close to every other.
    names = [known.removeprefix(PREFIX) for known in HOST_DATA_KEYS]
    close = difflib.get_close_matches(key.removeprefix(PREFIX), names, n=1, cutoff=0.75)
    return "not a known key" + (f" (did you mean {PREFIX}{close[0]}?)" if close else "")


def _focus(error: ValidationError) -> ValidationError:
    """
    For an anyOf over a mapping (a {path, layout} root), the one branch of the value's own type
    says more than "expected A or B"; for a scalar, "A or B" is the clearer message.
    """
    if error.validator != "anyOf" or not isinstance(error.instance, dict | list | tuple):
        return error
    branches: dict[Any, list[ValidationError]] = {}
    for sub in error.context or ():
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    same_type = [
        errors
        for errors in branches.values()
        if not any(e.validator == "type" and not e.relative_path for e in errors)
    ]
    return _focus(same_type[0][0]) if len(same_type) == 1 else error


def _policy_error(host: str, error: ValidationError) -> PolicyError:
    key, *rest = error.absolute_path or ["(host data)"]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in rest)
    return PolicyError(host, str(key), _message(error), where)


def _message(error: ValidationError) -> str:
    value, spec = error.instance, error.validator_value
    if error.validator == "additionalProperties":
        allowed = error.schema.get("properties", {})
        extra = ", ".join(repr(k) for k in value if k not in allowed)
        return f"unknown field {extra}; allowed: {', '.join(allowed)}"
    if error.validator == "required":
        return f"missing field {', '.join(repr(k) for k in spec if k not in value)}"
    if error.validator == "anyOf" and all(set(branch) == {"required"} for branch in spec):
        names = ", ".join(repr(branch["required"][0]) for branch in spec)
        return f"expected at least one of {names}, got {_shown(value)}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"expected a finite number, got {value!r}"
    if error.validator == "uniqueItems":
        return f"expected no repeated items, got {_shown(value)}"
    if error.validator == "minItems":
        return f"expected at least {spec} item(s), got {_shown(value)}"
    return f"expected {expected(error.schema)}, got {_shown(value)}{_cli_hint(error)}"


def expected(spec: Mapping[str, Any]) -> str:
    """What a schema accepts, in words: "an integer >= 1", "one of 'converge', 'plan'"."""
    if "$ref" in spec:
        return expected(SCHEMA["$defs"][spec["$ref"].rsplit("/", 1)[1]])
    if "title" in spec:
        return spec["title"]
    if "enum" in spec:
        return "one of " + ", ".join(map(repr, spec["enum"]))
    if "anyOf" in spec:
        return " or ".join(expected(branch) for branch in spec["anyOf"])
    types = spec.get("type")
    if isinstance(types, list):
        return " or ".join(expected({**spec, "type": t}) for t in types)
    return _WORDS.get(types, lambda s: str(types))(spec)


def _range(noun: str, spec: Mapping[str, Any]) -> str:
    low, high = spec.get("minimum"), spec.get("maximum")
    if low is not None and high is not None:
        return f"{noun} between {low} and {high}"
    if "exclusiveMinimum" in spec:
        return f"{noun} > {spec['exclusiveMinimum']}"
    return f"{noun} >= {low}" if low is not None else noun


def _list_words(spec: Mapping[str, Any]) -> str:
    unique = " without repeats" if spec.get("uniqueItems") else ""
    return f"a list{unique} of {expected(spec.get('items', {}))}"


_WORDS: dict[Any, Any] = {
    "integer": lambda s: _range("an integer", s),
    "number": lambda s: _range("a number", s),
    "boolean": lambda s: "a boolean",
    "null": lambda s: "null",
    "string": lambda s: "a non-empty string" if s.get("minLength") else "a string",
    "array": _list_words,
    "object": lambda s: "a mapping of " + ", ".join(s.get("properties", {})),
}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _cli_hint(error: ValidationError) -> str:
    """pyinfra --data parses values: say how to pass one that it parsed into the wrong type."""
    if len(error.absolute_path) != 1:
        return ""  # nested values come from JSON or Python, typed as written
    key, value, accepts = error.absolute_path[0], error.instance, _types(error.schema)
    if "string" in accepts and not isinstance(value, str):
        return f" (pyinfra --data parsed it; pass a JSON string: {key}='\"{json.dumps(value)}\"')"
    if "array" in accepts and isinstance(value, str):
        return _list_hint(key, value, error.schema.get("examples", ()))
    return ""


def _list_hint(key: str, value: str, examples: Iterable[Any]) -> str:
    """
    A JSON list to pass that passes: of the value given, when it is an item (a source named
    alone), else the key's first example in the schema. A list of the value was suggested even
    where the value is no item (enforcer_pinned=x: '["x"]'), and refused in turn.
    """
    if _passes(key, [value]):
        return f" (with pyinfra --data, pass a JSON list: {key}='{json.dumps([value])}')"
    example = next((e for e in examples if _passes(key, e)), None)
    if example is None:
        return ""
    return f" (with pyinfra --data, pass a JSON list, such as {key}='{json.dumps(example)}')"


def _passes(key: str, value: Any) -> bool:
    return not any(_VALIDATOR.iter_errors({key: value}))


def _types(spec: Mapping[str, Any]) -> set[str]:
    """The JSON types a schema can accept."""
    if "$ref" in spec:
        return _types(SCHEMA["$defs"][spec["$ref"].rsplit("/", 1)[1]])
    if "anyOf" in spec:
        return set().union(*(_types(branch) for branch in spec["anyOf"]))
    if "enum" in spec:
        return {"enum"}  # a string enum needs no quoting hint: its words are not numbers
    types = spec.get("type", [])
    return {types} if isinstance(types, str) else set(types)

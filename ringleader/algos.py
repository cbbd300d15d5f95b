"""The implementations a collective can run with (the `algo` field), and group flavors.

"" is the backend's own implementation (nccl or gloo). "nccl:ALGO[/PROTO]" pins NCCL's
algorithm and protocol through NCCL_ALGO/NCCL_PROTO, which NCCL reads when it creates a
communicator, so such a job runs on a process group of its own *flavor* (the communicator
settings it was created with). "symm:one_shot" and "symm:two_shot" are torch's symmetric-memory
all_reduce kernels (CUDA only, NVLink peers, multicast kept off).
"""

from __future__ import annotations

from ringleader.errors import InvalidSpec

BACKENDS = ("nccl", "gloo")
# Tree is NCCL's all_reduce-only algorithm; NVLS and CollNet are left out (NVLink multicast
# stays off on shared machines, and CollNet needs a network plugin).
NCCL_ALGOS = {"ring": "Ring", "tree": "Tree"}
NCCL_PROTOS = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}
SYMM_ALGOS = ("symm:one_shot", "symm:two_shot")
SYMM_DTYPES = ("float32", "bfloat16")  # what torch's symmetric-memory kernels reduce
SYMM_MAX_BYTES = 256 << 20  # one buffer of the largest size is mapped by every peer
_FLAVOR_VARS = {"NCCL_ALGO": set(NCCL_ALGOS.values()), "NCCL_PROTO": set(NCCL_PROTOS.values())}


def parse_algo(text: str, field: str = "algo") -> str:
    """The canonical form of an `algo` value ("NCCL:Ring/LL" -> "nccl:ring/ll"), or InvalidSpec."""
    algo = text.strip().lower()
    if algo in ("", *BACKENDS, *SYMM_ALGOS):
        return algo
    if algo.startswith("nccl:"):
        name, _, proto = algo[5:].partition("/")
        if name in NCCL_ALGOS and (not proto or proto in NCCL_PROTOS):
            return f"nccl:{name}/{proto}" if proto else f"nccl:{name}"
    shown = text[:64]
    raise InvalidSpec(field, f"unknown algo {shown!r}; expected nccl, gloo, nccl:ALGO[/PROTO] with ALGO "
                             f"{'|'.join(NCCL_ALGOS)} and PROTO {'|'.join(NCCL_PROTOS)}, or {', '.join(SYMM_ALGOS)}")


def algo_backend(algo: str) -> str:
    """The backend an algo needs ("" for the default, which every backend has)."""
    if algo.startswith(("nccl", "symm:")):
        return "nccl"
    return algo  # "" or "gloo"


def check_algo(algo: str, *, op: str, dtype: str, reduce_op: str, field: str = "algo") -> None:
    """Refuse an algo that cannot run this op, dtype or reduce op (whatever the backend)."""
    if algo in SYMM_ALGOS:
        if op != "all_reduce":
            raise InvalidSpec(field, f"{algo} implements all_reduce only, not {op}")
        if dtype not in SYMM_DTYPES:
            raise InvalidSpec(field, f"{algo} reduces {' and '.join(SYMM_DTYPES)} only, not {dtype}")
        if reduce_op != "sum":
            raise InvalidSpec(field, f"{algo} sums only, not {reduce_op}")
    elif algo.startswith("nccl:tree") and op != "all_reduce":
        raise InvalidSpec(field, f"NCCL's tree algorithm implements all_reduce only, not {op}")


def resolved_algo(algo: str, backend: str) -> str:
    """What ran: the algo, or the backend's name for the default."""
    return algo or backend


def default_algos(backend: str) -> list[str]:
    """Every all_reduce implementation an algo sweep measures on `backend`, default first."""
    if backend != "nccl":
        return [backend]
    pinned = [f"nccl:{a}/{p}" for a in NCCL_ALGOS for p in NCCL_PROTOS]
    return ["nccl", *pinned, *SYMM_ALGOS]


def flavor(algo: str) -> str:
    """The communicator settings an algo needs, as a group's flavor ("" for NCCL's defaults):
    "nccl:ring/ll" -> "NCCL_ALGO=Ring,NCCL_PROTO=LL"."""
    if not algo.startswith("nccl:"):
        return ""
    name, _, proto = algo[5:].partition("/")
    parts = [f"NCCL_ALGO={NCCL_ALGOS[name]}"]
    if proto:
        parts.append(f"NCCL_PROTO={NCCL_PROTOS[proto]}")
    return ",".join(parts)


def flavor_env(flavor_text: str) -> dict[str, str]:
    """The environment variables a flavor sets. Only NCCL_ALGO and NCCL_PROTO with values of
    this vocabulary pass: a flavor comes over the wire and becomes a process's environment."""
    env: dict[str, str] = {}
    for part in filter(None, flavor_text.split(",")):
        name, _, value = part.partition("=")
        if value not in _FLAVOR_VARS.get(name, ()) or name in env:
            raise InvalidSpec("flavor", f"not a communicator flavor: {flavor_text[:64]!r}")
        env[name] = value
    return env

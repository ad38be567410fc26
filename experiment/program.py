"""Real programs as workloads: `workload: {command: [ARGV...]}` (engine-neutral, no root).

A job whose workload is a command runs that program on every host of the job, the way
torchrun would start one process per GPU: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...
The program is started without a shell, so each word of the command is one argv entry;
every word is checked here. What dtnet measures of the program besides the network comes
from marker lines it prints (see MARKER and dtnet/program.py): one JSON object per line.
Formats and meaning: docs/real-programs.md.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
from dataclasses import dataclass

from badinput import InputError

PYTHON_NAMES = ("python", "python3")  # the interpreter dtnet runs under (where torch is installed)
MAX_WORDS = 256
MAX_WORD_CHARS = 4096
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")  # \Z: "$" lets a trailing newline in
# Set by dtnet for every rank; a workload may not override them.
RESERVED_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                "ROLE_RANK", "ROLE_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME",
                "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "PYTHONUNBUFFERED")
RESERVED_PREFIX = "DTNET_"
DEFAULT_MASTER_PORT = 29500
PROGRAMS_DIR = "programs"
TORCH_HINT = ("PyTorch for this torch program (it imports torch): .venv/bin/pip install torch==2.13.0 "
              "(exactly that version: the CPU build on this machine's disk; `make torch` does it)")
MARKER = "dtnet"  # the key every marker line's JSON object carries
MARKER_KINDS = ("iteration", "collective")


@dataclass(frozen=True)
class ProgramSpec:
    argv: tuple            # argv[0] "python" stays symbolic: the engine puts its interpreter there
    env: tuple = ()        # ((name, value), ...) besides what dtnet sets
    profile: bool = False  # DTNET_PROFILE_DIR set: the program may write its profiler traces there
    master_port: int = DEFAULT_MASTER_PORT
    imports_torch: bool = False  # what dtnet could read of the program says it imports torch


def is_program(workload) -> bool:
    return isinstance(workload, dict) and "command" in workload


def parse_program(workload: dict, key: str, file: str | None) -> tuple[dict, ProgramSpec]:
    """Checks a command workload; returns (the workload with paths made absolute, its spec).

    Relative paths are relative to the experiment file, as trace paths are: argv[0] when it
    has a '/', and a Python program's script. Everything else is passed to the program as
    written. Raises InputError naming key (jobs[i].workload) for anything wrong."""
    allowed = ("command", "env", "profile", "master_port")
    for k in workload:
        if k not in allowed:
            raise InputError(f"{key}.{k}", "no such key in a command workload (allowed: " + ", ".join(allowed) + ")",
                             k, file)
    argv = workload["command"]
    if not isinstance(argv, list) or not argv:
        raise InputError(f"{key}.command", "a non-empty list of words: [program, arg, ...]", argv, file)
    if len(argv) > MAX_WORDS:
        raise InputError(f"{key}.command", f"at most {MAX_WORDS} words", len(argv), file)
    words = [_word(w, f"{key}.command[{i}]", file, first=i == 0) for i, w in enumerate(argv)]
    here = os.path.dirname(os.path.abspath(file)) if file else os.getcwd()
    python = words[0] in PYTHON_NAMES or _is_python(words[0])
    if words[0] not in PYTHON_NAMES:
        words[0] = _executable(words[0], here, f"{key}.command[0]", file)
    imports_torch = False
    if python:
        words, imports_torch = _python_program(words, here, key, file)
    env = workload.get("env", {})
    if not isinstance(env, dict):
        raise InputError(f"{key}.env", "a mapping of NAME: value", env, file)
    env_items = []
    for name, value in env.items():
        where = f"{key}.env.{name}"
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise InputError(where, "an environment variable name (letters, digits, _)", name, file)
        if name in RESERVED_ENV or name.startswith(RESERVED_PREFIX):
            raise InputError(where, "a variable dtnet does not set itself (it sets RANK, WORLD_SIZE, MASTER_*, "
                                    "LOCAL_*, GLOO_SOCKET_IFNAME, DTNET_*)", name, file)
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise InputError(where, "a string value", value, file)
        env_items.append((name, _word(str(value), where, file, first=False)))
    profile = workload.get("profile", False)
    if not isinstance(profile, bool):
        raise InputError(f"{key}.profile", "true or false", profile, file)
    port = workload.get("master_port", DEFAULT_MASTER_PORT)
    if isinstance(port, bool) or not isinstance(port, int) or not 1024 <= port <= 65535:
        raise InputError(f"{key}.master_port", "a TCP port in 1024..65535", port, file)
    if imports_torch and importlib.util.find_spec("torch") is None:
        raise InputError(f"{key}.command", TORCH_HINT, "no module named torch", file)
    resolved = {**workload, "command": words}
    return resolved, ProgramSpec(tuple(words), tuple(env_items), profile, port, imports_torch)


def _word(w, key, file, first: bool) -> str:
    if isinstance(w, bool) or not isinstance(w, (str, int)):
        raise InputError(key, "a string (one argv word; quote numbers with a decimal point)", w, file)
    w = str(w)
    if first and not w:
        raise InputError(key, "a program name or path", w, file)
    if len(w) > MAX_WORD_CHARS:
        raise InputError(key, f"a word of at most {MAX_WORD_CHARS} characters", f"{len(w)} characters", file)
    if any(not c.isprintable() for c in w):
        raise InputError(key, "printable characters only (no NUL, newline or other control character)", w, file)
    return w


def _is_python(path: str) -> bool:
    return os.path.basename(path).startswith("python")


def _executable(word: str, here: str, key: str, file) -> str:
    if "/" in word:
        path = word if os.path.isabs(word) else os.path.normpath(os.path.join(here, word))
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise InputError(key, "an executable file (a relative path is relative to the experiment file)",
                             word, file)
        return path
    found = shutil.which(word)
    if found is None:
        raise InputError(key, "a program on PATH, python, or a path to an executable", word, file)
    return word


def _python_program(words: list[str], here: str, key: str, file) -> tuple[list[str], bool]:
    """Resolve the script of `python [options] script.py ...` and tell whether the program
    imports torch: the script, the `-m` module's source or the `-c` code, read, not run."""
    i = 1
    while i < len(words):
        w = words[i]
        if w in ("-m", "-c"):
            if i + 1 >= len(words):
                raise InputError(f"{key}.command[{i}]", f"a {'module' if w == '-m' else 'code string'} after {w}",
                                 "the end of the command", file)
            if w == "-c":
                return words, _imports_torch(words[i + 1])
            src = _module_source(words[i + 1], here)
            return words, src is not None and _imports_torch(src)
        if w.startswith("-"):
            i += 2 if w in ("-X", "-W") else 1
            continue
        path = w if os.path.isabs(w) else os.path.normpath(os.path.join(here, w))
        if not os.path.isfile(path):
            raise InputError(f"{key}.command[{i}]", "a Python script (a relative path is relative to the "
                                                    "experiment file)", w, file)
        words = words[:i] + [path] + words[i + 1:]
        try:
            with open(path, encoding="utf-8") as f:
                return words, _imports_torch(f.read())
        except (OSError, UnicodeDecodeError):
            return words, False
    return words, False


def _module_source(module: str, here: str) -> str | None:
    """The source of a module as `python -m` would find it from the experiment's folder, without
    importing anything (importing a package runs its code); None when not found."""
    parts = module.split(".")
    if not all(p.isidentifier() for p in parts):
        return None
    import sys
    for base in [here, *[p for p in sys.path if p]]:
        for cand in (os.path.join(base, *parts) + ".py", os.path.join(base, *parts, "__main__.py")):
            if os.path.isfile(cand):
                try:
                    with open(cand, encoding="utf-8") as f:
                        return f.read()
                except (OSError, UnicodeDecodeError):
                    return None
    return None


def _imports_torch(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False  # Python will say what is wrong when it runs it
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "torch":
            return True
    return False


# -- plans ------------------------------------------------------------------

def rank_plans(spec: ProgramSpec, job: str, hosts: list[str], fabric, start_offset_s: float) -> list[dict]:
    """What each rank's process gets: argv, environment (torchrun's variables), where it runs
    and writes (paths relative to the run folder). The engine adds the interface name and
    the interpreter."""
    master = fabric.node(hosts[0])["ip"]
    servers = [fabric.node(h).get("server") for h in hosts]
    by_server = None
    if all(s is not None for s in servers):
        order = list(dict.fromkeys(servers))
        by_server = {s: [r for r, x in enumerate(servers) if x == s] for s in order}
    out = []
    n = len(hosts)
    for r, h in enumerate(hosts):
        if by_server is not None:  # a server of GPUs is a torchrun node
            peers = by_server[servers[r]]
            local, local_n = peers.index(r), len(peers)
            node, nodes = list(by_server).index(servers[r]), len(by_server)
        else:  # every host is a node of one process
            local, local_n, node, nodes = 0, 1, r, n
        rel = os.path.join(PROGRAMS_DIR, job)
        env = {"RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(local_n),
               "GROUP_RANK": str(node), "GROUP_WORLD_SIZE": str(nodes), "NODE_RANK": str(node),
               "ROLE_RANK": str(r), "ROLE_WORLD_SIZE": str(n),
               "MASTER_ADDR": master, "MASTER_PORT": str(spec.master_port),
               # torchrun's default for several processes per machine; here they share 2 cores.
               "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
               "DTNET_JOB": job, "DTNET_HOST": h, **dict(spec.env)}
        out.append({"rank": r, "job": job, "host": h, "argv": list(spec.argv), "env": env,
                    "cwd": os.path.join(rel, f"rank{r}"), "stdout": os.path.join(rel, f"rank{r}.out"),
                    "stderr": os.path.join(rel, f"rank{r}.err"),
                    "profile_dir": os.path.join(rel, f"rank{r}", "profile") if spec.profile else None,
                    "start_offset_s": start_offset_s})
    return out


# -- markers ----------------------------------------------------------------

def parse_marker(line: str) -> dict | None:
    """A marker line's object, or None for any other line. Raises ValueError for a line that
    is meant as a marker (a JSON object with the "dtnet" key) but is malformed."""
    s = line.strip()
    if not (s.startswith("{") and f'"{MARKER}"' in s):
        return None
    try:
        msg = json.loads(s)
    except ValueError:
        raise ValueError("not valid JSON") from None
    if not isinstance(msg, dict) or MARKER not in msg:
        return None
    kind = msg[MARKER]
    if kind not in MARKER_KINDS:
        raise ValueError(f'"{MARKER}" is {kind!r}, expected one of ' + ", ".join(MARKER_KINDS))

    def num(name, required=True, minimum=0.0):
        v = msg.get(name)
        if v is None and not required:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < minimum or v == float("inf"):
            raise ValueError(f"{kind} marker: {name} must be a number >= {minimum:g}, found {v!r}")
        return float(v)

    end = num("end", required=False)
    out = {"kind": kind, "end": end}
    it = msg.get("iteration")
    if it is not None and (isinstance(it, bool) or not isinstance(it, int) or it < 0):
        raise ValueError(f"{kind} marker: iteration must be an integer >= 0, found {it!r}")
    out["iteration"] = it
    if kind == "iteration":
        if it is None:
            raise ValueError("iteration marker: iteration must be an integer >= 0, found None")
        out["time_s"] = num("time_s")
        return out
    op = msg.get("op")
    if not isinstance(op, str) or not op or not op.replace("_", "").isalnum():
        raise ValueError(f"collective marker: op must be a name like all_reduce, found {op!r}")
    out["op"] = op
    size = msg.get("size_bytes")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"collective marker: size_bytes must be an integer >= 0, found {size!r}")
    out["size_bytes"] = size
    out["start"] = num("start", required=False)
    out["time_s"] = num("time_s", required=False)
    if out["start"] is None and out["time_s"] is None:
        raise ValueError("collective marker: start or time_s is needed")
    for name in ("id", "group", "algorithm"):
        v = msg.get(name)
        if v is not None and not isinstance(v, str):
            raise ValueError(f"collective marker: {name} must be a string, found {v!r}")
        out[name] = v
    ranks = msg.get("ranks")
    if ranks is not None and (isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1):
        raise ValueError(f"collective marker: ranks must be an integer >= 1, found {ranks!r}")
    out["ranks"] = ranks
    return out


def marker_event(m: dict, job: str, rank: int, world_size: int, scale_bytes: float, read_at: float,
                 seq: int) -> dict:
    """The events.jsonl event of one marker. Times are the wall clock (the program's `end`, else
    when the runner read the line); sizes real-cluster (the program's bytes / scale.bytes), as
    every event. seq: this rank's count of collectives so far, the id when the marker has none."""
    end = m["end"] if m["end"] is not None else read_at
    if m["kind"] == "iteration":
        return {"kind": "iteration", "job": job, "rank": rank, "iteration": m["iteration"],
                "start": end - m["time_s"], "end": end, "source": "program"}
    start = m["start"] if m["start"] is not None else end - m["time_s"]
    group = m["group"] or "world"
    ev = {"kind": "collective", "job": job, "rank": rank, "op_id": m["id"] or f"{group}#{seq}",
          "op": m["op"], "algorithm": m["algorithm"] or "real", "group": group,
          "size_bytes": round(m["size_bytes"] / scale_bytes), "size_bytes_emulated": m["size_bytes"],
          "ranks": m["ranks"] or world_size, "start": start, "end": max(end, start), "source": "program"}
    if m["iteration"] is not None:
        ev["iteration"] = m["iteration"]
    return ev

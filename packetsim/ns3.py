"""The ns-3 side: building the C++ driver against Debian's libns3-dev and running a scenario.

The driver is built once per source version into the user's cache folder (make test and
scripts/bootstrap.sh build it ahead); `execute` runs it on a scenario file and reads back its
JSON lines. Nothing here knows about experiments.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile

from badinput import InputError

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "driver.cc")
NS3_VERSION = "3.37"
NS3_LIBS = ("core", "network", "internet", "point-to-point", "traffic-control")
HEADER = "/usr/include/ns3/tcp-cubic.h"
INSTALL = "apt-get install -y libns3-dev g++, or make packet"


class NotInstalled(InputError):
    """ns-3 or a compiler is missing: the one-line error says how to install them (exit 2)."""


def available() -> bool:
    """True when the driver can be built or is built: the tests that need ns-3 skip otherwise."""
    return os.path.exists(binary_path()) or _headers() and shutil.which("g++") is not None


def _headers() -> bool:
    return bool(optimized_prefix()) or os.path.exists(HEADER)


# ns-3 allocates and frees a packet, its buffer and its tags at every hop; with glibc's malloc
# that was 16% of the driver's time, tcmalloc (Debian's libtcmalloc-minimal4) takes a quarter
# off the run. Linked when present; the results do not depend on it.
TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"


def _cache() -> str:
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "dtnet")


def optimized_prefix() -> str | None:
    """Where scripts/build-ns3-optimized.sh installed ns-3 3.37 with the optimized profile (logging
    and asserts compiled out, -O3 -march=native), or None: then Debian's library. The driver links
    it whenever it is there; DTNET_NS3_LIBRARY=debian keeps Debian's (to compare the two)."""
    prefix = os.path.join(_cache(), f"ns3-{NS3_VERSION}-optimized")
    if os.environ.get("DTNET_NS3_LIBRARY") == "debian" or not os.path.exists(os.path.join(prefix, ".complete")):
        return None
    return prefix


def library() -> str:
    """Which ns-3 the driver links, for summary.json `model.simulator`."""
    return "rebuilt from Debian's source, optimized profile" if optimized_prefix() else "Debian libns3-dev"


def link_flags() -> list[str]:
    prefix = optimized_prefix()
    if prefix:
        lib = os.path.join(prefix, "lib")
        ns3 = [f"-I{os.path.join(prefix, 'include')}", f"-L{lib}", f"-Wl,--disable-new-dtags,-rpath,{lib}"] + \
              [f"-lns3-{x}-optimized" for x in NS3_LIBS]
    else:
        ns3 = [f"-lns3-{x}" for x in NS3_LIBS]
    return ns3 + ([f"-l:{os.path.basename(TCMALLOC)}"] if os.path.exists(TCMALLOC) else [])


def binary_path() -> str:
    with open(SOURCE, "rb") as f:
        digest = hashlib.sha256(f.read() + " ".join(link_flags()).encode()).hexdigest()[:12]
    return os.path.join(_cache(), f"dtnet-ns3-{NS3_VERSION}-{digest}")


def build(log=print) -> str:
    """The driver's path, compiling it first when this source version was not built yet."""
    path = binary_path()
    if os.path.exists(path):
        return path
    if not _headers() or shutil.which("g++") is None:
        raise NotInstalled("engine", f"ns-3 {NS3_VERSION} and g++ ({INSTALL})", "not installed")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    log(f"[packet] building the ns-3 driver ({os.path.basename(path)}), once")
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".build-")
    os.close(fd)
    # the driver's own code is 4.5% of a run: -O2, with -march=native only beside a native ns-3
    cmd = ["g++", "-O2", "-std=c++17"] + (["-march=native"] if optimized_prefix() else []) + \
          ["-o", tmp, SOURCE] + link_flags()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        os.unlink(tmp)
        raise RuntimeError(f"building the ns-3 driver failed: {r.stderr.strip()[-400:]}")
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)  # whole or not at all: a concurrent build loses nothing
    return path


def execute(scenario_path: str, on_progress=None, log=print, on_poll=None) -> dict:
    """Run the driver on a scenario file: {meta, tasks, conns, queues} as it printed them.
    on_progress(sim_s, tasks_done, tasks, wall_s, events) about once a wall second; on_poll(rec)
    at each poll line (a scenario with a controller in the loop) returns the command lines to send."""
    exe = build(log)
    err_path = scenario_path + ".err"
    try:
        return _run(exe, scenario_path, err_path, on_progress, on_poll)
    finally:
        # a run interrupted or failed keeps no half-read output; one asked for the driver's trace
        # (DTNET_NS3_TRACE, DTNET_NS3_DROPS) keeps it: a run with a controller in the loop is traced so
        if os.path.exists(err_path) and not (os.environ.get("DTNET_NS3_TRACE") or os.environ.get("DTNET_NS3_DROPS")):
            os.unlink(err_path)


def _run(exe: str, scenario_path: str, err_path: str, on_progress, on_poll) -> dict:
    res: dict = {"meta": None, "tasks": [], "conns": [], "queues": [], "polls": 0}
    with open(err_path, "w") as err_f:
        p = subprocess.Popen([exe, scenario_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err_f,
                             text=True, bufsize=1)
        try:
            for line in p.stdout:
                if line.startswith("progress "):
                    parts = line.split()
                    if len(parts) == 6 and on_progress is not None:
                        on_progress(float(parts[1]), int(parts[2]), int(parts[3]), float(parts[4]), int(parts[5]))
                    continue
                rec = json.loads(line)
                kind = rec.pop("type")
                if kind in ("poll", "gate"):  # a gate line (a co-scheduling hold task) has "task"
                    res["polls"] += kind == "poll"
                    cmds = on_poll(rec) if on_poll is not None else []
                    p.stdin.write("".join(c + "\n" for c in cmds) + "go\n")
                    p.stdin.flush()
                elif kind == "meta":
                    res["meta"] = rec
                else:
                    res[kind + "s"].append(rec)
            p.stdin.close()
            rc = p.wait()
        except BaseException:
            p.kill()
            p.wait()
            raise
    with open(err_path) as f:
        err = [x.strip() for x in f if x.strip()]
    res["stderr"] = err
    if rc not in (0, 3) or res["meta"] is None:  # 3: it ended before every task finished (the results say which)
        raise RuntimeError(f"the ns-3 driver failed (exit {rc}): {' | '.join(err[-3:]) or 'no message'}")
    return res

if __name__ == "__main__":  # make packet: build the driver ahead of the first run
    print(build())

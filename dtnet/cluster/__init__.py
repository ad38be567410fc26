"""Sweeps beyond one machine, on Dask's distributed scheduler (docs/cluster-sweeps.md).

    dtnet run SWEEP.yaml --cluster tcp://HOST:8786   # a running scheduler's workers
    dtnet run SWEEP.yaml --workers 2                 # a local cluster of 2 worker processes
    dtnet run SWEEP.yaml --cluster tls://HOST:8786 --tls DIR   # over TLS (dtnet scheduler --tls DIR)
    dtnet scheduler / dtnet worker ADDRESS           # start them on lab machines (127.0.0.1 unless --host)

The points run on workers, each in a child process; each point's folder comes back to the
sweep's folder here as bytes, so no file system is shared. Dask is an optional extra
(pip install 'dtnet[cluster]'); nothing here imports it until a cluster is asked for.
"""
from __future__ import annotations


def run_sweep(exp, out_dir: str, *, address: str | None = None, workers: int | None = None,
              log=print, points=None, tls_dir: str | None = None) -> dict:
    """experiment.sweep.run on a cluster: what it returns, the same folder as a local sweep."""
    from dtnet.cluster.client import session
    from experiment import sweep

    with session(address, workers, log=log, tls_dir=tls_dir) as executor:
        return sweep.run(exp, out_dir, None, points, log=log, execute=executor)

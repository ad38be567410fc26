"""`python -m dtnet.cluster.daskmain scheduler|worker [--no-http] DASK-ARGS`: Dask's own command
(the same click main), with no HTTP server at all under --no-http. Dask starts one for its
health and metrics routes even with --no-dashboard, on every interface by default."""
from __future__ import annotations

import sys


def _no_http_server(self, *args, **kwargs):
    """No HTTP listener: nothing to serve without a dashboard."""


def main(argv: list[str]) -> None:
    role, *rest = argv
    if rest[:1] == ["--no-http"]:
        from distributed.node import ServerNode
        ServerNode.start_http_server = _no_http_server
        rest = rest[1:]
    if role == "scheduler":
        from distributed.cli.dask_scheduler import main as dask_main
    else:
        from distributed.cli.dask_worker import main as dask_main
    sys.argv = [f"dask {role}", *rest]
    dask_main()


if __name__ == "__main__":
    main(sys.argv[1:])

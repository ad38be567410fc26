"""dtnet: packet-level emulation of distributed-training traffic (the `dtnet` command is dtnet.cli)."""

"""The per-GPU agent: ``python -m emulator.agent PLAN.json`` inside one Mininet host.

Stdlib only, so that 32 of them start fast."""

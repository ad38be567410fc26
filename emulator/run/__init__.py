"""`dtnet run` on the emulator: bring up the testbed, start the agents, watch them, collect."""

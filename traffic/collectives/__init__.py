"""The collective communication layer: algorithms that turn a collective into transfer steps."""
from traffic.collectives.algorithms import (ALGORITHMS, OPS, build_schedule, effective_gpus_per_server,
                                            split_even)
from traffic.collectives.model import busbw_factor, predict_time_s
from traffic.collectives.schedule import Schedule, Transfer
from traffic.collectives.verify import ScheduleError, execute, verify

__all__ = ["ALGORITHMS", "OPS", "Schedule", "ScheduleError", "Transfer", "build_schedule", "busbw_factor", "predict_time_s",
           "effective_gpus_per_server", "execute", "split_even", "verify"]

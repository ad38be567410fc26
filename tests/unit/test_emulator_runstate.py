"""Two runs on one machine: a run folder is held by one live run at a time."""
import os

import pytest

from emulator.testbed import runstate
from experiment.engine import FolderBusy


def test_a_run_folder_held_by_a_live_run_is_refused_at_once(tmp_path):
    fd = runstate.lock_run_dir(str(tmp_path))
    (tmp_path / runstate.STATE_NAME).write_text('{"owner_pid": 4242}')
    with pytest.raises(FolderBusy) as e:
        runstate.lock_run_dir(str(tmp_path))
    assert "still going (pid 4242)" in str(e.value) and "another --out" in str(e.value)
    os.close(fd)  # the run ended (or died: the kernel drops the lock with the process)
    os.close(runstate.lock_run_dir(str(tmp_path)))

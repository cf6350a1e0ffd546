"""The learner's last-resort watchdog, in a real process: a call that never returns ends it loud."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

HUNG = """
    import sys, threading, time
    from pathlib import Path
    from learner.stalls import Watchdog

    def a_call_that_never_returns():
        threading.Event().wait()  # nobody sets it: a join, a lock or a socket that never answers

    dog = Watchdog(Path(sys.argv[1]), timeout_s=2.0)
    end = time.monotonic() + 4.0
    while time.monotonic() < end:  # a loop that comes back often (its work simulated): no alarm
        dog.pet()
        time.sleep(0.01)
    print("still alive after petting", flush=True)
    a_call_that_never_returns()
"""

FINISHES = """
    import sys, time
    from pathlib import Path
    from learner.stalls import Watchdog

    dog = Watchdog(Path(sys.argv[1]), timeout_s=0.5)
    dog.pet(budget_s=3.0)  # a long update, announced
    time.sleep(1.0)  # the update (simulated): longer than timeout_s, well within the budget
    dog.stop()
    time.sleep(3.0)  # past the budget too: stopped means stopped
    print("done", flush=True)
"""


def _run(code: str, log: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(log)], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def test_a_hung_learner_writes_its_stacks_to_the_log_and_exits_1(tmp_path):
    log = tmp_path / "learner.log"
    proc = _run(HUNG, log)
    assert proc.returncode == 1, proc.stderr
    assert "still alive after petting" in proc.stdout
    text = log.read_text()
    assert "Timeout" in text and "a_call_that_never_returns" in text, text


def test_a_budget_covers_a_long_step_and_stop_disarms(tmp_path):
    log = tmp_path / "learner.log"
    proc = _run(FINISHES, log)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done" and "Timeout" not in log.read_text()



def test_after_a_long_budget_the_first_plain_pet_re_arms_for_the_timeout_at_once(tmp_path):
    from learner.stalls import Watchdog
    dog = Watchdog(tmp_path / "log", timeout_s=30.0)
    try:
        dog.pet()
        dog.pet(budget_s=600.0)  # a long update
        assert dog.armed_for == 600.0
        dog.pet()  # the update is over: not left armed for 600 s until the next re-arming interval
        assert dog.armed_for == 30.0
    finally:
        dog.stop()
